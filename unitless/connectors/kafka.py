"""Kafka topics, free of Beam: topics, partitions and their offsets, and messages parsed into
ExampleBlocks. The clients (kafka-python or confluent-kafka) are behind ``kafka_clients``; the
Beam source that reads partitions is in ``pipelines/io/partitions.py``; the sinks are in
``sinks.py``.

URLs name a topic: ``kafka://host:port[,host:port]/topic``. Consumer and producer settings pass
through to the client, in either client's names (``security_protocol`` or
``security.protocol``, ``sasl_plain_username`` or ``sasl.username``, ...; see
``kafka_clients``).
"""
import json
import logging
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..parse.formats import FORMATS, refuse_non_finite
from ..parse.records import DeadLetter, ExampleBlock, string_array
from ..parse.spec import RecordSpec
from ..schemas import schema_id
from .kafka_clients import Records, choose, client_settings, partition_offsets

log = logging.getLogger("unitless")
UNBOUNDED = (1 << 63) - 1
CLIENT_SETTING = "unitless.kafka_client"  # the client, among a topic's settings


@dataclass(frozen=True)
class KafkaTopic:
    bootstrap_servers: str
    topic: str
    settings: tuple = ()  # (name, value) pairs, either client's names (see kafka_clients)
    client: str = "kafka-python"  # kafka_clients.CLIENTS

    @classmethod
    def parse(cls, url: str, settings: Optional[Mapping[str, Any]] = None) -> "KafkaTopic":
        """The topic a URL names; ``settings`` may name the client under CLIENT_SETTING
        (default: kafka_clients.choose())."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "kafka" or not parts.netloc or not parts.path.strip("/"):
            raise ValueError(f"a Kafka topic is named kafka://host:port/topic, not {url!r}")
        settings = dict(settings or {})
        client = choose(settings.pop(CLIENT_SETTING, None))
        return cls(parts.netloc, parts.path.strip("/"), tuple(sorted(settings.items())), client)

    def client_args(self, **extra: Any) -> dict[str, Any]:
        """The client's settings: the servers, the user's settings in the client's names, and
        ``extra`` (already in the client's names)."""
        settings = client_settings(self.client, dict(self.settings))
        if self.client == "kafka-python":
            return {"bootstrap_servers": self.bootstrap_servers.split(","), **settings, **extra}
        return {"bootstrap.servers": self.bootstrap_servers, **settings, **extra}


def is_kafka(url: object) -> bool:
    return isinstance(url, str) and url.startswith("kafka://")


def partition_ranges(topic: KafkaTopic, start_offsets: Mapping[int, int], bounded: bool,
                     timeout_s: float = 10.0) -> list[tuple[int, int, int]]:
    """[(partition, start, stop)] for the topic; stop = end offset now if bounded.

    start_offsets: {partition: offset} to resume from (others start at the beginning); one
    below the partition's log start (the broker's retention deleted records a resumed run needs)
    raises ValueError rather than lose them. A broker that cannot be reached raises
    ConnectionError within about timeout_s.
    """
    ranges = []
    for p, (first, end) in sorted(partition_offsets(topic, timeout_s).items()):
        start = start_offsets.get(p, first)
        if start < first:
            raise ValueError(
                f"--resume: {topic.topic}/{p} must be read again from offset {start}, but its "
                f"log starts at {first}: {first - start:,} records were deleted (retention) and "
                "would be lost; keep the topic's records longer than the time between "
                "checkpoints (and --label-wait)")
        ranges.append((p, start, end if bounded else UNBOUNDED))
    return ranges


@dataclass
class KafkaSourceConfig:
    topic: KafkaTopic
    value_format: str
    spec: RecordSpec  # model key from spec.model_key, else the message key
    # block -> [(row, reason)] to refuse here, where the raw records are at hand (None: only
    # what the format refuses, as ``ReadExamples`` without a ``learner``)
    check: Optional[Callable[[ExampleBlock], Sequence[tuple[int, str]]]]
    max_records: int = 8192
    poll_ms: int = 200
    idle_resume_s: float = 0.2
    # streaming: a reader hands its blocks downstream only when its bundle ends, so it ends
    # each bundle after this long even while records keep coming, and no poll of it waits
    # past that (bounds the latency). Per topic read (``bundle_seconds``)
    max_bundle_s: float = 0.1
    # where refused messages go (a directory or kafka:// URL; settings as for the topic), and,
    # per source, the position through which a resumed run already wrote them
    dead_letter: Optional[str] = None
    logged_through: Optional[dict] = None


def bundle_seconds(topics: int) -> float:
    """A reader's bundle time when ``topics`` topics feed one learning step: each reader bundle
    hands a model group one element, and Prism gives a stateful step's key about one element a
    bundle, some ten bundles a second, whatever the elements hold; so with a labels topic beside
    the examples' each reader's bundles last longer, and the step gets as many elements a second
    as from one topic (more, and they queue before it: benchmarks/results/labels_stream.md).
    A topic served apart from learning keeps one topic's bundles (``io.sources.read_source``): its
    examples are served when its bundle ends, and its labels' longer bundles hold the step's
    elements a second near one topic's."""
    return KafkaSourceConfig.max_bundle_s * topics


def parse_messages(cfg: KafkaSourceConfig, partition: int, records: Records
                   ) -> tuple[ExampleBlock, list[DeadLetter]]:
    """A poll's ``kafka_clients.Records`` of one partition, in offset order -> (ExampleBlock,
    dead letters).

    The parser takes each message value as it came (bytes, or None for a null value): a dead
    letter carries it byte for byte. Without a model key column the message key is the model
    key; event times are the messages' timestamps, unless the records carry their own
    (``RecordSpec.time``, --time-column)."""
    source = f"{cfg.topic.topic}/{partition}"
    items = list(zip(records.offsets, records.values))
    block, dead = cast(Callable, FORMATS[cfg.value_format].parse)(cfg.spec, source, items)
    block.restarts_midway = True  # resumed at the offsets checkpoints record
    if len(block):  # (before the check: it may ask for a model by key, as scoring does)
        rows = np.searchsorted(np.asarray(records.offsets), block.positions)
        if not cfg.spec.model_key:
            block.keys = string_array([(records.keys[r] or b"").decode("utf-8", "replace")
                                       for r in rows.tolist()])
        if not cfg.spec.time:  # (else the parser read them from the records)
            block.event_times = np.asarray(records.timestamps, dtype=np.float64)[rows] / 1000.0
    block, refused = block.screen(cfg.check(block) if cfg.check is not None else [])
    block.raw = None
    return block, dead + refused



# --- prediction messages -----------------------------------------------------------------------

def prediction_messages(table: pa.Table) -> list[bytes]:
    """One JSON object per row, as bytes: ``{"schema": <id>, <column>: <value>, ...}``, the id
    that of the table's output (``schemas.schema_id``: ``unitless.prediction/4`` for a
    training run's predictions, ``unitless.score/1`` for scores), the columns in the table's
    order; the same objects ``json.dumps`` makes of ``{"schema": ..., **row}`` (a consumer
    decodes equal values of equal types), built a column at a time by Arrow rather than a
    Python call per field."""
    refuse_non_finite(table)  # (strict JSON: no NaN or Infinity token)
    parts = [pa.scalar('{"schema": ' + json.dumps(schema_id(table)))]
    for name, column in zip(table.column_names, table.columns):
        parts += [pa.scalar(f", {json.dumps(name)}: "), _json_values(column)]
    parts.append(pa.scalar("}"))
    joined = pc.binary_join_element_wise(*parts, "")
    return pc.cast(joined, pa.binary()).to_pylist()


_PLAIN = r"^[\x20\x21\x23-\x5b\x5d-\x7e]*$"  # printable ASCII but for " and \: as is in JSON


def _json_values(column):
    """A column's values as JSON text (null for null), as ``json.dumps`` writes them."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = column.type
    if pa.types.is_floating(kind):
        column = pc.cast(column, pa.float64())
        text = pc.cast(column, pa.string())  # the shortest text that reads back the same
        # Python writes 1.0 and -0.0 where Arrow writes 1 and -0 (both write 1e+16; 1e-07 and
        # 1e-7 read as the same number)
        values = column.to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(values) & (values == np.trunc(values))
        if whole.any():
            whole = pc.and_(pa.array(whole), pc.invert(pc.match_substring(text, "e")))
            text = pc.if_else(whole, pc.binary_join_element_wise(text, pa.scalar(".0"), ""),
                              text)
    elif pa.types.is_integer(kind):
        text = pc.cast(column, pa.string())
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        column = pc.cast(column, pa.string())
        plain = pc.fill_null(pc.match_substring_regex(column, _PLAIN), True)
        if pc.all(plain).as_py():
            text = pc.binary_join_element_wise(pa.scalar('"'), column, pa.scalar('"'), "")
        else:
            text = pa.array([None if v is None else json.dumps(v) for v in column.to_pylist()],
                            pa.string())
    elif pa.types.is_boolean(kind):
        text = pc.if_else(column, pa.scalar("true"), pa.scalar("false"))
    else:  # (what no prediction table holds: one Python call per value)
        text = pa.array([json.dumps(v) for v in column.to_pylist()], pa.string())
    return pc.fill_null(text, "null")
