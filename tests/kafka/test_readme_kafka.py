"""The README's "Serve and learn on Kafka" recipe, run as written on a free port: its broker
started by its own command, its streaming run on Prism, the README's event answered on the
scores topic before its label is known (served), then learned once it is."""
import json
import re
import subprocess
import time

from kafka import KafkaConsumer

from deploy.kafka.local_kafka import free_port
from tests.helpers.commands import create_topics, send
from tests.helpers.killing import kill_group
from tests.helpers.readme import README, commands, run
from tests.helpers.runners import PRISM

SECTION = "Serve and learn on Kafka"


def _event():
    text = README.read_text()
    section = text[text.index(f"## {SECTION}"):]
    return json.loads(" ".join(re.search(r'`(\{"id".*?\})`', section, re.DOTALL)
                               .group(1).split()))


def _scores(consumer, want, deadline):
    while time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            for record in records:
                row = json.loads(record.value)
                if want(row):
                    return record.key, row
    raise AssertionError("no such prediction on the scores topic in time")


def test_the_kafka_recipe_serves_an_event_then_learns_it(tmp_path):
    start, train = commands(SECTION)
    port = str(free_port())
    broker = f"127.0.0.1:{port}"
    run(f"{start} --dir {tmp_path / 'kafka'}", tmp_path, replace=[("9092", port)])
    process = None
    try:
        create_topics(broker, "mail", "mail-scores", "mail-dead", partitions=1)
        consumer = KafkaConsumer("mail-scores", bootstrap_servers=broker, group_id=None,
                                 auto_offset_reset="earliest")
        process = run(train, tmp_path, background=True, start_new_session=True,
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                      replace=[("9092", port), ("~/.cache/unitless/prism/2.77.0/prism", PRISM)])
        event = _event()
        assert event["customer"] == "c42" and "label" not in event
        send(broker, "mail", [(b"c42", json.dumps(event).encode())])
        key, served = _scores(consumer, lambda r: r["id"] == "m17", time.time() + 180)
        assert (key, served["served"], served["examples_seen"], served["loss"]) == (
            b"c42", True, 0, None)
        send(broker, "mail", [(b"c42", json.dumps({**event, "label": 1}).encode())])
        _, learned = _scores(consumer, lambda r: r["id"] == "m17" and not r["served"],
                             time.time() + 120)
        assert (learned["label"], learned["examples_seen"]) == (1, 1)
        assert learned["prediction"] == served["prediction"]  # (nothing learned in between)
        assert process.poll() is None  # (a stream: it runs until stopped)
        consumer.close()
    finally:
        if process is not None:
            kill_group(process)
        run(f"python deploy/kafka/local_kafka.py stop --dir {tmp_path / 'kafka'}", tmp_path)
