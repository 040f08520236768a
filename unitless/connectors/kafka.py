"""Kafka with kafka-python: a splittable-DoFn source (one offset-range restriction per partition)
and sinks for predictions and dead letters.

URLs name a topic: ``kafka://host:port[,host:port]/topic``. Consumer and producer settings pass
through as kafka-python keyword arguments (``security_protocol``, ``sasl_mechanism``,
``sasl_plain_username``, ``ssl_cafile``, ``client_id``, ...).
"""
import logging
import time
import urllib.parse
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp

from .formats import parse_csv, parse_jsonl, parse_vw
from .records import dead_letter_table, string_array

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


def _consumer(topic, **extra):
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
        consumer = _consumer(topic, request_timeout_ms=int(timeout_s * 1000),
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


class _PartitionTracker(OffsetRestrictionTracker):
    """Offsets of one partition: only the reader itself may split (checkpoint) its range, so a
    runner's dynamic split never hands part of a partition to a second reader out of order."""

    def try_split(self, fraction_of_remainder):
        return super().try_split(0) if fraction_of_remainder == 0 else None


class _OffsetRangeProvider(RestrictionProvider):
    def initial_restriction(self, element):
        _, start, stop = element
        return OffsetRange(start, max(start, stop))

    def create_tracker(self, restriction):
        return _PartitionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size() if restriction.stop != UNBOUNDED else 1 << 20

    def split(self, element, restriction):
        yield restriction  # one reader per partition keeps each model's examples in order


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


class ReadPartition(beam.DoFn):
    """(partition, start, stop) -> ExampleBlocks of that partition in offset order; messages
    that cannot be parsed go to the dead-letter sink, durable before the block after them is
    handed on (so a checkpoint past a refused message implies its dead letter exists, and a
    resumed run skips writing it again)."""

    def __init__(self, cfg):
        self.cfg = cfg

    def setup(self):
        from .sinks import open_sink  # sinks needs this module
        # one consumer per partition: a consumer keeps at most one fetch in flight per broker
        # (held up to fetch_max_wait_ms), which would starve the next partition assigned to it
        self.consumers = {}
        self.dead = open_sink(self.cfg.dead_letter, "jsonl", "dead letters",
                              dict(self.cfg.topic.settings))

    def teardown(self):
        for consumer in self.consumers.values():
            consumer.close()
        self.dead.close()

    def _consumer_for(self, tp):
        if tp.partition not in self.consumers:
            consumer = _consumer(self.cfg.topic, max_poll_records=self.cfg.max_records)
            consumer.assign([tp])
            self.consumers[tp.partition] = consumer
        return self.consumers[tp.partition]

    def process(self, element, tracker=beam.DoFn.RestrictionParam(_OffsetRangeProvider()),
                watermark=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        from kafka import TopicPartition
        from kafka.errors import KafkaError
        partition = element[0]
        tp = TopicPartition(self.cfg.topic.topic, partition)
        restriction = tracker.current_restriction()
        try:
            consumer = self._consumer_for(tp)
        except KafkaError as err:
            if restriction.stop != UNBOUNDED:
                raise
            log.warning("Kafka partition %s: %s; trying again in 1 s", partition, err)
            tracker.defer_remainder(Duration.of(1.0))  # a broker down for now: streams go on
            return
        consumer.seek(tp, restriction.start)
        position = restriction.start
        began = time.time()
        while True:
            if restriction.stop != UNBOUNDED and position >= restriction.stop:
                tracker.try_claim(restriction.stop)  # done: offsets may have gaps at the end
                return
            records = consumer.poll(timeout_ms=self.cfg.poll_ms,
                                    max_records=self.cfg.max_records).get(tp, [])
            if not records:
                if restriction.stop == UNBOUNDED:
                    tracker.defer_remainder(Duration.of(self.cfg.idle_resume_s))
                    return
                continue
            claimed = []
            for r in records:
                if not tracker.try_claim(r.offset):
                    break
                claimed.append(r)
            if claimed:
                position = claimed[-1].offset + 1
                yield from self._emit(partition, claimed, watermark)
            if len(claimed) < len(records):
                return
            if restriction.stop == UNBOUNDED and time.time() - began >= self.cfg.max_bundle_s:
                tracker.defer_remainder()
                return

    def _emit(self, partition, records, watermark):
        source = f"{self.cfg.topic.topic}/{partition}"
        # the parser takes each message value as it came (bytes, or None for a null value):
        # a dead letter carries it byte for byte
        items = [(r.offset, r.value) for r in records]
        by_offset = {r.offset: r for r in records}
        block, dead = VALUE_FORMATS[self.cfg.value_format](self.cfg.spec, source, items)
        block, refused = block.screen(self.cfg.check(block))
        dead += refused
        block.raw = None
        logged = (self.cfg.logged_through or {}).get(source, -1)
        dead = [d for d in dead if d.position > logged]
        if dead:
            self.dead.write(dead_letter_table(dead))
            self.dead.flush()
        if len(block):
            if not self.cfg.spec.model_key:
                block.keys = string_array([(by_offset[p].key or b"").decode("utf-8", "replace")
                                           for p in block.positions.tolist()])
            block.event_times = np.array([by_offset[p].timestamp / 1000.0
                                          for p in block.positions.tolist()])
            # each block of a partition gets a later timestamp than the one before (the latest
            # record time, made strictly increasing): a runner that orders a key's pending
            # elements by timestamp then keeps the partition's order across reader bundles
            stamp = Timestamp.of(float(block.event_times.max()))
            previous = watermark.current_watermark()
            if previous is not None and stamp <= previous:
                stamp = previous + Duration(micros=1)
            watermark.set_watermark(stamp)
            yield TimestampedValue(block, stamp)


class ReadPartitionForever(ReadPartition):
    """The unbounded (streaming) reader: the same reader, declared unbounded per element."""

    @beam.DoFn.unbounded_per_element()
    def process(self, element, tracker=beam.DoFn.RestrictionParam(_OffsetRangeProvider()),
                watermark=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        yield from super().process(element, tracker, watermark)
