"""Kafka topics, free of Beam: topics, partitions and their offsets, and messages parsed into
ExampleBlocks. The clients (kafka-python or confluent-kafka) are behind ``kafka_clients``; the
Beam source that reads partitions is in ``pipelines/io.py``; the sinks are in ``sinks.py``.

URLs name a topic: ``kafka://host:port[,host:port]/topic``. Consumer and producer settings pass
through to the client, in either client's names (``security_protocol`` or
``security.protocol``, ``sasl_plain_username`` or ``sasl.username``, ...; see
``kafka_clients``).
"""
import logging
import urllib.parse
from dataclasses import dataclass

import numpy as np

from .formats import parse_csv, parse_jsonl, parse_vw
from .kafka_clients import choose, client_settings, partition_offsets
from .records import string_array

log = logging.getLogger("unitless")
PREDICTION_SCHEMA_ID = "unitless.prediction/1"
UNBOUNDED = (1 << 63) - 1
VALUE_FORMATS = {"jsonl": parse_jsonl, "vw": parse_vw, "csv": parse_csv}
CLIENT_SETTING = "unitless.kafka_client"  # the client, among a topic's settings


@dataclass(frozen=True)
class KafkaTopic:
    bootstrap_servers: str
    topic: str
    settings: tuple = ()  # (name, value) pairs, either client's names (see kafka_clients)
    client: str = "kafka-python"  # kafka_clients.CLIENTS

    @classmethod
    def parse(cls, url, settings=None):
        """The topic a URL names; ``settings`` may name the client under CLIENT_SETTING
        (default: kafka_clients.choose())."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "kafka" or not parts.netloc or not parts.path.strip("/"):
            raise ValueError(f"a Kafka topic is named kafka://host:port/topic, not {url!r}")
        settings = dict(settings or {})
        client = choose(settings.pop(CLIENT_SETTING, None))
        return cls(parts.netloc, parts.path.strip("/"), tuple(sorted(settings.items())), client)

    def client_args(self, **extra):
        """The client's settings: the servers, the user's settings in the client's names, and
        ``extra`` (already in the client's names)."""
        settings = client_settings(self.client, dict(self.settings))
        if self.client == "kafka-python":
            return {"bootstrap_servers": self.bootstrap_servers.split(","), **settings, **extra}
        return {"bootstrap.servers": self.bootstrap_servers, **settings, **extra}


def is_kafka(url):
    return isinstance(url, str) and url.startswith("kafka://")


def partition_ranges(topic, start_offsets, bounded, timeout_s=10.0):
    """[(partition, start, stop)] for the topic; stop = end offset now if bounded.

    start_offsets: {partition: offset} to resume from (others start at the beginning). A broker
    that cannot be reached raises ConnectionError within about timeout_s.
    """
    return [(p, max(first, start_offsets.get(p, 0)), end if bounded else UNBOUNDED)
            for p, (first, end) in sorted(partition_offsets(topic, timeout_s).items())]


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
    """Records of one partition (``kafka_clients.Record``s or kafka-python's), in offset order
    -> (ExampleBlock, dead letters).

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

