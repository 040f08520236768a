"""Delayed outcomes on a real broker: examples on one topic without their labels, the labels on
another topic in another order (some never, some twice, some for unknown ids), joined by id; each
model's final state equals a plain run over the joined records in its labels' order."""
import csv
import json
import time

import pytest

from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.labels import join as label_join

from tests.helpers.commands import create_topics, dead_letters, send, train
from tests.helpers.kafka_io import consume_all, seen, streaming, wait_for
from tests.helpers.killing import kill_group
from tests.helpers.runners import prism_args, runner_args
from tests.helpers.labels import (HOURS, JOINED, WAIT, assert_joined, check_timed_join, timed_join,
                                  timed_messages, write_join)
from tests.helpers.killing import final_models
from tests.helpers.ordered import KEYS


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


@pytest.mark.parametrize("runner", ["fnapi", "prism"])
def test_what_waits_past_the_label_wait_expires_on_record_time(broker, tmp_path, runner):
    """Two topics keyed by model key, their records timestamped over two days up to an hour
    ago (replaying a backlog, which the reader's clock would expire at once), a one-hour wait:
    see ``check_timed_join``."""
    check_timed_join(broker.bootstrap_servers, tmp_path, runner, runner_args(runner),
                     scale=HOURS)


def test_the_records_own_time_column_is_the_clock(broker, tmp_path):
    """--time-column: the same records carrying their times in a field, on two topics whose
    timestamps are all one moment (which as the clock would expire nothing): see
    ``check_timed_join``."""
    check_timed_join(broker.bootstrap_servers, tmp_path, "column", [], "column")


@pytest.mark.parametrize("order", [None, "reversed", "shuffled"])
def test_with_a_time_column_files_expire_on_record_time_too(tmp_path, order):
    """--time-column gives files record time: --label-wait then applies to them as to topics
    (see ``check_timed_join``), whatever the order of the records in each file: the join takes
    a bounded input's records in time order; shuffled, over hours with a one-hour wait."""
    check_timed_join(None, tmp_path, "files", [], "files", order,
                     scale=HOURS if order == "shuffled" else 1.0)


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
        # served apart from learning: an example that comes once the models are quiet is
        # served by the newest state its model published, which says its version and age
        send(bootstrap, "live-features", timed_messages(
            [(k, 301.0, {"id": f"late-{k}", "key": k, "a": 1.0, "b": 0.01}) for k in KEYS],
            start))
        late = {}

        def late_served():
            for m in consume_all(bootstrap, "live-features-pred", 10 ** 9, timeout=2):
                row = json.loads(m.value)
                if row["id"].startswith("late-") and row["served"]:
                    late[row["model_key"]] = row
            return len(late) == len(KEYS)
        assert wait_for(late_served, 60, run), f"served of the late examples: {sorted(late)}"
    finally:
        kill_group(run)
    for k, (learned, _) in zip(KEYS, counts):
        row = late[k]
        assert (row["examples_seen"], row["checkpoint_id"]) == (learned, f"{k}@{learned}")
        # (quiet for 10 s and more: its state has aged, and says so)
        assert row["model_age_seconds"] >= 10 and row["stale"] == (row["model_age_seconds"] > 10)
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


def test_a_label_dated_far_ahead_on_a_topic_is_refused_and_expires_nothing(broker, tmp_path):
    """Two topics keyed by model key, 200 examples a second apart (an hour ago), each label 3 s
    after its example, and among the labels one more for e-50 dated 9999-12-31 in its ``ts``
    field: that label is a dead letter for its time (beyond --max-time-skew after the reader's
    clock), every example is learned with its label, and nothing expires. With a bound that
    lets it through, its model's labels clock jumps to 9999 and its waiting examples expire:
    the labels after it in its partition are refused (the hazard the bound prevents)."""
    bootstrap = broker.bootstrap_servers
    start = time.time() - 3600
    features, labels = [], []
    for i in range(200):
        key, t = KEYS[i % len(KEYS)], start + i
        features.append((key, {"id": f"e-{i}", "key": key, "ts": t, "a": (i % 7) - 3.0}))
        labels.append((key, {"id": f"e-{i}", "key": key, "ts": t + 3, "label": 1 - 2 * (i % 2)}))
    labels.insert(100, (KEYS[0], {"id": "e-50", "key": KEYS[0], "ts": "9999-12-31T00:00:00",
                                  "label": 1}))
    topics = [f"ahead-{part}" for part in ("features", "labels")]
    create_topics(bootstrap, *topics)
    for topic, records in zip(topics, (features, labels)):
        send(bootstrap, topic, [(k.encode(), json.dumps(r).encode()) for k, r in records])

    def run(out, *more):
        train(out, "--input", f"kafka://{bootstrap}/{topics[0]}", "--labels",
              f"kafka://{bootstrap}/{topics[1]}", "--label-wait", f"{WAIT:g}s",
              "--time-column", "ts", "--format", "jsonl", *JOINED, *more)
        rows = read_output(str(out / "pred")).to_pylist()
        reasons = [d["reason"] for d in dead_letters(out)]
        return (sum(not r["served"] for r in rows),
                {reason: reasons.count(reason) for reason in set(reasons)})
    assert run(tmp_path / "bounded") == (200, {label_join.AHEAD_OF_CLOCK: 1})
    learned, dead = run(tmp_path / "unbounded", "--max-time-skew", "100000000d")
    assert learned < 200 - 10 and label_join.AHEAD_OF_CLOCK not in dead


def test_a_checkpoint_taken_before_a_model_learned_anything_loses_no_example(broker, tmp_path):
    """A model's first checkpoint is taken as it enters a partition, before it learns anything
    there; after the shuffle a later block of its may come first, and that checkpoint then says
    it starts past examples of its own. A run killed just then leaves that checkpoint and the
    reading stage's start records, which start both partitions again from their beginning; the
    resumed run must join and learn every example as an uninterrupted run does. (It took that
    start for labels judged and examples served before: it dropped the examples and refused
    their labels as never served, and exited 0; found by the labels kill campaign.)"""
    from unitless.connectors.kafka import KafkaSourceConfig, KafkaTopic, parse_messages
    from unitless.connectors.kafka_clients import Records
    from unitless.models.model_group import ModelGroup
    from unitless.pipelines.config import configure
    from unitless.pipelines.train import LearnBlocks
    from unitless.store.starts import starts_dir, write_starts
    bootstrap = broker.bootstrap_servers
    topics = {"features": "entered-features", "labels": "entered-labels"}
    create_topics(bootstrap, *topics.values(), partitions=1)
    features, labels, _, _, _ = timed_join(120, seed=13)
    start = time.time() - 3600
    messages = {"features": timed_messages(features, start),
                "labels": timed_messages(labels, start)}
    for name, topic in topics.items():
        send(bootstrap, topic, messages[name])
    args = ("--input", f"kafka://{bootstrap}/{topics['features']}", "--labels",
            f"kafka://{bootstrap}/{topics['labels']}", "--label-wait", f"{WAIT:g}s",
            "--expired-label", "-1", "--format", "jsonl", *JOINED)
    whole = train(tmp_path / "whole", *args)

    # the killed run's model directory: its reading stage's start records (every key from the
    # partitions' first records on), and the checkpoints its learning step took as each model
    # entered a partition by a block from the middle of it
    out = tmp_path / "resumed"
    cfg = configure(inputs=[args[1]], labels=[args[3]], label_wait=WAIT, expired_label=-1.0,
                    format="jsonl", id_column="id", model_key_column="key", model_groups=2,
                    model_dir=str(out / "models"), predictions=None, dead_letter=None,
                    resume=True)
    write_starts(starts_dir(cfg.model_dir), [(k, f"{topic}/0", -1) for k in KEYS
                                             for topic in topics.values()])
    learning = LearnBlocks(cfg)
    learning.setup()
    groups = {}
    for name, topic in topics.items():
        later = messages[name][len(messages[name]) // 2:]
        offsets = list(range(len(messages[name]) - len(later), len(messages[name])))
        block, dead = parse_messages(
            KafkaSourceConfig(KafkaTopic.parse(f"kafka://{bootstrap}/{topic}"), "jsonl",
                              cfg.spec, lambda block: []), 0,
            Records(offsets, *([m[i] for m in later] for i in range(3))))
        assert dead == [] and block.restarts_midway
        for key, piece in block.split_by_key():
            group = groups.setdefault(key, ModelGroup())
            model = learning._of(group, key)
            assert model.enter_source(piece) and model.state.examples_seen == 0
            learning._checkpoint([model], group)
    learning.delivery.write_checkpoints()
    learning.teardown()

    train(out, *args, "--resume")
    got, want = final_models(KEYS, out / "models"), final_models(KEYS, whole / "models")
    for key in KEYS:
        assert got[key][0].equals(want[key][0]) and got[key][1:] == want[key][1:], key
    assert sorted((d["source"], d["position"], d["reason"]) for d in dead_letters(out)) == sorted(
        (d["source"], d["position"], d["reason"]) for d in dead_letters(whole))
