"""Streaming on Beam's Prism runner against a real broker: kill the pipeline at a random point,
restart it with --resume, and every example is learned exactly once."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from unitless.cli import main  # noqa: E402
from unitless.pipelines.checkpoints import latest_checkpoint, read_checkpoint  # noqa: E402

KEYS = ("north", "south")
PRISM = os.environ.get("UNITLESS_PRISM") or os.path.expanduser(
    "~/.cache/unitless/prism/2.77.0/prism")
if not os.access(PRISM, os.X_OK):
    raise RuntimeError(f"Prism runner binary missing at {PRISM}: run deploy/prism/build_prism.sh")


def produce(bootstrap, topic, start, n):
    rng = np.random.default_rng(start)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(start, start + n):
        x = rng.normal(size=2) * [1e3, 1e-2]
        row = {"id": str(i), "label": 1 if x[0] * 1e-3 - x[1] * 1e2 > 0 else -1,
               "x": float(x[0]), "z": float(x[1])}
        producer.send(topic, key=KEYS[i % 2].encode(), value=json.dumps(row).encode())
    producer.flush()
    producer.close()


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


def kill(process):
    """SIGKILL the pipeline and its Prism runner (which would outlive its parent otherwise)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # the whole group exited already
        pass
    process.wait()


def seen(model_dir, key):
    path = latest_checkpoint(str(model_dir), key)
    if path is None:
        return 0
    return json.loads(read_checkpoint(path).schema.metadata[b"unitless"])["examples_seen"]


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


def test_kill_and_resume_learns_every_example_exactly_once(broker, tmp_path):
    bootstrap, topic = broker.bootstrap_servers, "live"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(t, 2, 1) for t in (topic, f"{topic}-pred", f"{topic}-dead")])
    admin.close()
    total = 4000
    produce(bootstrap, topic, 0, 2000)
    models = tmp_path / "models"
    first = streaming(bootstrap, topic, models)
    kill_after = random.Random().randint(200, 1800)  # examples learned by one model
    try:
        assert wait_for(lambda: seen(models, "north") >= kill_after // 2, 120, first)
    finally:
        kill(first)
    produce(bootstrap, topic, 2000, total - 2000)  # more arrives while the pipeline is down
    second = streaming(bootstrap, topic, models, "--resume")
    try:
        done = wait_for(lambda: all(seen(models, k) == total // 2 for k in KEYS), 180, second)
        assert done, {k: seen(models, k) for k in KEYS}
        time.sleep(2)  # nothing is learned twice after the end either
        assert all(seen(models, k) == total // 2 for k in KEYS)
    finally:
        kill(second)

    # an uninterrupted (bounded) run over the same topic
    assert main(["train", "--input", f"kafka://{bootstrap}/{topic}", "--id-column", "id",
                 "--chunk-size", "50", "--model-dir", str(tmp_path / "whole"),
                 "--predictions", str(tmp_path / "whole-pred"),
                 "--dead-letter", str(tmp_path / "whole-dead")]) == 0
    for key in KEYS:
        a = read_checkpoint(latest_checkpoint(str(models), key))
        b = read_checkpoint(latest_checkpoint(str(tmp_path / "whole"), key))
        ma, mb = (json.loads(t.schema.metadata[b"unitless"]) for t in (a, b))
        assert ma["examples_seen"] == mb["examples_seen"] == total // 2
        assert ma["input_positions"] == mb["input_positions"]
        np.testing.assert_allclose(a.column("w").to_numpy(), b.column("w").to_numpy(),
                                   rtol=1e-12, atol=0)

    # every example has a prediction on the topic (examples predicted before the kill but not
    # yet checkpointed are predicted again after the restart: at-least-once output)
    consumer = KafkaConsumer(f"{topic}-pred", bootstrap_servers=bootstrap,
                             auto_offset_reset="earliest", group_id=None)
    ids, deadline = set(), time.time() + 30
    while len(ids) < total and time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            ids.update(json.loads(r.value)["id"] for r in records)
    consumer.close()
    assert ids == {str(i) for i in range(total)}
