"""Delayed outcomes on a real broker: examples on one topic without their labels, the labels on
another topic in another order (some never, some twice, some for unknown ids), joined by id; each
model's final state equals a plain run over the joined records in its labels' order."""
import csv
import json
import time

import numpy as np
import pytest

from unitless.cli import main
from unitless.connectors.files import read_output
from unitless.store import join as label_join

from tests.commands import create_topics, send, train
from tests.integration.test_kafka_streaming import seen, streaming, wait_for
from tests.killing import kill_group
from tests.runners import prism_args, runner_args
from tests.test_delayed_outcomes import JOINED, assert_joined, write_join
from tests.killing import final_models
from tests.test_order import KEYS


def csv_messages(path, fields):
    """A CSV file's rows as JSON messages keyed by model key (a key's records on one partition,
    in file order); a field left empty is left out."""
    with open(path) as f:
        return [(row["key"].encode(), json.dumps(
            {k: (v if k in ("id", "key") else float(v)) for k, v in row.items()
             if k in fields and v != ""}).encode()) for row in csv.DictReader(f)]


@pytest.mark.parametrize("runner", ["fnapi", "prism"])
def test_labels_on_a_topic_of_their_own_join_their_examples(broker, tmp_path, runner):
    bootstrap = broker.bootstrap_servers
    features_topic, labels_topic = f"features-{runner}", f"labels-{runner}"
    create_topics(bootstrap, features_topic, labels_topic)
    features, labels, reference, bad = write_join(tmp_path, "features.csv", seed=3)
    send(bootstrap, features_topic, csv_messages(features, ("id", "key", "a", "b")))
    send(bootstrap, labels_topic, csv_messages(labels, ("id", "key", "label")))
    out = tmp_path / "joined"
    train(out, "--input", f"kafka://{bootstrap}/{features_topic}", "--labels",
          f"kafka://{bootstrap}/{labels_topic}", "--format", "jsonl", *JOINED,
          *runner_args(runner))
    topic = {f"{labels_topic}/{p}" for p in range(2)}  # (its two partitions)
    assert_joined(out, train(tmp_path / "plain", "--input", reference, *JOINED), topic, bad)


WAIT = 10.0  # s: --label-wait


def timed_join(n, seed):
    """Features and labels records with record times (s) for ``n`` examples, 1 s apart: most
    labels within WAIT of their example, after it or before; some later than that, some too
    early, some never; labels of unknown ids, second labels, repeated features records.
    Returns (features [(key, t, record)], labels [(key, t, record)], the reference: each model
    key's joined records in label order with the expired ones at their expiry time
    [(key, record with label)], the expired examples [(id, expiry time)], {reason: count})."""
    rng = np.random.default_rng(seed)
    features, labels, rows = [], [], {}
    for i in range(n):
        key, t = KEYS[rng.integers(len(KEYS))], 1.0 * i + rng.uniform(0, 0.5)
        a, b = rng.normal() * 1e3, rng.normal() * 1e-2
        y = 1 if a / 1e3 + b / 1e-2 + rng.normal() > 0 else -1
        rows[f"e-{i}"] = (key, t, a, b, y)
        features.append((key, t, {"id": f"e-{i}", "key": key, "a": a, "b": b}))
        if rng.random() < 0.02:  # (an at-least-once producer's retry)
            features.append((key, t + 0.1, {"id": f"e-{i}", "key": key, "a": a + 1, "b": b}))
        kind = rng.choice(["after", "before", "late", "early", "never"],
                          p=[0.7, 0.1, 0.06, 0.06, 0.08])
        delay = {"after": rng.uniform(0.2, 8), "before": -rng.uniform(0.2, 8),
                 "late": rng.uniform(12, 18), "early": -rng.uniform(12, 18)}.get(kind)
        if delay is not None:
            labels.append((key, t + delay, {"id": f"e-{i}", "key": key, "label": y}))
            if kind == "after" and rng.random() < 0.03:
                labels.append((key, t + delay + 0.5, {"id": f"e-{i}", "key": key, "label": -y}))
        if rng.random() < 0.02:
            labels.append((key, t + 1.0, {"id": f"unknown-{i}", "key": key, "label": 1}))
    features.sort(key=lambda e: e[1])
    labels.sort(key=lambda e: e[1])
    # the rule, model key by model key: an example and its label join when at most WAIT
    # apart; an example not joined expires at its time + WAIT, learned then with label -1
    dead, events, closed, first = {}, [], {}, set()

    def bad(reason):
        dead[reason] = dead.get(reason, 0) + 1
    for key, t, f in features:
        if f["id"] in first:
            bad(label_join.SECOND_FEATURES)
        first.add(f["id"])
    for key, t, label in labels:
        i = label["id"]
        if i not in rows:
            bad(label_join.NEVER_SERVED)
        elif i in closed:
            bad(label_join.SECOND_LABEL if closed[i] == "joined" else label_join.LATE_LABEL)
        elif abs(t - rows[i][1]) <= WAIT:
            closed[i] = "joined"
            events.append((t, 0, key, i, label["label"]))
        elif t > rows[i][1] + WAIT:
            closed[i] = "expired"
            bad(label_join.LATE_LABEL)
        else:
            bad(label_join.NEVER_SERVED)
    for i, (key, t, *_) in rows.items():
        if closed.get(i) != "joined":
            events.append((t + WAIT, 1, key, i, -1))
    events.sort(key=lambda e: e[:2])
    reference = [(key, {"id": i, "key": key, "a": rows[i][2], "b": rows[i][3], "label": y})
                 for _, _, key, i, y in events]
    expiries = [(i, at) for at, expired, _, i, _ in events if expired]
    return features, labels, reference, expiries, dead


def timed_messages(records, start, stamp=None):
    """Records [(key, t, record)] as JSON messages keyed by model key, timestamped ``start`` +
    t seconds (or all ``stamp``, s)."""
    return [(key.encode(), json.dumps(record).encode(),
             int(1000 * (start + t if stamp is None else stamp))) for key, t, record in records]


@pytest.mark.parametrize("runner", ["fnapi", "prism"])
def test_what_waits_past_the_label_wait_expires_on_record_time(broker, tmp_path, runner):
    """Two topics keyed by model key, their records timestamped (an hour ago: replaying a
    backlog, which the reader's clock would expire at once): see ``check_timed_join``."""
    check_timed_join(broker.bootstrap_servers, tmp_path, runner, runner_args(runner))


def test_the_records_own_time_column_is_the_clock(broker, tmp_path):
    """--time-column: the same records carrying their times in a field, on two topics whose
    timestamps are all one moment (which as the clock would expire nothing): see
    ``check_timed_join``."""
    check_timed_join(broker.bootstrap_servers, tmp_path, "column", [], "column")


def test_with_a_time_column_files_expire_on_record_time_too(tmp_path):
    """--time-column gives files record time: --label-wait then applies to them as to topics
    (see ``check_timed_join``; files by name, each in line order)."""
    check_timed_join(None, tmp_path, "files", [], "files")


def check_timed_join(bootstrap, tmp_path, name, runner_args, times="kafka"):
    """``timed_join``'s records on two topics, read to their ends by a run on ``runner_args``:
    each model's final state equals a plain run over its joined records in label order and its
    expired examples learned with --expired-label at their expiry time; the dead letters are
    exactly the labels too late, too early, second or of unknown ids, and the repeated
    features records. The records' times are their Kafka timestamps (``times`` "kafka"), or
    a ``ts`` field read by --time-column on topics ("column") or in files ("files")."""
    features, labels, reference, expiries, bad = timed_join(500, seed=5)
    start = time.time() - 3600
    if times != "kafka":
        features, labels = [[(k, t, {**r, "ts": start + t}) for k, t, r in records]
                            for records in (features, labels)]
    if times == "files":
        inputs = [tmp_path / "features.jsonl", tmp_path / "labels.jsonl"]
        for path, records in zip(inputs, (features, labels)):
            path.write_text("".join(json.dumps(r) + "\n" for _, _, r in records))
        inputs = [str(p) for p in inputs]
    else:
        inputs = [f"kafka://{bootstrap}/timed-{part}-{name}" for part in ("features", "labels")]
        create_topics(bootstrap, *(i.rsplit("/", 1)[1] for i in inputs))
        for url, records in zip(inputs, (features, labels)):
            send(bootstrap, url.rsplit("/", 1)[1],
                 timed_messages(records, start, stamp=time.time() if times == "column" else None))
    plain = tmp_path / "reference.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for _, r in reference))
    out = tmp_path / "joined"
    train(out, "--input", inputs[0], "--labels", inputs[1], "--label-wait", f"{WAIT:g}s",
          "--expired-label", "-1", "--format", "jsonl", *JOINED,
          *(["--time-column", "ts"] if times != "kafka" else []), *runner_args)
    got, want = final_models(KEYS, str(out / "models")), final_models(KEYS, str(train(
        tmp_path / "plain", "--input", plain, *JOINED, "--format", "jsonl") / "models"))
    for key in KEYS:
        assert got[key][0].equals(want[key][0])
        assert got[key][1] == want[key][1]
    dead = read_output(str(out / "dead")).to_pylist()
    assert {reason: sum(d["reason"] == reason for d in dead) for reason in bad} == bad
    assert len(dead) == sum(bad.values())
    rows = read_output(str(out / "pred")).to_pylist()
    assert sorted(r["id"] for r in rows if r["served"]) == sorted(f"e-{i}" for i in range(500))
    # the expired examples: learned with the expired label, at their features record's place
    # in its topic and their expiry time
    features_source = inputs[0] if times == "files" else inputs[0].rsplit("/", 1)[1] + "/"
    expired = {r["id"]: r for r in rows if not r["served"]
               and r["source"].startswith(features_source)}
    assert sorted(expired) == sorted(i for i, _ in expiries)
    assert all(r["label"] == -1 and r["event_time"] == pytest.approx(start + at, abs=2e-3)
               for r in expired.values() for at in [dict(expiries)[r["id"]]])


def test_a_stream_learns_what_the_records_times_let_it_as_they_come(broker, tmp_path):
    """--streaming on Prism, the records produced while it runs: once it has gone quiet, each
    model's checkpoint equals a plain run over the first of its joined records in label order
    (expired examples at their expiry time) as many as it has learned; the rest waits, for a
    label or for the labels' clock to pass its wait, as on a stream it should. The worker keeps
    one model decoded: the two groups' blocks alternate, and each group's join is rebuilt from
    its log in Beam state whenever the other's came between."""
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, "live-features", "live-labels", "live-features-pred",
                  "live-features-dead")
    features, labels, reference, _, _ = timed_join(300, seed=7)
    start = time.time() - 3600
    models = tmp_path / "models"
    run = streaming(bootstrap, "live-features", models, "--labels",
                    f"kafka://{bootstrap}/live-labels", "--label-wait", f"{WAIT:g}s",
                    "--expired-label", "-1", "--format", "jsonl", "--model-key-column", "key",
                    "--model-groups", "2", "--models-in-memory", "1")
    try:
        send(bootstrap, "live-features", timed_messages(features, start))
        send(bootstrap, "live-labels", timed_messages(labels, start))
        counts, quiet_since = None, time.time()

        def quiet():  # (every model's checkpoint unchanged for 10 s, every example served)
            nonlocal counts, quiet_since
            now = [(seen(models, k), seen(models, k, "examples_served")) for k in KEYS]
            if now != counts:
                counts, quiet_since = now, time.time()
            return (sum(s for _, s in now) == 300 and time.time() - quiet_since >= 10)
        assert wait_for(quiet, 240, run), f"the stream did not go quiet: {counts}"
    finally:
        kill_group(run)
    mine = {k: [r for key, r in reference if key == k] for k in KEYS}
    prefix = tmp_path / "prefix.jsonl"
    prefix.write_text("".join(json.dumps(r) + "\n" for k, (learned, _) in zip(KEYS, counts)
                              for r in mine[k][:learned]))
    got, want = final_models(KEYS, str(models)), final_models(KEYS, str(train(
        tmp_path / "plain", "--input", prefix, *JOINED, "--format", "jsonl") / "models"))
    for k, (learned, _) in zip(KEYS, counts):
        assert learned >= 0.8 * len(mine[k])  # (only the last few seconds' examples wait)
        assert got[k][0].equals(want[k][0]) and got[k][1] == want[k][1] == learned


def test_labels_on_a_stream_are_refused_without_a_wait(broker, tmp_path, capsys):
    """(A label whose example never comes would hold its model's later labels for ever.)"""
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, "stream-features", "stream-labels")
    code = main(["train", "--input", f"kafka://{bootstrap}/stream-features", "--labels",
                 f"kafka://{bootstrap}/stream-labels", "--id-column", "id", "--model-dir",
                 str(tmp_path / "models"), *prism_args(streaming=True)])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "unitless: error: --labels on a stream that does not end needs --label-wait: how "
        "long an example waits for its label, and a label for its example")
