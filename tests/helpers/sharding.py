"""What the tests of sharded runs share (tests/kafka/test_sharded_pipeline.py on Prism,
tests/flink/test_flink_sharded.py on Flink): their examples, a fresh feedback topic, each
shard's newest state, and the one-process reference protocol a run must equal."""
import uuid

import numpy as np

from unitless.connectors.files import read_file
from unitless.learner import from_arrow
from unitless.learner.sharded import learn_with_delay, new_shards
from unitless.parse.records import ExampleBlock
from unitless.pipelines.config import configure, new_learner
from unitless.store.per_key import load_latest
from unitless.store.shards import shard_dir

from tests.helpers.commands import create_topics

KEYS = ("east", "west")


def write_examples(path, n, seed):
    """A CSV of n examples alternating between the model keys KEYS (column ``segment``),
    features of scales 1e-3..1e4, some missing."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6)) * [1e-3, 1e-1, 1.0, 10.0, 1e3, 1e4]
    y = np.where(X @ [1e3, -10.0, 1.0, 0.1, -1e-3, 1e-4] + rng.normal(size=n) > 0, 1, -1)
    lines = ["id,segment,label,a,b,c,d,e,f"]
    for i in range(n):
        values = ["" if rng.random() < 0.15 else f"{v:.6g}" for v in X[i]]
        lines.append(f"r{i},{KEYS[i % 2]},{y[i]}," + ",".join(values))
    path.write_text("\n".join(lines) + "\n")
    return path


def feedback_topic(bootstrap, partitions=2):
    """A new topic's URL."""
    name = f"feedback-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, name, partitions=partitions)
    return f"kafka://{bootstrap}/{name}"


def shard_states(models, key, shards):
    """Each shard's newest checkpoint of the model, in shard order."""
    states = []
    for s in range(shards):
        _, table = load_latest(shard_dir(str(models), s, shards), key)
        states.append(from_arrow(table))
    return states


def reference(data, key, shards, delay, chunk_size=10):
    """The key's examples in the CSV ``data`` learned in one process by the reference protocol
    (``learn_with_delay``): (its BatchResult, the shards)."""
    cfg = configure([str(data)], id_column="id", model_key_column="segment")
    blocks = [b for b, _ in read_file(cfg.inputs[0], cfg.format, cfg.spec, chunk_size)]
    mine = [piece for b in blocks for k, piece in b.split_by_key() if k == key]
    fresh = new_learner(cfg)
    states = new_shards(shards, fresh.algorithm, fresh.dim, fresh.loss, fresh.n_classes,
                        fresh.bias_index, **fresh.hyperparameters)
    return learn_with_delay(states, ExampleBlock.concat(mine).batch(), delay), states

