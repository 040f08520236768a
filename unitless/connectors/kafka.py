"""Kafka with kafka-python, free of Beam: topics, partitions and their offsets, and messages
parsed into ExampleBlocks. The Beam source that reads partitions is in ``pipelines/io.py``; the
sinks are in ``sinks.py``.

URLs name a topic: ``kafka://host:port[,host:port]/topic``. Consumer and producer settings pass
through as kafka-python keyword arguments (``security_protocol``, ``sasl_mechanism``,
``sasl_plain_username``, ``ssl_cafile``, ``client_id``, ...).
"""
import logging
import time
import urllib.parse
from dataclasses import dataclass

import numpy as np

from .formats import parse_csv, parse_jsonl, parse_vw
from .records import string_array

log = logging.getLogger("unitless")
PREDICTION_SCHEMA_ID = "unitless.prediction/1"
UNBOUNDED = (1 << 63) - 1
VALUE_FORMATS = {"jsonl": parse_jsonl, "vw": parse_vw, "csv": parse_csv}


@dataclass(frozen=True)
class KafkaTopic:
    bootstrap_servers: str
    topic: str
    settings: tuple = ()  # (name, value) pairs for kafka-python

    @classmethod
    def parse(cls, url, settings=None):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "kafka" or not parts.netloc or not parts.path.strip("/"):
            raise ValueError(f"a Kafka topic is named kafka://host:port/topic, not {url!r}")
        return cls(parts.netloc, parts.path.strip("/"), tuple(sorted((settings or {}).items())))

    def client_args(self, **extra):
        return {"bootstrap_servers": self.bootstrap_servers.split(","), **dict(self.settings),
                **extra}


def is_kafka(url):
    return isinstance(url, str) and url.startswith("kafka://")


def open_consumer(topic, **extra):
    """A kafka-python consumer of ``topic`` that commits nothing (positions live in
    checkpoints)."""
    from kafka import KafkaConsumer
    return KafkaConsumer(**topic.client_args(enable_auto_commit=False, group_id=None, **extra))


def partition_ranges(topic, start_offsets, bounded, timeout_s=10.0):
    """[(partition, start, stop)] for the topic; stop = end offset now if bounded.

    start_offsets: {partition: offset} to resume from (others start at the beginning). A broker
    that cannot be reached raises ConnectionError within about timeout_s.
    """
    from kafka import TopicPartition
    from kafka.errors import KafkaError
    deadline = time.time() + timeout_s
    try:
        consumer = open_consumer(topic, request_timeout_ms=int(timeout_s * 1000),
                             bootstrap_timeout_ms=int(timeout_s * 1000))
    except KafkaError as err:
        raise ConnectionError(f"Kafka broker {topic.bootstrap_servers} unreachable: {err}") from None
    try:
        partitions = None
        while time.time() < deadline:
            partitions = consumer.partitions_for_topic(topic.topic)
            if partitions:
                break
            time.sleep(0.2)
        if not partitions:
            raise ConnectionError(f"Kafka topic {topic.topic!r} not found on "
                                  f"{topic.bootstrap_servers}")
        tps = [TopicPartition(topic.topic, p) for p in sorted(partitions)]
        begin = consumer.beginning_offsets(tps)
        end = consumer.end_offsets(tps) if bounded else {}
        return [(tp.partition, max(begin[tp], start_offsets.get(tp.partition, 0)),
                 end[tp] if bounded else UNBOUNDED) for tp in tps]
    finally:
        consumer.close()


@dataclass
class KafkaSourceConfig:
    topic: KafkaTopic
    value_format: str
    spec: object  # RecordSpec; model key from spec.model_key, else the message key
    check: object  # block -> [(row, reason)] to refuse here, where the raw records are at hand
    max_records: int = 8192
    poll_ms: int = 200
    idle_resume_s: float = 0.2
    # streaming: a reader hands its blocks downstream only when its bundle ends, so it ends
    # each bundle after this long even while records keep coming (bounds the latency)
    max_bundle_s: float = 0.1
    # where refused messages go (a directory or kafka:// URL; settings as for the topic), and,
    # per source, the position through which a resumed run already wrote them
    dead_letter: str = None
    logged_through: dict = None


def parse_messages(cfg, partition, records):
    """kafka-python records of one partition, in offset order -> (ExampleBlock, dead letters).

    The parser takes each message value as it came (bytes, or None for a null value): a dead
    letter carries it byte for byte. Without a model key column the message key is the model
    key; event times are the messages' timestamps."""
    source = f"{cfg.topic.topic}/{partition}"
    items = [(r.offset, r.value) for r in records]
    by_offset = {r.offset: r for r in records}
    block, dead = VALUE_FORMATS[cfg.value_format](cfg.spec, source, items)
    block, refused = block.screen(cfg.check(block))
    block.raw = None
    if len(block):
        offsets = block.positions.tolist()
        if not cfg.spec.model_key:
            block.keys = string_array([(by_offset[p].key or b"").decode("utf-8", "replace")
                                       for p in offsets])
        block.event_times = np.array([by_offset[p].timestamp / 1000.0 for p in offsets])
    return block, dead + refused

