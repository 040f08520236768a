"""One model over feature shards (``--shards``) on Beam's Prism runner, the shards passing their
parts through a real Kafka topic: one shard is the unsharded run bit for bit, four shards with
no delay equal it to 1e-12, and with a delay every (model, shard) learns exactly what the
in-process reference protocol (``learner.sharded.learn_with_delay``) learns, each example
predicted once."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from unitless.cli import main  # noqa: E402
from unitless.connectors.files import read_file, read_output  # noqa: E402
from unitless.connectors.records import ExampleBlock  # noqa: E402
from unitless.learner import from_arrow  # noqa: E402
from unitless.learner.sharded import learn_with_delay, merge, new_shards  # noqa: E402
from unitless.pipelines.checkpoints import (checkpoint_files, key_dir, load_latest,  # noqa: E402
                                            read_checkpoint)
from unitless.pipelines.config import configure, new_learner  # noqa: E402
from unitless.pipelines.checkpoints import consistent_cut, shard_dir  # noqa: E402

KEYS = ("east", "west")
PRISM = os.environ.get("UNITLESS_PRISM") or os.path.expanduser(
    "~/.cache/unitless/prism/2.77.0/prism")


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """A CSV of 2 model keys, 36 examples each, features of scales 1e-3..1e4, some missing."""
    rng = np.random.default_rng(14)
    n = 72
    X = rng.normal(size=(n, 6)) * [1e-3, 1e-1, 1.0, 10.0, 1e3, 1e4]
    y = np.where(X @ [1e3, -10.0, 1.0, 0.1, -1e-3, 1e-4] + rng.normal(size=n) > 0, 1, -1)
    path = tmp_path_factory.mktemp("sharded") / "examples.csv"
    lines = ["id,segment,label,a,b,c,d,e,f"]
    for i in range(n):
        values = ["" if rng.random() < 0.15 else f"{v:.6g}" for v in X[i]]
        lines.append(f"r{i},{KEYS[i % 2]},{y[i]}," + ",".join(values))
    path.write_text("\n".join(lines) + "\n")
    return path


def feedback_topic(broker):
    name = f"feedback-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    admin.create_topics([NewTopic(name, 2, 1)])
    admin.close()
    return f"kafka://{broker.bootstrap_servers}/{name}"


def train(out, data, *extra):
    code = main(["train", "--input", str(data), "--id-column", "id", "--model-key-column",
                 "segment", "--chunk-size", "10", "--model-dir", str(out / "models"),
                 "--predictions", str(out / "predictions"), "--dead-letter", str(out / "dead"),
                 *extra])
    assert code == 0
    return read_output(str(out / "predictions")).sort_by([("model_key", "ascending"),
                                                    ("examples_seen", "ascending")])


def train_sharded(out, data, broker, shards, delay, *extra):
    return train(out, data, "--shards", str(shards), "--max-delay", str(delay),
                 "--feedback-topic", feedback_topic(broker), "--runner", "PrismRunner",
                 "--prism_location", PRISM, "--streaming", *extra)


def shard_states(out, key, shards):
    """Each shard's newest checkpoint of the model, in shard order."""
    states = []
    for s in range(shards):
        _, table = load_latest(shard_dir(str(out / "models"), s, shards), key)
        states.append(from_arrow(table))
    return states


def reference(data, key, shards, delay):
    """The key's examples learned in one process by the reference protocol: (result, shards)."""
    cfg = configure([str(data)], id_column="id", model_key_column="segment")
    blocks = [b for b, _ in read_file(cfg.inputs[0], cfg.format, cfg.spec, 10)]
    mine = [piece for b in blocks for k, piece in b.split_by_key() if k == key]
    fresh = new_learner(cfg)
    states = new_shards(shards, fresh.algorithm, fresh.dim, fresh.loss, fresh.n_classes,
                        fresh.bias_index, **fresh.hyperparameters)
    return learn_with_delay(states, ExampleBlock.concat(mine).batch(), delay), states


def test_one_shard_is_the_unsharded_run_bit_for_bit(tmp_path, examples, broker):
    alone = train(tmp_path / "alone", examples)
    sharded = train_sharded(tmp_path / "one", examples, broker, 1, 0)
    for column in ("id", "model_key", "prediction", "loss", "examples_seen", "position"):
        assert sharded.column(column).equals(alone.column(column)), column
    for key in KEYS:
        model = from_arrow(read_checkpoint(key_dir(str(tmp_path / "alone" / "models"), key)))
        (shard,) = shard_states(tmp_path / "one", key, 1)
        assert shard.dense_vectors().tobytes() == model.dense_vectors().tobytes()
        assert shard.S.tobytes() == model.S.tobytes()
        assert (shard.examples_seen, shard.cumulative_loss) == (model.examples_seen,
                                                                model.cumulative_loss)


def test_four_shards_without_delay_equal_the_unsharded_run(tmp_path, examples, broker):
    alone = train(tmp_path / "alone", examples)
    sharded = train_sharded(tmp_path / "four", examples, broker, 4, 0)
    assert sharded.column("id").equals(alone.column("id"))
    expected = alone.column("prediction").to_numpy()
    scale = np.abs(expected).max()
    np.testing.assert_allclose(sharded.column("prediction").to_numpy(), expected, rtol=1e-12,
                               atol=1e-12 * scale)
    for key in KEYS:
        model = from_arrow(read_checkpoint(key_dir(str(tmp_path / "alone" / "models"), key)))
        merged = merge(shard_states(tmp_path / "four", key, 4))
        for got, want in zip(merged.dense_vectors(), model.dense_vectors()):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
        assert merged.examples_seen == model.examples_seen == 36


def test_a_delay_learns_what_the_reference_protocol_learns_each_example_once(
        tmp_path, examples, broker):
    shards, delay = 3, 4
    got = train_sharded(tmp_path / "delay", examples, broker, shards, delay,
                        "--checkpoint-every", "10", "--keep-checkpoints", "10")
    assert sorted(got.column("id").to_pylist()) == sorted(f"r{i}" for i in range(72))
    for key in KEYS:
        mine = got.filter(pa.compute.equal(got.column("model_key"), key))
        assert mine.column("examples_seen").to_pylist() == list(range(1, 37))
        result, expected = reference(examples, key, shards, delay)
        assert mine.column("prediction").to_numpy().tobytes() == result.scores[:, 0].tobytes()
        assert mine.column("loss").to_numpy().tobytes() == result.losses.tobytes()
        for state, want in zip(shard_states(tmp_path / "delay", key, shards), expected):
            assert state.dense_vectors().tobytes() == want.dense_vectors().tobytes()
            assert state.S.tobytes() == want.S.tobytes()
            assert state.examples_seen == 36  # every shard applied every example once
        # rounds of 5 examples; a checkpoint after the rounds ending past 10, 20, 30, and the last
        for s in range(shards):
            names = checkpoint_files(key_dir(shard_dir(str(tmp_path / "delay" / "models"), s,
                                                       shards), key))
            assert [int(n[5:17]) for n in names] == [10, 20, 30, 36]
        assert consistent_cut(str(tmp_path / "delay" / "models"), key, shards) == 36


def test_sharding_refuses_what_it_cannot_do(tmp_path, examples, broker, capsys):
    for extra, says in ((["--shards", "-1"], "--shards wants 0 or more"),
                        (["--shards", "2"], "pass --feedback-topic"),
                        (["--shards", "2", "--algorithm", "kotlowski1", "--bits", "8",
                          "--feedback-topic", "kafka://h:1/t"], "cannot be split"),
                        (["--max-delay", "3"], "pass --shards too"),
                        (["--shards", "2", "--keep-checkpoints", "1", "--feedback-topic",
                          "kafka://h:1/t"], "at least 2 checkpoints"),
                        (["--shards", "2", "--feedback-topic", feedback_topic(broker)],
                         "needs a streaming runner")):
        assert main(["train", "--input", str(examples), "--model-dir", str(tmp_path / "m"),
                     *extra]) == 2
        assert says in capsys.readouterr().err


def write_examples(path, n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6)) * [1e-3, 1e-1, 1.0, 10.0, 1e3, 1e4]
    y = np.where(X @ [1e3, -10.0, 1.0, 0.1, -1e-3, 1e-4] + rng.normal(size=n) > 0, 1, -1)
    lines = ["id,segment,label,a,b,c,d,e,f"]
    for i in range(n):
        values = ["" if rng.random() < 0.15 else f"{v:.6g}" for v in X[i]]
        lines.append(f"r{i},{KEYS[i % 2]},{y[i]}," + ",".join(values))
    path.write_text("\n".join(lines) + "\n")
    return path


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
            "--checkpoint-every", "6", "--feedback-topic", feedback_topic(broker),
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
        try:
            os.killpg(first.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        first.wait()
    assert max(cuts.values()) >= 12, (tmp_path / "first.log").read_text()[-3000:]
    cuts = {key: consistent_cut(models, key, shards) or 0 for key in KEYS}  # (after the kill)
    assert min(cuts.values()) < n  # killed while learning
    resumed = subprocess.run(args + ["--predictions", str(tmp_path / "second"), "--resume"],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    second = read_output(str(tmp_path / "second"))
    for key in KEYS:
        result, expected = reference(data, key, shards, 0)
        for state, want in zip(shard_states(tmp_path, key, shards), expected):
            assert state.examples_seen == n  # every shard applied every example once
            assert state.dense_vectors().tobytes() == want.dense_vectors().tobytes()
            assert state.S.tobytes() == want.S.tobytes()
        mine = second.filter(pa.compute.equal(second.column("model_key"), key)).sort_by(
            "examples_seen")
        assert mine.column("examples_seen").to_pylist() == list(range(cuts[key] + 1, n + 1))
        assert (mine.column("prediction").to_numpy().tobytes()
                == result.scores[cuts[key]:, 0].tobytes())


def test_a_kafka_stream_over_shards_without_delay_equals_the_unsharded_run(tmp_path, broker):
    """Examples from a Kafka topic (each model's in one partition, streaming, without end), two
    shards and the default feedback topic beside the input: every example predicted once, as
    the unsharded run over the same examples from a file predicts it, to 1e-12."""
    rng = np.random.default_rng(16)
    rows = [{"id": f"k{i}", "segment": KEYS[i % 2], "label": int(rng.integers(2)) * 2 - 1,
             "a": float(rng.normal() * 1e-3), "b": float(rng.normal() * 1e4),
             "c": float(rng.normal())} for i in range(40)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    alone = train(tmp_path / "alone", tmp_path / "rows.jsonl", "--format", "jsonl")
    topic = f"sharded-in-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    admin.create_topics([NewTopic(topic, 2, 1), NewTopic(topic + ".unitless-feedback", 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all")
    for row in rows:
        producer.send(topic, key=row["segment"].encode(), value=json.dumps(row).encode())
    producer.flush()
    producer.close()
    out = tmp_path / "sharded"
    with open(tmp_path / "stream.log", "w") as log:
        run = subprocess.Popen(
            [sys.executable, "-m", "unitless.cli", "train", "--input",
             f"kafka://{broker.bootstrap_servers}/{topic}", "--format", "jsonl", "--id-column",
             "id", "--model-key-column", "segment", "--chunk-size", "10", "--model-dir",
             str(out / "models"), "--predictions", str(out / "predictions"), "--dead-letter",
             str(out / "dead"), "--shards", "2", "--runner", "PrismRunner", "--prism_location",
             PRISM, "--streaming"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, got = time.time() + 180, None
        while time.time() < deadline and run.poll() is None:
            got = read_output(str(out / "predictions")) if (out / "predictions").exists() else None
            if got is not None and got.num_rows >= len(rows):
                break
            time.sleep(0.5)
        time.sleep(1.0)  # nothing more may come
        got = read_output(str(out / "predictions"))
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        run.wait()
    assert got is not None and got.num_rows == len(rows), (
        (tmp_path / "stream.log").read_text()[-3000:])
    got = got.sort_by("id")
    alone = alone.sort_by("id")
    assert got.column("id").equals(alone.column("id"))
    assert got.column("examples_seen").equals(alone.column("examples_seen"))
    expected = alone.column("prediction").to_numpy()
    np.testing.assert_allclose(got.column("prediction").to_numpy(), expected, rtol=1e-12,
                               atol=1e-12 * np.abs(expected).max())
