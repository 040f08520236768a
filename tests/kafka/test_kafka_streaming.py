"""Streaming on Beam's Prism runner against a real broker: kill the pipeline at a random point and
restart it with --resume, or restart the broker under it; every example is learned exactly once,
and every fifth, which has no label, is served: predicted (again, identically, after a restart)
and never learned."""
import json
import random
import re
import threading
import time
from pathlib import Path

import numpy as np
from kafka import KafkaConsumer

from tests.helpers.commands import create_topics, send
from tests.helpers.kafka_io import seen, streaming, wait_for
from tests.helpers.killing import kill_group
from unitless.cli.main import main
from unitless.store.catalog import latest_checkpoint, read_checkpoint

KEYS = ("north", "south")
SERVED = 5  # every fifth example has no label


def is_served(i):
    return i % SERVED == SERVED - 1


def learned_count(key, total):
    """How many of the first ``total`` examples of the model key have a label (are learned)."""
    return sum(1 for i in range(total) if KEYS[i % 2] == key and not is_served(i))


def numbered_messages(start, n):
    """Examples start..start+n-1, keyed by model key (every fifth without its label)."""
    rng = np.random.default_rng(start)
    out = []
    for i in range(start, start + n):
        x = rng.normal(size=2) * [1e3, 1e-2]
        row = {"id": str(i), "label": 1 if x[0] * 1e-3 - x[1] * 1e2 > 0 else -1,
               "x": float(x[0]), "z": float(x[1])}
        if is_served(i):
            del row["label"]
        out.append((KEYS[i % 2].encode(), json.dumps(row).encode()))
    return out


class Producing(threading.Thread):
    """``send`` in a thread; ``join`` raises what it raised."""

    def __init__(self, *args, **kwargs):
        super().__init__(target=self._produce, args=args, kwargs=kwargs)
        self.error = None

    def _produce(self, *args, **kwargs):
        try:
            send(*args, **kwargs)
        except Exception as err:  # (handed to the test by join)
            self.error = err

    def join(self, timeout=None):
        super().join(timeout)
        if self.error is not None:
            raise AssertionError(f"the test's producer failed: {self.error!r}")


def caught_up(model_dir, total):
    """Every key's newest checkpoint covers all of the first ``total`` examples: those learned
    and those served. (A stream's last examples are served ones: the checkpoint that covers
    them is the one --checkpoint-seconds takes once the stream has gone quiet.)"""
    return all(seen(model_dir, k) == learned_count(k, total)
               and seen(model_dir, k, "examples_served")
               == total_of(k, total) - learned_count(k, total)
               for k in KEYS)


def total_of(key, total):
    return sum(1 for i in range(total) if KEYS[i % 2] == key)


def test_kill_and_resume_learns_every_example_exactly_once(broker, tmp_path):
    """Three SIGKILLs at random points of a stream (more examples arriving while it is down),
    each followed by --resume."""
    bootstrap, topic = broker.bootstrap_servers, "live"
    create_topics(bootstrap, topic, f"{topic}-pred", f"{topic}-dead", partitions=2)
    total, kills = 4000, 3
    send(bootstrap, topic, numbered_messages(0, 1000))
    models = tmp_path / "models"
    rng = random.Random()
    for k in range(kills):
        pipeline = streaming(bootstrap, topic, models, *(["--resume"] if k else []))
        learned = seen(models, "north")
        kill_after = learned + rng.randint(50, 400)  # examples learned by one model
        try:
            assert wait_for(lambda: seen(models, "north") >= kill_after, 120, pipeline)
        finally:
            kill_group(pipeline)
        # more arrives while it is down
        send(bootstrap, topic, numbered_messages(1000 * (k + 1), 1000))
    last = streaming(bootstrap, topic, models, "--resume")
    try:
        done = wait_for(lambda: caught_up(models, total), 180, last)
        assert done, {k: seen(models, k) for k in KEYS}
        time.sleep(2)  # nothing is learned twice after the end either
        assert caught_up(models, total)
    finally:
        kill_group(last)

    assert_equals_an_uninterrupted_run(bootstrap, topic, models, tmp_path / "whole", total)
    assert_every_example_predicted(bootstrap, topic, total)


def test_a_broker_restart_mid_stream_loses_nothing(broker, tmp_path):
    bootstrap, topic = broker.bootstrap_servers, "bounce"
    create_topics(bootstrap, topic, f"{topic}-pred", f"{topic}-dead", partitions=2)
    total = 3000
    send(bootstrap, topic, numbered_messages(0, 1000))
    models = tmp_path / "models"
    pipeline = streaming(bootstrap, topic, models)
    try:
        assert wait_for(lambda: all(seen(models, k) >= 300 for k in KEYS), 120, pipeline)
        # examples keep arriving (the producer buffers and retries) while the broker restarts
        arriving = Producing(bootstrap, topic, numbered_messages(1000, total - 1000),
                             per_second=200)
        arriving.start()
        time.sleep(1)
        broker.stop()  # clean shutdown, same ports and data on start
        time.sleep(3)
        broker.start()
        arriving.join()
        done = wait_for(lambda: caught_up(models, total), 180, pipeline)
        assert done, {k: seen(models, k) for k in KEYS}
    finally:
        kill_group(pipeline)
    assert_equals_an_uninterrupted_run(bootstrap, topic, models, tmp_path / "whole", total)
    assert_every_example_predicted(bootstrap, topic, total)


def test_a_stream_gone_quiet_is_checkpointed_after_checkpoint_seconds(broker, tmp_path):
    """--checkpoint-seconds holds when nothing more arrives: a burst's examples, learned and
    served, are in a checkpoint soon after the stream goes quiet, with no count due."""
    bootstrap, topic = broker.bootstrap_servers, "quiet"
    create_topics(bootstrap, topic, f"{topic}-pred", f"{topic}-dead", partitions=2)
    total = 230
    send(bootstrap, topic, numbered_messages(0, total))
    models = tmp_path / "models"
    pipeline = streaming(bootstrap, topic, models, "--checkpoint-every", "0")
    try:
        assert wait_for(lambda: caught_up(models, total), 90, pipeline), {
            k: (seen(models, k), seen(models, k, "examples_served")) for k in KEYS}
    finally:
        kill_group(pipeline)


def test_idle_models_leave_state_and_return_across_a_kill(broker, tmp_path):
    """--model-ttl 2s: both models leave state once the stream has been quiet that long (the
    reader's clock moves the watermark), return when their keys do, and after a SIGKILL and
    --resume go on from their checkpoints: the models of an uninterrupted run, every example
    predicted."""
    bootstrap, topic = broker.bootstrap_servers, "idle"
    create_topics(bootstrap, topic, f"{topic}-pred", f"{topic}-dead", partitions=2)
    models = tmp_path / "models"
    send(bootstrap, topic, numbered_messages(0, 400))
    pipeline = streaming(bootstrap, topic, models, "--model-ttl", "2s")
    try:
        assert wait_for(lambda: caught_up(models, 400), 120, pipeline)
        assert wait_for(lambda: models_left(pipeline) == 2, 60, pipeline)
        send(bootstrap, topic, numbered_messages(400, 400))
        assert wait_for(lambda: caught_up(models, 800), 120, pipeline)
    finally:
        kill_group(pipeline)
    send(bootstrap, topic, numbered_messages(800, 400))
    pipeline = streaming(bootstrap, topic, models, "--model-ttl", "2s", "--resume")
    try:
        assert wait_for(lambda: caught_up(models, 1200), 120, pipeline)
    finally:
        kill_group(pipeline)
    assert_equals_an_uninterrupted_run(bootstrap, topic, models, tmp_path / "whole", 1200)
    assert_every_example_predicted(bootstrap, topic, 1200)


def models_left(pipeline):
    """How many models have left state idle, as the pipeline's log says."""
    return sum(int(n) for n in re.findall(r"([0-9]+) models? idle for .* left state",
                                          Path(pipeline.log).read_text()))



def assert_equals_an_uninterrupted_run(bootstrap, topic, models, whole, total):
    """The streamed models equal a bounded run over the same topic: same examples, same
    weights (1e-12)."""
    assert main(["train", "--input", f"kafka://{bootstrap}/{topic}", "--id-column", "id",
                 "--chunk-size", "50", "--model-dir", str(whole),
                 "--predictions", str(whole.parent / f"{whole.name}-pred"),
                 "--dead-letter", str(whole.parent / f"{whole.name}-dead")]) == 0
    for key in KEYS:
        a = read_checkpoint(latest_checkpoint(str(models), key))
        b = read_checkpoint(latest_checkpoint(str(whole), key))
        ma, mb = (json.loads(t.schema.metadata[b"unitless"]) for t in (a, b))
        assert ma["examples_seen"] == mb["examples_seen"] == learned_count(key, total)
        assert ma["input_positions"] == mb["input_positions"]
        np.testing.assert_allclose(a.column("w").to_numpy(), b.column("w").to_numpy(),
                                   rtol=1e-12, atol=0)


def assert_every_example_predicted(bootstrap, topic, total):
    """Every example has a prediction on the topic (examples predicted but not yet checkpointed
    when the pipeline stopped are predicted again: at-least-once output), served where it has
    no label; a prediction made again is the same, with the same model version."""
    consumer = KafkaConsumer(f"{topic}-pred", bootstrap_servers=bootstrap,
                             auto_offset_reset="earliest", group_id=None)
    made, deadline = {}, time.time() + 30
    while len(made) < total and time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            for r in records:
                row = json.loads(r.value)
                again = made.setdefault(row["id"], row)
                assert [again[c] for c in ("model_key", "examples_seen", "prediction",
                                           "served", "source", "position")] == [
                    row[c] for c in ("model_key", "examples_seen", "prediction", "served",
                                     "source", "position")], (again, row)
    consumer.close()
    assert set(made) == {str(i) for i in range(total)}
    assert all(made[str(i)]["served"] == is_served(i) for i in range(total))


def test_a_reader_or_sink_started_while_the_broker_is_away_waits_for_it(broker, kafka_client):
    """A worker that opens its partition reader or a sink's producer while the broker restarts
    (a new worker, a bundle on a new instance) waits for the broker, as a send does, rather
    than failing the run: kafka-python's clients bootstrap as they are made, and give up after
    ``bootstrap_timeout_ms`` (30 s by default, 2 s here, so that the broker's restart outlasts
    it). The message sent then arrives and is read back. (confluent-kafka's clients connect
    later, and wait as their sends do.)"""
    from unitless.connectors.kafka import KafkaTopic
    from unitless.connectors.kafka_clients import open_producer, open_reader
    bootstrap, name = broker.bootstrap_servers, "away"
    create_topics(bootstrap, name, f"{name}-pred", f"{name}-dead", partitions=1)
    settings = {"bootstrap_timeout_ms": 2000} if kafka_client == "kafka-python" else {}
    topic = KafkaTopic.parse(f"kafka://{bootstrap}/{name}", settings)
    broker.stop()
    opened, failed = {}, []

    def open_both():
        try:
            opened["producer"] = open_producer(topic)
            opened["reader"] = open_reader(topic, 0, 10)
        except Exception as err:  # (reported by the test's thread below)
            failed.append(err)

    starting = threading.Thread(target=open_both)
    starting.start()
    time.sleep(5)
    assert not failed, failed
    broker.start()
    starting.join(150)
    assert not failed, failed
    producer, reader = opened["producer"], opened["reader"]
    producer.send(b"k", b"after the restart")
    producer.flush()
    reader.seek(0)
    got, deadline = [], time.time() + 60
    while not got and time.time() < deadline:
        got = reader.poll(500).values
    assert got == [b"after the restart"]
    producer.close()
    reader.close()
