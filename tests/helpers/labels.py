"""The delayed-outcome tests' helpers: joins over files and timed topics, their checks, kills."""
import json
import sys
import time

import numpy as np
import pytest

from unitless.connectors.files import read_output
from unitless.labels import join as label_join

from tests.helpers.commands import create_topics, send, train
from tests.helpers.killing import campaigns, final_models, run_complete
from tests.helpers.ordered import KEYS

N = 600
# the options of every run here: ids to join by, a model per key, small blocks, two groups
JOINED = ("--id-column", "id", "--model-key-column", "key", "--chunk-size", "64",
          "--model-groups", "2")
WAIT = 10.0  # s: --label-wait
HOURS = 360.0  # ``timed_join``'s times and wait scaled by it: a one-hour wait, examples 6 min apart


def write_join(tmp_path, features_name, seed=0):
    """Features (no label) and labels files for N examples: the labels shuffled, 30 examples
    never labeled, 10 labels of unknown ids, 10 second labels, 3 records without their label,
    5 features records repeated;
    and the reference: the joined records in label order. Returns (features, labels,
    reference paths, {reason: count of dead letters})."""
    rng = np.random.default_rng(seed)
    rows = {}
    for i in range(N):
        a, b = rng.normal() * 1e3, rng.normal() * 1e-2
        label = 1 if a / 1e3 + b / 1e-2 + rng.normal() > 0 else -1
        rows[f"e-{i}"] = (KEYS[rng.integers(len(KEYS))], a, b, label)
    ids = list(rows)
    features = tmp_path / features_name
    with open(features, "w") as f:
        f.write("id,key,a,b\n")
        repeated = set(rng.choice(ids, 5, replace=False))
        for i in ids:
            key, a, b, _ = rows[i]
            f.write(f"{i},{key},{a},{b}\n")
            if i in repeated:  # (again, other values: an at-least-once producer's retry)
                f.write(f"{i},{key},{a + 1},{b}\n")
    labeled = [ids[j] for j in rng.permutation(N)[:N - 30]]
    records = [(i, rows[i][0], rows[i][3]) for i in labeled]
    for j in range(10):
        records.insert(int(rng.integers(len(records) + 1)), (f"unknown-{j}", KEYS[j % 4], 1))
    for i in rng.choice(labeled, 10, replace=False):
        at = records.index((i, rows[i][0], rows[i][3]))
        records.insert(int(rng.integers(at + 1, len(records) + 1)), (i, rows[i][0], -1))
    for i in rng.choice(labeled, 3, replace=False):  # (a record without its label)
        records.insert(int(rng.integers(len(records) + 1)), (i, rows[i][0], ""))
    labels = tmp_path / "labels.csv"
    with open(labels, "w") as f:
        f.write("id,key,label\n")
        f.writelines(f"{i},{key},{label}\n" for i, key, label in records)
    reference = tmp_path / "reference.csv"
    with open(reference, "w") as f:
        f.write("id,key,a,b,label\n")
        done = set()
        for i, key, label in records:
            if i in rows and i not in done and label != "":
                done.add(i)
                f.write(f"{i},{key},{rows[i][1]},{rows[i][2]},{label}\n")
    return features, labels, reference, {label_join.SECOND_FEATURES: 5,
                                         label_join.SECOND_LABEL: 10,
                                         label_join.NEVER_SERVED: 10,
                                         label_join.NO_LABEL: 3}


def assert_joined(joined, plain, label_sources, bad):
    """The joined run (directory ``joined``) equals the plain run over the joined records in
    label order (``plain``): its models bit for bit, its learned predictions those of the plain
    run; every example served once, each labeled one learned once from ``label_sources``; the
    dead letters exactly ``bad`` ({reason: count})."""
    got = final_models(KEYS, joined / "models")
    want = final_models(KEYS, plain / "models")
    for key in KEYS:
        assert got[key][0].equals(want[key][0])
        assert got[key][1] == want[key][1]
    # every record served once (served apart from learning: a repeated one too, then refused
    # for learning), each labeled one learned once
    rows = read_output(str(joined / "pred")).to_pylist()
    dead = read_output(str(joined / "dead")).to_pylist()
    refused = {(d["source"], d["position"]) for d in dead}
    served = [r["id"] for r in rows if r["served"]]
    assert set(served) == {f"e-{i}" for i in range(N)}
    assert len(served) == N + bad[label_join.SECOND_FEATURES]
    learned = [r for r in rows if not r["served"]]
    assert len(learned) == len({r["id"] for r in learned}) == N - 30
    assert {r["source"] for r in learned} <= label_sources
    # what the plain run predicted is what the joined run predicted as it learned
    reference_rows = {r["id"]: r for r in read_output(str(plain / "pred")).to_pylist()}
    for r in learned:
        assert (r["examples_seen"], r["prediction"], r["loss"], r["label"]) == tuple(
            reference_rows[r["id"]][c] for c in ("examples_seen", "prediction", "loss", "label"))
    # the honest loss: that of the prediction each example was served with, at its label
    served_with = {r["id"]: r["prediction"] for r in rows
                   if r["served"] and (r["source"], r["position"]) not in refused}
    assert all(r["served_loss"] is None for r in rows if r["served"])
    assert [r["served_loss"] for r in learned] == pytest.approx(
        [float(np.logaddexp(0.0, -r["label"] * served_with[r["id"]])) for r in learned],
        rel=1e-12)
    assert {reason: sum(d["reason"] == reason for d in dead) for reason in bad} == bad
    assert len(dead) == sum(bad.values())
    # (the learning step has the parsed record, not its bytes: its id, model key and values)
    assert all('"id": "unknown-' in d["raw"] for d in dead
               if d["reason"] == label_join.NEVER_SERVED)


def timed_join(n, seed, scale=1.0):
    """Features and labels records with record times (s) for ``n`` examples, 1 s apart: most
    labels within WAIT of their example, after it or before; some later than that, some too
    early, some never; labels of unknown ids, second labels, repeated features records (every
    time and the wait multiplied by ``scale``).
    Returns (features [(key, t, record)], labels [(key, t, record)], the reference: each model
    key's joined records in label order with the expired ones at their expiry time
    [(key, record with label)], the expired examples [(id, expiry time)], {reason: count})."""
    rng = np.random.default_rng(seed)
    features, labels, rows = [], [], {}
    wait = WAIT * scale
    for i in range(n):
        key, t = KEYS[rng.integers(len(KEYS))], (1.0 * i + rng.uniform(0, 0.5)) * scale
        a, b = rng.normal() * 1e3, rng.normal() * 1e-2
        y = 1 if a / 1e3 + b / 1e-2 + rng.normal() > 0 else -1
        rows[f"e-{i}"] = (key, t, a, b, y)
        features.append((key, t, {"id": f"e-{i}", "key": key, "a": a, "b": b}))
        if rng.random() < 0.02:  # (an at-least-once producer's retry)
            features.append((key, t + 0.1 * scale,
                             {"id": f"e-{i}", "key": key, "a": a + 1, "b": b}))
        kind = rng.choice(["after", "before", "late", "early", "never"],
                          p=[0.7, 0.1, 0.06, 0.06, 0.08])
        delay = {"after": rng.uniform(0.2, 8), "before": -rng.uniform(0.2, 8),
                 "late": rng.uniform(12, 18), "early": -rng.uniform(12, 18)}.get(kind)
        if delay is not None:
            labels.append((key, t + delay * scale, {"id": f"e-{i}", "key": key, "label": y}))
            if kind == "after" and rng.random() < 0.03:
                labels.append((key, t + (delay + 0.5) * scale,
                               {"id": f"e-{i}", "key": key, "label": -y}))
        if rng.random() < 0.02:
            labels.append((key, t + scale, {"id": f"unknown-{i}", "key": key, "label": 1}))
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
        elif abs(t - rows[i][1]) <= wait:
            closed[i] = "joined"
            events.append((t, 0, key, i, label["label"]))
        elif t > rows[i][1] + wait:
            closed[i] = "expired"
            bad(label_join.LATE_LABEL)
        else:
            bad(label_join.NEVER_SERVED)
    for i, (key, t, *_) in rows.items():
        if closed.get(i) != "joined":
            events.append((t + wait, 1, key, i, -1))
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


def check_timed_join(bootstrap, tmp_path, name, runner_args, times="kafka", order=None,
                     scale=1.0):
    """``timed_join``'s records on two topics, read to their ends by a run on ``runner_args``:
    each model's final state equals a plain run over its joined records in label order and its
    expired examples learned with --expired-label at their expiry time; the dead letters are
    exactly the labels too late, too early, second or of unknown ids, and the repeated
    features records. The records' times are their Kafka timestamps (``times`` "kafka"), or
    a ``ts`` field read by --time-column on topics ("column") or in files ("files"); files
    hold their records in time order, or (``order``) "reversed" or "shuffled" each. ``scale``
    multiplies every time and the wait (``HOURS``: a one-hour wait), all of them in the past."""
    n = 500
    features, labels, reference, expiries, bad = timed_join(n, seed=5, scale=scale)
    start = time.time() - 3600 - (n + 20) * scale
    if times != "kafka":
        features, labels = [[(k, t, {**r, "ts": start + t}) for k, t, r in records]
                            for records in (features, labels)]
    if times == "files":
        inputs = [tmp_path / "features.jsonl", tmp_path / "labels.jsonl"]
        rng = np.random.default_rng(6)
        for path, records in zip(inputs, (features, labels)):
            if order == "reversed":
                records = records[::-1]
            elif order == "shuffled":
                records = [records[i] for i in rng.permutation(len(records))]
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
    train(out, "--input", inputs[0], "--labels", inputs[1], "--label-wait", f"{WAIT * scale:g}s",
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
    # (served apart from learning: a repeated features record is served too, then refused)
    served = [r["id"] for r in rows if r["served"]]
    assert set(served) == {f"e-{i}" for i in range(500)}
    assert len(served) == 500 + bad[label_join.SECOND_FEATURES]
    # the expired examples: learned with the expired label, at their features record's place
    # in its topic and their expiry time
    features_source = inputs[0] if times == "files" else inputs[0].rsplit("/", 1)[1] + "/"
    expired = {r["id"]: r for r in rows if not r["served"]
               and r["source"].startswith(features_source)}
    assert sorted(expired) == sorted(i for i, _ in expiries)
    assert all(r["label"] == -1 and r["event_time"] == pytest.approx(start + at, abs=2e-3)
               for r in expired.values() for at in [dict(expiries)[r["id"]]])


def kill_campaigns(bootstrap, tmp_path, runner, runner_args, kills):
    """``timed_join``'s two topics (a wait, an expired label) read to their ends by runs on
    ``runner_args`` SIGKILLed at random moments and right after checkpoints, each resumed with
    --resume until one completes: its models equal an uninterrupted run's bit for bit (nothing
    lost, nothing learned twice: a label learned before the last checkpoint is not learned
    again, an example still waiting is read again and waits again without being served again);
    every example is served, every learned prediction is the uninterrupted run's, the dead
    letters are its dead letters (at least once)."""
    n = 1500
    features_topic, labels_topic = f"kill-features-{runner}", f"kill-labels-{runner}"
    create_topics(bootstrap, features_topic, labels_topic)
    features, labels, _, _, _ = timed_join(n, seed=11)
    start = time.time() - 3600
    send(bootstrap, features_topic, timed_messages(features, start))
    send(bootstrap, labels_topic, timed_messages(labels, start))

    def command(out, resume=True):
        return [sys.executable, "-m", "unitless.cli", "train",
                "--input", f"kafka://{bootstrap}/{features_topic}", "--labels",
                f"kafka://{bootstrap}/{labels_topic}", "--label-wait", f"{WAIT:g}s",
                "--expired-label", "-1", "--format", "jsonl", "--id-column", "id",
                "--model-key-column", "key", "--chunk-size", "16", "--checkpoint-every", "40",
                "--model-dir", str(out / "models"), "--predictions", str(out / "p"),
                "--dead-letter", str(out / "d"), *runner_args, *(["--resume"] if resume else [])]
    began = time.time()
    run_complete(command(tmp_path / "whole", resume=False))
    duration = time.time() - began
    expected = final_models(KEYS, tmp_path / "whole" / "models")
    whole = read_output(str(tmp_path / "whole" / "p")).to_pylist()
    learned = {(r["model_key"], r["examples_seen"]): r for r in whole if not r["served"]}
    dead = {(d["source"], d["position"], d["reason"])
            for d in read_output(str(tmp_path / "whole" / "d")).to_pylist()}

    def check(c):
        out = tmp_path / f"crash{c}"
        rows = read_output(str(out / "p")).to_pylist()
        assert {r["id"] for r in rows if r["served"]} == {f"e-{i}" for i in range(n)}
        mine = [r for r in rows if not r["served"]]
        for r in mine:  # (at least once: a duplicate is the original)
            want = learned[r["model_key"], r["examples_seen"]]
            assert (r["id"], r["prediction"], r["label"]) == (
                want["id"], want["prediction"], want["label"]), (r, want)
        assert {(r["model_key"], r["examples_seen"]) for r in mine} == set(learned)
        got = final_models(KEYS, out / "models")
        for key in KEYS:
            assert got[key][0].equals(expected[key][0]), key
            assert got[key][1:] == expected[key][1:], key
        assert {(d["source"], d["position"], d["reason"])
                for d in read_output(str(out / "d")).to_pylist()} == dead

    campaigns(lambda c: command(tmp_path / f"crash{c}"), lambda c: tmp_path / f"crash{c}" /
              "models", check, kills, duration)
