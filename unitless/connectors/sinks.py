"""Where predictions and dead letters go: part files in a directory, or a Kafka topic.

Free of Beam's transforms. A sink buffers what it is given (``write``) and makes it durable on
``flush``: a part file written whole (``storage.atomic_write``: locally fsynced and renamed; on
an object store one upload), or every message acknowledged by the broker (a failed send raises). The training pipeline flushes its sinks before it writes a checkpoint, so a
checkpoint never claims an input position whose predictions and dead letters are not durable.
"""
import json
import uuid

import pyarrow as pa

from .files import write_table
from .kafka import PREDICTION_SCHEMA_ID, KafkaTopic, is_kafka
from .storage import atomic_write, join, makedirs, remove


class FileSink:
    """Arrow tables -> one part file per flush in ``directory``, each written whole."""

    def __init__(self, directory, fmt):
        self.directory, self.fmt = directory, fmt
        self.tables, self.rows = [], 0

    def write(self, table):
        if table.num_rows:
            self.tables.append(table)
            self.rows += table.num_rows

    def flush(self):
        if self.tables:
            try:
                write_table(self.directory, pa.concat_tables(self.tables), self.fmt)
            except OSError as err:
                raise OSError(err.errno, f"cannot write to {self.directory}: "
                                         f"{err.strerror or err}") from err
        self.discard()

    def discard(self):
        """Forget what was written since the last flush (a failed bundle's output)."""
        self.tables, self.rows = [], 0

    def close(self):
        self.discard()


class KafkaSink:
    """Arrow tables of predictions or dead letters -> one Kafka message per row.

    Predictions: key = model key, value = JSON (schema ``unitless.prediction/1``). Dead
    letters: the original record byte for byte as the value; source, position and reason in
    headers. ``flush`` returns once the broker acknowledged every message (acks=all).
    """

    def __init__(self, topic, kind):
        self.topic, self.kind = topic, kind
        self.pending, self.rows, self.partitions = [], 0, {}
        self._producer = None

    @property
    def producer(self):
        """Connected on first use, not before: a reader that never refuses a message, or a
        worker started while the broker is away, needs no producer yet."""
        if self._producer is None:
            from kafka import KafkaProducer
            self._producer = KafkaProducer(**self.topic.client_args(acks="all", linger_ms=5))
        return self._producer

    def write(self, table):
        if not table.num_rows:
            return
        send, name = self.producer.send, self.topic.topic
        if self.kind == "predictions":
            for row in table.to_pylist():
                key = (row["model_key"] or "").encode()
                value = json.dumps({"schema": PREDICTION_SCHEMA_ID, **row}).encode()
                self.pending.append(send(name, key=key, partition=self._partition(key),
                                         value=value))
        else:
            for row in table.to_pylist():
                headers = [("unitless.source", row["source"].encode()),
                           ("unitless.position", str(row["position"]).encode()),
                           ("unitless.reason", row["reason"].encode())]
                # a null value stays null (Kafka then wants a key: an empty one)
                self.pending.append(send(name, key=b"" if row["raw"] is None else None,
                                         value=row["raw"], headers=headers))
        self.rows += table.num_rows

    def flush(self):
        if self._producer is None:
            return
        self.producer.flush()
        failed = next((f for f in self.pending if f.failed()), None)
        self.pending, self.rows = [], 0
        if failed is not None:
            raise ConnectionError(f"Kafka topic {self.topic.topic!r} on "
                                  f"{self.topic.bootstrap_servers}: {failed.exception}")

    def discard(self):
        """Messages already handed to the producer go out anyway (at-least-once)."""

    def _partition(self, key):
        """The partition Kafka's default partitioner gives a keyed message (found once per
        key rather than once per message)."""
        if key not in self.partitions:
            from kafka.partitioner import murmur2
            partitions = sorted(self.producer.partitions_for(self.topic.topic))
            self.partitions[key] = partitions[(murmur2(key) & 0x7FFFFFFF) % len(partitions)]
        return self.partitions[key]

    def close(self):
        if self._producer is not None:
            self._producer.close()


class NullSink:
    """No target (None): what is written goes nowhere (the pipeline still outputs it)."""
    rows = 0

    def write(self, table):
        pass

    flush = discard = close = lambda self: None


def open_sink(target, fmt, kind, kafka_settings=None):
    """A sink for a directory or a ``kafka://servers/topic`` URL (None: a NullSink); kind:
    predictions or dead letters."""
    if target is None:
        return NullSink()
    if is_kafka(target):
        return KafkaSink(KafkaTopic.parse(target, kafka_settings), kind)
    return FileSink(target, fmt)


def check_target(target, kafka_settings=None, timeout_s=10.0):
    """Raise ConnectionError or OSError, with a one-line reason, when ``target`` cannot take
    output now: a directory that cannot be created or written, an unreachable broker, a topic
    the broker does not have. None (no target) always can."""
    if target is None:
        return
    if not is_kafka(target):
        makedirs(target)
        probe = join(target, f".probe-{uuid.uuid4().hex}")
        atomic_write(probe, b"unitless")
        remove(probe)
        return
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    topic = KafkaTopic.parse(target, kafka_settings)
    try:
        ms = int(timeout_s * 1000)
        producer = KafkaProducer(**topic.client_args(max_block_ms=ms, request_timeout_ms=ms,
                                                     bootstrap_timeout_ms=ms))
    except KafkaError as err:
        raise ConnectionError(f"Kafka broker {topic.bootstrap_servers} unreachable for "
                              f"{target}: {err}") from None
    try:
        producer.partitions_for(topic.topic)
    except KafkaError as err:
        raise ConnectionError(f"Kafka topic {topic.topic!r} on {topic.bootstrap_servers} "
                              f"cannot take output: {err}") from None
    finally:
        producer.close(timeout=1)
