"""Where predictions and dead letters go: part files in a directory, or a Kafka topic.

Free of Beam's transforms. A sink buffers what it is given (``write``) and makes it durable on
``flush``: a part file written whole (``storage.atomic_write``: locally fsynced and renamed; on
an object store one upload), or every message acknowledged by the broker (a failed send raises). The training pipeline flushes its sinks before it writes a checkpoint, so a
checkpoint never claims an input position whose predictions and dead letters are not durable.
"""
import uuid
from typing import TYPE_CHECKING, Any, Mapping, Optional

import pyarrow as pa

from .files import write_table
from .kafka import KafkaTopic, is_kafka, prediction_messages
from .kafka_clients import open_producer
from .storage import atomic_write, join, makedirs, remove

if TYPE_CHECKING:
    from .kafka_clients import _ConfluentProducer, _PythonProducer


class FileSink:
    """Arrow tables -> one part file per flush in ``directory``, each written whole."""
    # past this many tables (many model keys' small blocks), a part file is written from one
    # chunk per column: a writer pays per chunk, and combining them first costs less
    COMBINE_PAST = 256
    tables: list[pa.Table]

    def __init__(self, directory: str, fmt: str) -> None:
        self.directory, self.fmt = directory, fmt
        self.tables, self.rows = [], 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self.tables.append(table)
            self.rows += table.num_rows

    def flush(self) -> None:
        if self.tables:
            table = pa.concat_tables(self.tables)
            if len(self.tables) > self.COMBINE_PAST:
                table = table.combine_chunks()
            try:
                write_table(self.directory, table, self.fmt)
            except OSError as err:
                raise OSError(err.errno, f"cannot write to {self.directory}: "
                                         f"{err.strerror or err}") from err
        self.discard()

    def discard(self) -> None:
        """Forget what was written since the last flush (a failed bundle's output)."""
        self.tables, self.rows = [], 0

    def close(self) -> None:
        self.discard()


class KafkaSink:
    """Arrow tables of predictions or dead letters -> one Kafka message per row.

    Predictions and scores: key = model key, value = JSON (``unitless.prediction/4`` or
    ``unitless.score/1``, ``unitless/schemas``). Dead
    letters: the original record byte for byte as the value; source, position and reason in
    headers. ``flush`` returns once the broker acknowledged every message (acks=all).
    """

    def __init__(self, topic: KafkaTopic, kind: str) -> None:
        self.topic, self.kind = topic, kind
        self.rows = 0
        self._producer: Optional["_PythonProducer | _ConfluentProducer"] = None

    @property
    def producer(self) -> "_PythonProducer | _ConfluentProducer":
        """Connected on first use, not before: a reader that never refuses a message, or a
        worker started while the broker is away, needs no producer yet."""
        if self._producer is None:
            self._producer = open_producer(self.topic)
        return self._producer

    def write(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        if self.kind == "predictions":
            keys = [(k or "").encode() for k in table.column("model_key").to_pylist()]
            self.producer.send_all(keys, prediction_messages(table))
        else:
            send = self.producer.send
            for row in table.to_pylist():
                headers = [("unitless.source", row["source"].encode()),
                           ("unitless.position", str(row["position"]).encode()),
                           ("unitless.reason", row["reason"].encode())]
                # a null value stays null (Kafka then wants a key: an empty one)
                send(b"" if row["raw"] is None else None, row["raw"], headers=headers)
        self.rows += table.num_rows

    def flush(self) -> None:
        if self._producer is None:
            return
        self.rows = 0
        self.producer.flush()  # ConnectionError naming the topic when a message failed

    def discard(self) -> None:
        """Messages already handed to the producer go out anyway (at-least-once)."""

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()


class NullSink:
    """No target (None): what is written goes nowhere (the pipeline still outputs it)."""
    rows = 0

    def write(self, table: pa.Table) -> None:
        pass

    flush = discard = close = lambda self: None


def open_sink(target: Optional[str], fmt: str, kind: str,
              kafka_settings: Optional[Mapping[str, Any]] = None
              ) -> "FileSink | KafkaSink | NullSink":
    """A sink for a directory or a ``kafka://servers/topic`` URL (None: a NullSink); kind:
    predictions or dead letters."""
    if target is None:
        return NullSink()
    if is_kafka(target):
        return KafkaSink(KafkaTopic.parse(target, kafka_settings), kind)
    return FileSink(target, fmt)


def check_target(target: Optional[str], kafka_settings: Optional[Mapping[str, Any]] = None,
                 timeout_s: float = 10.0) -> None:
    """Raise ConnectionError or OSError, with a one-line reason, when ``target`` cannot take
    output now: a directory that cannot be created or written, an unreachable broker, a topic
    the broker does not have. None (no target) always can."""
    if target is None:
        return
    if not is_kafka(target):
        try:
            makedirs(target)
            probe = join(target, f".probe-{uuid.uuid4().hex}")
            atomic_write(probe, b"unitless")
            remove(probe)
        except OSError as err:  # (not the probe's name: the directory is what the user gave)
            raise type(err)(f"cannot write in the directory {target}: "
                            f"{err.strerror or err}") from err
        return
    topic = KafkaTopic.parse(target, kafka_settings)
    producer = open_producer(topic, timeout_s)  # ConnectionError naming the broker
    try:
        producer.partitions()  # ConnectionError naming the topic
    finally:
        producer.close(timeout_s=1)
