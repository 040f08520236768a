"""Hostile Kafka messages on a real broker: null values, invalid UTF-8, garbage, several lines in
one message and the file fuzz's hostile records, among good JSON, VW and CSV messages and
messages without a label. Every bad message comes back as a dead-letter message with the
identical value, every good one is predicted once (served where it has no label), and the models
equal those of a run over the labeled good messages alone."""
import json
import time

import numpy as np
import pytest
from kafka import KafkaConsumer

from tests.helpers.commands import create_topics, latest_models, send, train
from tests.helpers.records import HEADER, good_rows, hostile, text_record, unlabeled_record
from unitless.connectors.files import read_output
from unitless.parse.records import MAX_REASON

N_BAD, N_GOOD, PARTITIONS = 3_000, 1_500, 2


def kafka_hostile(fmt, rng, rows, nulls):
    """A hostile message value: the file fuzz's records, and what only a message can be."""
    kind = rng.integers(10)
    good = text_record(fmt, rows[rng.integers(len(rows))])
    if kind == 0 and nulls:
        return None                                   # a null value (a tombstone)
    if kind == 1:
        return [b"", b" ", b"\n", b"\r\n", b"\t"][rng.integers(5)]
    if kind == 2:
        return good + b"\n" + good                    # two records in one message
    if kind == 3:
        return b"\xff\xfe" + good
    return hostile(fmt, rng, rows[rng.integers(len(rows))])


def mixed_messages(fmt, seed, n_good, n_bad, nulls):
    """[(key, value, kind: "good", "served" or "bad")] in the order to send them: good ones
    keyed by model key (one partition per key keeps each model's order), a fifth as many
    without a label (served) and hostile ones among them."""
    rng = np.random.default_rng(seed)
    rows = good_rows(rng, n_good)
    unlabeled = [{**row, "id": "u" + row["id"]}
                 for row in good_rows(np.random.default_rng(seed + 100), n_good // 5)]
    slots = ["good"] * n_good + ["served"] * len(unlabeled) + ["bad"] * n_bad
    rng.shuffle(slots)
    out, good, served = [], iter(rows), iter(unlabeled)
    for slot in slots:
        if slot == "good":
            row = next(good)
            out.append((row["segment"].encode(), text_record(fmt, row), "good"))
        elif slot == "served":
            row = next(served)
            out.append((row["segment"].encode(), unlabeled_record(fmt, row, len(out)),
                        "served"))
        else:
            value = kafka_hostile(fmt, rng, rows, nulls)  # kafka-python sends no unkeyed null
            out.append((b"tombstone" if value is None else None, value, "bad"))
    bad = [i for i, (*_, kind) in enumerate(out) if kind == "bad"]
    out[bad[len(bad) // 2]] = (None, b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "bad")
    out[bad[len(bad) // 3]] = (None, b"x" * 300_000, "bad")
    return out



def sent(bootstrap, topic, batch):
    """Send the messages; where each went, (source as the reader names it, offset), in order."""
    return [(f"{topic}/{partition}", offset) for partition, offset in send(
        bootstrap, topic, [m[:2] for m in batch], linger_ms=5, max_request_size=2 << 20)]


def consume(bootstrap, topic, expected, timeout=60):
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=2000)
    out = []
    deadline = time.time() + timeout
    while len(out) < expected and time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            out.extend(records)
    consumer.close()
    return out


def options(bootstrap, topic, fmt):
    """A run's options over ``topic`` in ``fmt``, its dead letters on a topic beside it."""
    keyed = {"jsonl": ["--model-key-column", "segment"], "vw": [],
             # a CSV message holds no header: its columns are named on the command line
             "csv": ["--columns", HEADER.decode().strip(), "--id-column", "id",
                     "--model-key-column", "segment"]}[fmt]
    return ["--input", f"kafka://{bootstrap}/{topic}", "--format", fmt, *keyed,
            "--dead-letter", f"kafka://{bootstrap}/{topic}-dead", "--chunk-size", "300",
            "--max-dead-fraction", "1"]


@pytest.mark.parametrize("fmt", ["jsonl", "vw", "csv"])
def test_hostile_messages_become_dead_letters_byte_for_byte(broker, tmp_path, fmt):
    check_fuzz(broker.bootstrap_servers, tmp_path, fmt, N_GOOD, N_BAD, nulls=False,
               name=f"hostile-{fmt}")


def test_messages_with_null_values_become_dead_letters_with_null_values(broker, tmp_path):
    check_fuzz(broker.bootstrap_servers, tmp_path, "jsonl", 300, 600, nulls=True, name="nulls")


def check_fuzz(bootstrap, tmp_path, fmt, n_good, n_bad, nulls, name):
    topic, good_topic = name, f"{name}-good"
    create_topics(bootstrap, topic, f"{topic}-dead", good_topic, f"{good_topic}-dead",
                  partitions=PARTITIONS)
    batch = mixed_messages(fmt, 7, n_good, n_bad, nulls)
    places = sent(bootstrap, topic, batch)
    bad = {place: value for place, (_, value, kind) in zip(places, batch) if kind == "bad"}
    kinds = {place: kind for place, (*_, kind) in zip(places, batch) if kind != "bad"}
    assert len(bad) == n_bad and list(kinds.values()).count("good") == n_good
    assert (None in bad.values()) == nulls
    sent(bootstrap, good_topic, [m for m in batch if m[2] == "good"])

    out = train(tmp_path / "mixed", *options(bootstrap, topic, fmt))
    dead = consume(bootstrap, f"{topic}-dead", len(bad))
    got = {}
    for m in dead:
        headers = dict(m.headers)
        place = (headers["unitless.source"].decode(), int(headers["unitless.position"]))
        assert place not in got, place
        got[place] = m.value
        assert 0 < len(headers["unitless.reason"].decode()) <= MAX_REASON + 1
    assert set(got) == set(bad)
    assert all(got[p] == bad[p] for p in bad), next(p for p in bad if got[p] != bad[p])

    predicted = read_output(str(out / "pred")).select(["source", "position", "served"])
    assert sorted((r["source"], r["position"], r["served"]) for r in predicted.to_pylist()) == \
        sorted((*place, kind == "served") for place, kind in kinds.items())

    alone = latest_models(train(tmp_path / "good", *options(bootstrap, good_topic, fmt)))
    assert consume(bootstrap, f"{good_topic}-dead", 1, timeout=3) == []
    learned = latest_models(out)
    assert set(learned) == set(alone) and learned
    for key, table in learned.items():
        assert table.drop_columns(["name"]).equals(alone[key].drop_columns(["name"])), key
        m1, m2 = (json.loads(t.schema.metadata[b"unitless"]) for t in (table, alone[key]))
        assert (m1["examples_seen"], m1["cumulative_loss"]) == (m2["examples_seen"],
                                                                 m2["cumulative_loss"])
