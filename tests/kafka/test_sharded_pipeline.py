"""One model over feature shards (``--shards``) on Beam's Prism runner, the shards passing their
parts through a real Kafka topic: one shard is the unsharded run bit for bit, four shards with
no delay equal it to 1e-12 (and `inspect` and `score` read their merged cut), and with a delay
every (model, shard) learns exactly what the in-process reference protocol
(``learner.sharded.learn_with_delay``) learns, each example predicted once; killed and
resumed, every shard learns every example once."""
import json
import pickle
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from tests.helpers.commands import create_topics, send, train
from tests.helpers.killing import kill_group
from tests.helpers.runners import PRISM, pipeline
from tests.helpers.sharding import (KEYS, feedback_topic, reference, shard_states,
                                    write_examples)
from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.learner import from_arrow
from unitless.learner.names import FeatureNames
from unitless.learner.sharded import merge
from unitless.parse.records import ExampleBlock
from unitless.pipelines.rounds import CutRounds, Round
from unitless.store.catalog import load_latest
from unitless.store.per_key import checkpoint_files, key_dir, key_dir_name
from unitless.store.shards import consistent_cut, shard_dir


@pytest.fixture(scope="module")
def examples_csv(tmp_path_factory):
    """2 model keys, 36 examples each."""
    return write_examples(tmp_path_factory.mktemp("sharded") / "examples.csv", 72, 14)


def run_predictions(out, data, *extra):
    """A run's predictions, by model key and examples seen."""
    train(out, "--input", data, "--id-column", "id", "--model-key-column", "segment",
          "--chunk-size", "10", *extra)
    return read_output(str(out / "pred")).sort_by([("model_key", "ascending"),
                                              ("examples_seen", "ascending")])


def train_sharded(out, data, broker, shards, delay, *extra):
    return run_predictions(out, data, "--shards", str(shards), "--max-delay", str(delay),
                 "--feedback-topic", feedback_topic(broker.bootstrap_servers),
                 "--runner", "PrismRunner", "--prism_location", PRISM, "--streaming", *extra)


def test_one_shard_is_the_unsharded_run_bit_for_bit(tmp_path, examples_csv, broker):
    alone = run_predictions(tmp_path / "alone", examples_csv)
    sharded = train_sharded(tmp_path / "one", examples_csv, broker, 1, 0)
    for column in ("id", "model_key", "prediction", "loss", "examples_seen", "position"):
        assert sharded.column(column).equals(alone.column(column)), column
    for key in KEYS:
        model = from_arrow(load_latest(str(tmp_path / "alone" / "models"), key)[1])
        (shard,) = shard_states(tmp_path / "one" / "models", key, 1)
        assert shard.dense_vectors().tobytes() == model.dense_vectors().tobytes()
        assert shard.S.tobytes() == model.S.tobytes()
        assert (shard.examples_seen, shard.cumulative_loss) == (model.examples_seen,
                                                                model.cumulative_loss)


def test_four_shards_without_delay_equal_the_unsharded_run(tmp_path, examples_csv, broker, capsys):
    alone = run_predictions(tmp_path / "alone", examples_csv)
    sharded = train_sharded(tmp_path / "four", examples_csv, broker, 4, 0)
    assert sharded.column("id").equals(alone.column("id"))
    expected = alone.column("prediction").to_numpy()
    scale = np.abs(expected).max()
    np.testing.assert_allclose(sharded.column("prediction").to_numpy(), expected, rtol=1e-12,
                               atol=1e-12 * scale)
    for key in KEYS:
        model = from_arrow(load_latest(str(tmp_path / "alone" / "models"), key)[1])
        merged = merge(shard_states(tmp_path / "four" / "models", key, 4))
        for got, want in zip(merged.dense_vectors(), model.dense_vectors()):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
        assert merged.examples_seen == model.examples_seen == 36
    # inspect and score read the consistent cut, merged
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "four" / "models"), "--json"]) == 0
    lines = {line["key"]: line for line in json.loads(capsys.readouterr().out)}
    assert sorted(lines) == sorted(KEYS)
    for key in KEYS:
        assert lines[key]["examples"] == 36
        assert lines[key]["checkpoint"].endswith(f"*-of-4/{key_dir_name(key)}/"
                                                 "ckpt-000000000036.arrow")
    scores = {}
    for name in ("alone", "four"):
        assert main(["score", "--input", str(examples_csv), "--id-column", "id",
                     "--model-key-column", "segment", "--model-dir",
                     str(tmp_path / name / "models"), "--predictions",
                     str(tmp_path / f"scores-{name}"), "--dead-letter",
                     str(tmp_path / "dead")]) == 0
        scores[name] = read_output(str(tmp_path / f"scores-{name}")).sort_by("id")
    assert scores["four"].column("id").equals(scores["alone"].column("id"))
    expected = scores["alone"].column("prediction").to_numpy()
    np.testing.assert_allclose(scores["four"].column("prediction").to_numpy(), expected,
                               rtol=1e-12, atol=1e-12 * np.abs(expected).max())


def test_a_delay_learns_what_the_reference_protocol_learns_each_example_once(
        tmp_path, examples_csv, broker):
    shards, delay = 3, 4
    # one decoded shard kept per worker: every element decodes its shard from Beam state
    got = train_sharded(tmp_path / "delay", examples_csv, broker, shards, delay,
                        "--checkpoint-every", "10", "--keep-checkpoints", "10",
                        "--models-in-memory", "1")
    assert sorted(got.column("id").to_pylist()) == sorted(f"r{i}" for i in range(72))
    for key in KEYS:
        mine = got.filter(pa.compute.equal(got.column("model_key"), key))
        assert mine.column("examples_seen").to_pylist() == list(range(1, 37))
        result, expected = reference(examples_csv, key, shards, delay)
        assert mine.column("prediction").to_numpy().tobytes() == result.scores[:, 0].tobytes()
        assert mine.column("loss").to_numpy().tobytes() == result.losses.tobytes()
        for state, want in zip(shard_states(tmp_path / "delay" / "models", key, shards), expected):
            assert state.dense_vectors().tobytes() == want.dense_vectors().tobytes()
            assert state.S.tobytes() == want.S.tobytes()
            assert state.examples_seen == 36  # every shard applied every example once
        # rounds of 5 examples; a checkpoint after the rounds ending past 10, 20, 30, and the last
        for s in range(shards):
            names = checkpoint_files(key_dir(shard_dir(str(tmp_path / "delay" / "models"), s,
                                                       shards), key))
            assert [int(n[5:17]) for n in names] == [10, 20, 30, 36]
        assert consistent_cut(str(tmp_path / "delay" / "models"), key, shards) == 36


def test_sharding_refuses_what_it_cannot_do(tmp_path, examples_csv, broker, capsys):
    for extra, says in ((["--shards", "-1"], "--shards wants 0 or more"),
                        (["--shards", "2"], "pass --feedback-topic"),
                        (["--shards", "2", "--algorithm", "kotlowski1", "--bits", "8",
                          "--feedback-topic", "kafka://h:1/t"], "cannot be split"),
                        (["--max-delay", "3"], "pass --shards too"),
                        (["--shards", "2", "--keep-checkpoints", "1", "--feedback-topic",
                          "kafka://h:1/t"], "at least 2 checkpoints"),
                        (["--shards", "2", "--feedback-topic",
                          feedback_topic(broker.bootstrap_servers)], "needs a streaming runner")):
        assert main(["train", "--input", str(examples_csv), "--model-dir", str(tmp_path / "m"),
                     *extra]) == 2
        assert says in capsys.readouterr().err
    # --resume continues models as they were trained: with shards or without, never switching
    run_predictions(tmp_path / "plain", examples_csv)
    (tmp_path / "sharded" / "shards" / "0-of-3").mkdir(parents=True)
    for models, extra, says in (
            ("plain", ["--shards", "2", "--feedback-topic", "kafka://h:1/t"], "without --shards"),
            ("sharded", [], "resume with --shards 3"),
            ("sharded", ["--shards", "2", "--feedback-topic", "kafka://h:1/t"],
             "resume with --shards 3")):
        capsys.readouterr()
        assert main(["train", "--input", str(examples_csv), "--model-dir",
                     str(tmp_path / models / "models" if models == "plain"
                         else tmp_path / models), "--resume", *extra]) == 2
        assert says in capsys.readouterr().err


def test_killed_and_resumed_every_shard_learns_every_example_once(tmp_path, broker):
    """SIGKILL a four-shard run (its Prism runner too) once a model has a consistent cut,
    resume it: every shard ends equal, bit for bit, to the reference run without a kill; the
    resumed run predicts exactly the examples after each model's cut, as the reference does."""
    data = write_examples(tmp_path / "long.csv", 160, 15)
    shards, n = 4, 80
    models = str(tmp_path / "models")
    args = [sys.executable, "-m", "unitless.cli", "train", "--input", str(data), "--id-column",
            "id", "--model-key-column", "segment", "--chunk-size", "10", "--model-dir", models,
            "--dead-letter", str(tmp_path / "dead"), "--shards", str(shards), "--max-delay", "0",
            "--checkpoint-every", "6", "--feedback-topic", feedback_topic(broker.bootstrap_servers),
            "--runner", "PrismRunner", "--prism_location", PRISM, "--streaming"]
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(args + ["--predictions", str(tmp_path / "first")], stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    cuts = {}
    try:
        deadline = time.time() + 240
        while time.time() < deadline and first.poll() is None:
            cuts = {key: consistent_cut(models, key, shards) or 0 for key in KEYS}
            if max(cuts.values()) >= 12:
                break
            time.sleep(0.05)
    finally:
        kill_group(first)
    assert max(cuts.values()) >= 12, (tmp_path / "first.log").read_text()[-3000:]
    cuts = {key: consistent_cut(models, key, shards) or 0 for key in KEYS}  # (after the kill)
    assert min(cuts.values()) < n  # killed while learning
    resumed = subprocess.run(args + ["--predictions", str(tmp_path / "second"), "--resume"],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    second = read_output(str(tmp_path / "second"))
    for key in KEYS:
        result, expected = reference(data, key, shards, 0)
        for state, want in zip(shard_states(models, key, shards), expected):
            assert state.examples_seen == n  # every shard applied every example once
            assert state.dense_vectors().tobytes() == want.dense_vectors().tobytes()
            assert state.S.tobytes() == want.S.tobytes()
        mine = second.filter(pa.compute.equal(second.column("model_key"), key)).sort_by(
            "examples_seen")
        assert mine.column("examples_seen").to_pylist() == list(range(cuts[key] + 1, n + 1))
        assert (mine.column("prediction").to_numpy().tobytes()
                == result.scores[cuts[key]:, 0].tobytes())


def stream_until(args, out, expected, log):
    """Run `unitless train` ``args`` (streaming, without end) until ``out`` holds ``expected``
    predictions and a second more, then SIGKILL it (and its Prism runner): the predictions."""
    with open(log, "w") as f:
        run = subprocess.Popen(args + ["--predictions", str(out)], stdout=f,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and run.poll() is None:
            got = read_output(str(out)) if out.exists() else None
            if got is not None and got.num_rows >= expected:
                break
            time.sleep(0.5)
        time.sleep(1.0)  # nothing more may come
    finally:
        kill_group(run)
    got = read_output(str(out)) if out.exists() else None
    assert got is not None and got.num_rows == expected, Path(log).read_text()[-3000:]
    return got.sort_by("id")


def test_a_kafka_stream_over_shards_without_delay_equals_the_unsharded_run(tmp_path, broker):
    """Examples from a Kafka topic (each model's in one partition, streaming, without end), two
    shards and the default feedback topic beside the input: every example predicted once, as
    the unsharded run over the same examples from a file predicts it, to 1e-12. Killed and
    resumed with more examples on the topic, the run restarts each partition from its models'
    cut and predicts exactly the examples after it."""
    rng = np.random.default_rng(16)
    rows = [{"id": f"k{i:02d}", "segment": KEYS[i % 2], "label": int(rng.integers(2)) * 2 - 1,
             "a": float(rng.normal() * 1e-3), "b": float(rng.normal() * 1e4),
             "c": float(rng.normal())} for i in range(50)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    alone = run_predictions(tmp_path / "alone", tmp_path / "rows.jsonl", "--format", "jsonl")
    alone = {r["id"]: r for r in alone.to_pylist()}
    topic = f"sharded-in-{uuid.uuid4().hex[:8]}"
    create_topics(broker.bootstrap_servers, topic)
    create_topics(broker.bootstrap_servers, topic + ".unitless-feedback", partitions=1)

    def produce(part):
        send(broker.bootstrap_servers, topic,
             [(row["segment"].encode(), json.dumps(row).encode()) for row in part])

    def same_as_alone(got):
        for row in got.to_pylist():
            want = alone[row["id"]]
            assert row["examples_seen"] == want["examples_seen"], row["id"]
            assert abs(row["prediction"] - want["prediction"]) <= 1e-12 * max(
                1.0, abs(want["prediction"])), row["id"]

    models = tmp_path / "models"
    args = [sys.executable, "-m", "unitless.cli", "train", "--input",
            f"kafka://{broker.bootstrap_servers}/{topic}", "--format", "jsonl", "--id-column",
            "id", "--model-key-column", "segment", "--chunk-size", "10", "--model-dir",
            str(models), "--dead-letter", str(tmp_path / "dead"), "--shards", "2",
            "--checkpoint-every", "4", "--runner", "PrismRunner", "--prism_location", PRISM,
            "--streaming"]
    produce(rows[:40])
    first = stream_until(args, tmp_path / "first", 40, tmp_path / "first.log")
    assert first.column("id").to_pylist() == [f"k{i:02d}" for i in range(40)]
    same_as_alone(first)
    cuts = {key: consistent_cut(str(models), key, 2) or 0 for key in KEYS}
    produce(rows[40:])
    second = stream_until(args + ["--resume"], tmp_path / "second",
                    sum(25 - cut for cut in cuts.values()), tmp_path / "second.log")
    assert sorted(second.column("id").to_pylist()) == sorted(
        r["id"] for r in rows if alone[r["id"]]["examples_seen"] > cuts[r["segment"]])
    same_as_alone(second)


def test_learn_with_shards_in_a_users_own_streaming_pipeline(tmp_path, examples_csv, broker):
    """``Learn(shards=..., max_delay=...)`` in a Beam pipeline of one's own (Prism, streaming),
    reading with ``ReadExamples``: the reference protocol's predictions, bit for bit, in the
    transform's output as in its prediction files."""
    from unitless.beam import Learn, ReadExamples, Rows, WritePredictions

    shards, delay = 2, 5
    learn = Learn(model_key_column="segment", id_column="id", chunk_size=10, shards=shards,
                  max_delay=delay, feedback_topic=feedback_topic(broker.bootstrap_servers),
                  model_dir=str(tmp_path / "models"), predictions=str(tmp_path / "predictions"),
                  dead_letter=str(tmp_path / "dead"))
    # (no runner flag: Learn sets what Prism needs of it)
    with pipeline("prism", streaming=True) as p:
        predictions = (p | ReadExamples(str(examples_csv), model_key_column="segment",
                                        id_column="id", chunk_size=10, learner=learn)
                       | learn)
        _ = predictions | WritePredictions(str(tmp_path / "output"), "jsonl")
        _ = predictions | Rows()
    for directory in ("predictions", "output"):
        got = read_output(str(tmp_path / directory))
        assert sorted(got.column("id").to_pylist()) == sorted(f"r{i}" for i in range(72))
        for key in KEYS:
            mine = got.filter(pa.compute.equal(got.column("model_key"), key)).sort_by(
                "examples_seen")
            result, _ = reference(examples_csv, key, shards, delay)
            assert mine.column("prediction").to_numpy().tobytes() == \
                result.scores[:, 0].tobytes()


def cut_rounds(shards, delay, releases):
    """What the shard sequencer sends for releases of blocks (each handed on in turn)."""
    cut = CutRounds(SimpleNamespace(shards=shards, max_delay=delay, checkpoint_every=7,
                                    checkpoint_seconds=0))
    rounds, sent = cut.state("m", SimpleNamespace(read=lambda: None)), []
    for blocks in releases:
        for block in blocks:
            sent += cut.learn(rounds, block)
        sent += cut.released("m", rounds)
    return sent


def a_block(first, n, rng, times):
    """n examples of one file from position ``first``, named features, event times or none."""
    k = rng.integers(1, 5, n)
    indptr = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
    indices = rng.integers(0, 50, indptr[-1]).astype(np.int64)
    named = np.unique(indices)
    return ExampleBlock("/some/long/path/of/a/file/" + "x" * 60 + ".csv",
                        np.arange(first, first + n), pa.array([f"example-{first + i}"
                                                               for i in range(n)]),
                        pa.array(["m"] * n), rng.choice([-1.0, 1.0], n), rng.random(n) + 0.5,
                        indptr, indices, rng.normal(size=indptr[-1]),
                        FeatureNames(named, pa.array([f"f{i}-{first}" for i in named])), None,
                        rng.random(n) * 1e9 if times else None)


@pytest.mark.parametrize("times", [False, True])
def test_a_release_is_cut_block_by_block_as_it_would_be_whole(times):
    """A release's blocks handed on one at a time are cut into the rounds the release
    concatenated gives, bit for bit (rounds span blocks; its first round carries the names of
    all of its features): how the sequencer holds a release may change, its rounds may not."""
    rng = np.random.default_rng(5)
    blocks, first = [], 1
    for n in (7, 13, 3, 20, 1, 11):
        blocks.append(a_block(first, n, rng, times))
        first += n
    for shards, delay in ((1, 0), (2, 4), (3, 9), (2, 100)):
        apart = cut_rounds(shards, delay, [blocks])
        whole = cut_rounds(shards, delay, [[ExampleBlock.concat(blocks)]])
        assert len(apart) == len(whole) == shards * -(-55 // (delay + 1))
        assert (sorted(pickle.dumps((k, r)) for k, r in apart)
                == sorted(pickle.dumps((k, r)) for k, r in whole))
    assert sum(len(r.names) for _, r in apart) == len(np.unique(np.concatenate(
        [b.indices for b in blocks])))


def test_a_round_carries_only_its_own_examples_when_pickled():
    """A shard keeps each round it waits for pickled (and Beam sends it so): a round must not
    carry the ids or sources of the whole release it was cut from (an Arrow slice pickles its
    parent's buffers), or a file's rounds would hold its ids and sources once a round."""
    block = a_block(1, 4000, np.random.default_rng(1), False)
    sent = sorted((r for (_, s), r in cut_rounds(2, 9, [[block]]) if s == 0),
                  key=lambda r: r.round)
    assert len(sent) == 400 and all(isinstance(r, Round) for r in sent)
    assert [r.meta.ids.to_pylist() for r in sent[:2]] == [
        [f"example-{i}" for i in range(a, a + 10)] for a in (1, 11)]
    # (10 of the release's 4,000 examples, beside a round's fixed part)
    assert len(pickle.dumps(sent[-1])) < len(pickle.dumps(block)) / 50
