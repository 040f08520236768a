"""Delivery under SIGKILL with a real broker's topics as input and output: kill-and-resume
campaigns (tests/helpers/killing.py) lose no prediction, learn every example exactly once, and
end with the models of an uninterrupted run, bit for bit."""
import json
import re
import subprocess
import sys
import time

import numpy as np
from kafka import KafkaAdminClient, KafkaConsumer

from tests.helpers.commands import create_topics, send
from tests.helpers.killing import campaigns, final_models, kills

KEYS = ("alpha", "beta", "gamma")
N = 30_000
KILLS = kills(30)


def example_messages(n, seed=3):
    """n JSON examples, keyed by model key."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * [1e-3, 1.0, 1e4]
    y = np.where(X @ [1e3, -1.0, 1e-4] + rng.normal(size=n) > 0, 1, -1)
    return [(KEYS[i % 3].encode(), json.dumps(
        {"id": str(i), "segment": KEYS[i % 3], "label": int(y[i]),
         **{name: float(v) for name, v in zip("abc", X[i])}}).encode()) for i in range(n)]



def topic_command(bootstrap, topic, out, resume=True):
    return [sys.executable, "-m", "unitless.cli", "train",
            "--input", f"kafka://{bootstrap}/{topic}", "--id-column", "id",
            "--model-key-column", "segment", "--chunk-size", "500", "--checkpoint-every", "1000",
            "--model-dir", str(out / "models"),
            "--predictions", f"kafka://{bootstrap}/{out.name}-pred",
            "--dead-letter", f"kafka://{bootstrap}/{out.name}-dead",
            *(["--resume"] if resume else [])]


def consume_predictions(bootstrap, topic, at_least, timeout=60):
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None)
    rows, deadline = [], time.time() + timeout
    while time.time() < deadline:
        batch = consumer.poll(timeout_ms=1000)
        for records in batch.values():
            rows.extend(json.loads(r.value) for r in records)
        if not batch and len({r["id"] for r in rows}) >= at_least:
            break
    consumer.close()
    return rows


def test_thirty_kills_on_kafka_lose_no_prediction_and_learn_every_example_once(broker,
                                                                                 tmp_path):
    bootstrap, topic = broker.bootstrap_servers, "kill-input"
    runs = [tmp_path / "whole"] + [tmp_path / f"crash{n}" for n in range(1, 11)]
    create_topics(bootstrap, topic, *[f"{r.name}-{kind}" for r in runs
                                       for kind in ("pred", "dead")])
    send(bootstrap, topic, example_messages(N), linger_ms=20)
    began = time.time()
    subprocess.run(topic_command(bootstrap, topic, runs[0], resume=False), check=True,
                   capture_output=True)
    duration = time.time() - began
    expected = final_models(KEYS, runs[0] / "models")
    reference = {r["id"]: r for r in consume_predictions(bootstrap, "whole-pred", N)}
    assert len(reference) == N

    def check(n):
        got = final_models(KEYS, runs[n] / "models")
        for key in KEYS:
            assert got[key][0].equals(expected[key][0]), key
            assert got[key][1:] == expected[key][1:] and got[key][1] == N // 3
        rows = consume_predictions(bootstrap, f"crash{n}-pred", N)
        assert {r["id"] for r in rows} == set(reference)
        for r in rows:  # duplicates (at least once) are identical to the original
            want = reference[r["id"]]
            assert (r["model_key"], r["examples_seen"], r["prediction"]) == (
                want["model_key"], want["examples_seen"], want["prediction"])

    campaigns(lambda n: topic_command(bootstrap, topic, runs[n]), lambda n: runs[n] / "models",
              check, KILLS, duration)


def test_a_resume_past_what_retention_kept_fails_in_one_line(broker, tmp_path, capsys):
    """Records a resumed run must read again, deleted by the broker's retention: the run fails
    before it starts, instead of losing them."""
    from kafka import TopicPartition

    from unitless.cli.main import main
    bootstrap, topic = broker.bootstrap_servers, "retention-input"
    create_topics(bootstrap, topic, "run-pred", "run-dead", partitions=1)
    send(bootstrap, topic, example_messages(90))
    out = tmp_path / "run"
    assert main(topic_command(bootstrap, topic, out, resume=False)[3:]) == 0
    send(bootstrap, topic, example_messages(90, seed=4))
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.delete_records({TopicPartition(topic, 0): 120})
    admin.close()
    assert main(topic_command(bootstrap, topic, out)[3:]) == 2
    said = re.fullmatch(
        f"unitless: error: --resume: {topic}/0 must be read again from offset (\\d+), but its "
        "log starts at 120: (\\d+) records were deleted \\(retention\\) and would be lost; "
        "keep the topic's records longer than the time between checkpoints \\(and "
        "--label-wait\\)", capsys.readouterr().err.strip().splitlines()[-1])
    assert said and 0 < int(said[1]) <= 90 and int(said[2]) == 120 - int(said[1])
