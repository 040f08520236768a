"""Kafka test I/O: keyed examples for a topic, a topic read back, a streaming run watched, a
broker emptied between test modules."""
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from kafka import KafkaAdminClient, KafkaConsumer

from unitless.store.catalog import load_latest

from tests.helpers.runners import PRISM

KEYS = ("alpha", "beta", "gamma")


def delete_everything(bootstrap, timeout=60.0):
    """Delete every topic (but the broker's own) and consumer group on the broker, and wait
    until no topic is left: the next test module may make topics of the same names, which must
    then be new and empty."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        groups = [g["group_id"] if isinstance(g, dict) else g[0] for g in admin.list_groups()]
        if groups:
            admin.delete_groups(groups)  # (one still in use is left; none is, between modules)
        topics = [t for t in admin.list_topics() if not t.startswith("__")]
        if topics:
            admin.delete_topics(topics)
        deadline = time.time() + timeout
        while set(topics) & set(admin.list_topics()):
            assert time.time() < deadline, f"topics not deleted within {timeout:g} s: {topics}"
            time.sleep(0.1)
    finally:
        admin.close()


def keyed_examples(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * [1e-3, 1.0, 1e4]
    y = np.where(X @ [1e3, -1.0, 1e-4] + rng.normal(size=n) > 0, 1, -1)
    return [{"id": f"{seed}-{i}", "segment": KEYS[i % 3], "label": int(y[i]),
             "a": float(X[i, 0]), "b": float(X[i, 1]), "c": float(X[i, 2])} for i in range(n)]


def keyed(rows, bad=()):
    """JSON examples keyed by model key; ``bad`` raw values between them."""
    out = []
    for i, row in enumerate(rows):
        out.append((row["segment"].encode(), json.dumps(row).encode()))
        if i < len(bad):
            out.append((b"alpha", bad[i]))
    return out


def consume_all(bootstrap, topic, expected, timeout=60):
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None)
    out, deadline = [], time.time() + timeout
    while len(out) < expected and time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            out.extend(records)
    consumer.close()
    return out


def streaming(bootstrap, topic, model_dir, *extra):
    log = open(Path(model_dir).parent / f"streaming-{time.time_ns()}.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "unitless.cli", "train", "--input", f"kafka://{bootstrap}/{topic}",
         "--id-column", "id", "--model-dir", str(model_dir), "--chunk-size", "50",
         "--predictions", f"kafka://{bootstrap}/{topic}-pred",
         "--dead-letter", f"kafka://{bootstrap}/{topic}-dead", "--checkpoint-every", "100",
         "--checkpoint-seconds", "1", "--runner", "PrismRunner", "--prism_location", PRISM,
         "--streaming", *extra], stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)  # its own process group, with the Prism runner it starts
    process.log = log.name
    return process


def seen(model_dir, key, count="examples_seen"):
    """Examples the key's newest checkpoint has learned (or served) (read at once: the run may
    prune a file it named a moment ago)."""
    found = load_latest(str(model_dir), key)
    if found is None:
        return 0
    return json.loads(found[1].schema.metadata[b"unitless"]).get(count, 0)


def wait_for(condition, timeout, process):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        if process.poll() is not None:
            tail = Path(process.log).read_text()[-3000:]
            raise AssertionError(f"the streaming pipeline exited ({process.returncode}):\n{tail}")
        time.sleep(0.2)
    return False
