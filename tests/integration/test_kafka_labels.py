"""Delayed outcomes on a real broker: examples on one topic without their labels, the labels on
another topic in another order (some never, some twice, some for unknown ids), joined by id; each
model's final state equals a plain run over the joined records in its labels' order."""
import csv
import json

import pytest
from kafka import KafkaProducer

from unitless.cli import main

from tests.integration.test_kafka_pipeline import create_topics
from tests.runners import prism_args
from tests.test_delayed_outcomes import assert_joined, train, write_join


def produce_rows(bootstrap, topic, path, fields):
    """A CSV file's rows as JSON messages keyed by model key (a key's records on one partition,
    in file order); a field left empty is left out."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    with open(path) as f:
        for row in csv.DictReader(f):
            value = {k: (v if k in ("id", "key") else float(v)) for k, v in row.items()
                     if k in fields and v != ""}
            producer.send(topic, key=row["key"].encode(), value=json.dumps(value).encode())
    producer.flush()
    producer.close()


@pytest.mark.parametrize("runner", ["fnapi", "prism"])
def test_labels_on_a_topic_of_their_own_join_their_examples(broker, tmp_path, runner):
    bootstrap = broker.bootstrap_servers
    features_topic, labels_topic = f"features-{runner}", f"labels-{runner}"
    create_topics(bootstrap, features_topic, labels_topic)
    features, labels, reference, bad = write_join(tmp_path, "features.csv", seed=3)
    produce_rows(bootstrap, features_topic, features, ("id", "key", "a", "b"))
    produce_rows(bootstrap, labels_topic, labels, ("id", "key", "label"))
    out = tmp_path / "joined"
    assert main(["train", "--input", f"kafka://{bootstrap}/{features_topic}", "--labels",
                 f"kafka://{bootstrap}/{labels_topic}", "--format", "jsonl", "--id-column",
                 "id", "--model-key-column", "key", "--chunk-size", "64", "--model-groups", "2",
                 "--model-dir", str(out / "models"), "--predictions", str(out / "p"),
                 "--dead-letter", str(out / "d"),
                 *(prism_args() if runner == "prism" else [])]) == 0
    topic = {f"{labels_topic}/{p}" for p in range(2)}  # (its two partitions)
    assert_joined(out, train(tmp_path, "plain", [reference]), topic, bad)


def test_labels_on_a_stream_are_refused_until_they_can_expire(broker, tmp_path, capsys):
    """(A label whose example never comes would hold its model's later labels for ever.)"""
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, "stream-features", "stream-labels")
    code = main(["train", "--input", f"kafka://{bootstrap}/stream-features", "--labels",
                 f"kafka://{bootstrap}/stream-labels", "--id-column", "id", "--model-dir",
                 str(tmp_path / "models"), *prism_args(streaming=True)])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "unitless: error: --labels joins an input that ends (files, or a topic read to its "
        "end); on a stream it needs --label-wait, which is not built yet")
