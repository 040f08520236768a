"""Kafka partitions in, each a splittable DoFn's restriction of offsets read by its one reader
in order, with the watermark on the reader's clock; and the shards' feedback topic."""
import bisect
import logging
import time

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp

from ...connectors.feedback import EndMessage
from ...connectors.feedback import decode as decode_feedback
from ...connectors.kafka import CLIENT_SETTING, UNBOUNDED, parse_messages
from ...connectors.kafka_clients import Records, open_reader
from .dead_letters import DEAD, SourceDeadLetters

log = logging.getLogger("unitless")


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


class ReadPartition(beam.DoFn):
    """(partition, start, stop) -> ExampleBlocks of that partition in offset order (a
    splittable DoFn, one offset-range restriction per partition); messages that cannot be
    parsed go to the dead letters (see the module)."""

    def __init__(self, cfg):
        self.cfg = cfg

    def setup(self):
        # one reader per partition: a consumer keeps at most one fetch in flight per broker
        # (held up to fetch_max_wait_ms), which would starve the next partition assigned to it
        self.readers = {}
        topic = self.cfg.topic
        self.dead = SourceDeadLetters(self.cfg.dead_letter,
                                 {**dict(topic.settings), CLIENT_SETTING: topic.client},
                                 self.cfg.logged_through)

    def teardown(self):
        for reader in self.readers.values():
            reader.close()
        self.dead.close()

    def _reader_for(self, partition, start):
        if partition not in self.readers:
            self.readers[partition] = open_reader(self.cfg.topic, partition,
                                                  self.cfg.max_records)
            log.info("Kafka %s/%d: reading from offset %d", self.cfg.topic.topic, partition,
                     start)
        return self.readers[partition]

    def process(self, element, tracker=beam.DoFn.RestrictionParam(_OffsetRangeProvider()),
                watermark=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        partition = element[0]
        restriction = tracker.current_restriction()
        consumer = self._open(partition, restriction, tracker)
        if consumer is None:
            return
        position = start = restriction.start  # start: of the offsets read, not yet handed on
        if start == element[1]:  # where this run starts reading the partition: see _emit
            start = -1
        streaming = restriction.stop == UNBOUNDED
        ends = time.time() + self.cfg.max_bundle_s  # (streaming: when this bundle hands on)
        # claimed, not yet handed on: one block per bundle (or per max_records) however few
        # messages each poll brings (kafka-python's bring what has arrived, a handful at a
        # time at low rates), so what follows pays its per-block costs once
        pending, stamp = [], None  # stamp: the pending block's timestamp (see below)
        read_any = False
        while True:
            if not streaming and position >= restriction.stop:
                yield from self._emit(partition, pending, stamp, start)
                tracker.try_claim(restriction.stop)  # done: offsets may have gaps at the end
                return
            # streaming, a poll waits no longer than the bundle has left: confluent-kafka's
            # waits until it has max_records or its timeout passes, however many have come
            wait_ms = (min(self.cfg.poll_ms, max(1, int(1000 * (ends - time.time()))))
                       if streaming else self.cfg.poll_ms)
            records = consumer.poll(wait_ms)
            if not records:
                if streaming:
                    yield from self._pause(partition, pending, stamp, start, read_any, tracker,
                                           watermark)
                    return
                continue
            # claimed at once: those before the range's end (a checkpoint may move it)
            claimable = bisect.bisect_left(records.offsets, tracker.current_restriction().stop)
            if claimable:
                if pending and sum(map(len, pending)) + claimable > self.cfg.max_records:
                    start = yield from self._emit(partition, pending, stamp, start)
                if not pending:
                    # a block's stamp is fixed before its first claim, strictly later than
                    # the block before's, and the watermark follows at once: a range split
                    # off (by the runner, at any claim) starts at or past the stamps of every
                    # block this one still holds, so its own blocks, stamped later than that
                    # on any worker's clock, are learned after them (InOrder)
                    stamp = _advance(watermark, Timestamp.now())
                if not tracker.try_claim(records.offsets[claimable - 1]):
                    yield from self._emit(partition, pending, stamp, start)
                    return  # split off meanwhile: the residual reads them
                position = records.offsets[claimable - 1] + 1
                read_any = True
                pending.append(records.head(claimable))
            if claimable < len(records):
                yield from self._emit(partition, pending, stamp, start)
                tracker.try_claim(records.offsets[claimable])  # past the end: the range is done
                return
            if streaming and time.time() >= ends:
                yield from self._emit(partition, pending, stamp, start)
                tracker.defer_remainder()
                return

    def _pause(self, partition, pending, stamp, start, read_any, tracker, watermark):
        """Streaming, after an empty poll: the bundle ends, and the partition is read again
        at once or, idle, after ``idle_resume_s``."""
        if read_any:
            # an empty poll after some that were not: what has come is read (or the bundle's
            # time is up), so its blocks are handed on
            yield from self._emit(partition, pending, stamp, start)
            tracker.defer_remainder()
            return
        # an idle partition must not hold back the watermark (and with it every model's
        # learning, see InOrder): its next block will be stamped later
        _advance(watermark, Timestamp.now())
        tracker.defer_remainder(Duration.of(self.cfg.idle_resume_s))

    def _open(self, partition, restriction, tracker):
        """The partition's reader at the restriction's start; None when the broker cannot be
        reached while streaming (the rest is deferred a second: streams go on)."""
        try:
            consumer = self._reader_for(partition, restriction.start)
        except ConnectionError as err:
            if restriction.stop != UNBOUNDED:
                raise
            log.warning("Kafka partition %s: %s; trying again in 1 s", partition, err)
            tracker.defer_remainder(Duration.of(1.0))
            return None
        consumer.seek(restriction.start)
        return consumer

    def _emit(self, partition, pending, stamp, start):
        """Hand on the claimed polls ``pending``, read from offset ``start`` on, as one block
        stamped ``stamp`` (and its dead letters); empties ``pending``. Returns the offset the
        next block starts at. The first block of the partition in this run (``start`` -1) has
        a span from -1: nothing before it is read in this run, so it holds every example of its
        keys there that comes before its end (a model learns it on arrival:
        ``KeyedModel.continues``)."""
        if not pending:
            return start
        records = Records.concat(pending) if len(pending) > 1 else pending[0]
        pending.clear()
        block, dead = parse_messages(self.cfg, partition, records)
        block.span = (start, records.offsets[-1])  # every offset in it read (gaps included)
        table = self.dead.write(block.source, dead)
        if table is not None:
            yield beam.pvalue.TaggedOutput(DEAD, table)
        if len(block):
            # each block of a partition is stamped later than the one before (the time it was
            # first claimed, made strictly increasing) and the watermark follows: the Learn step
            # orders a key's blocks by these stamps. Not the messages' own timestamps: a
            # producer's clock far ahead would hold every model's learning back until then.
            yield TimestampedValue(block, stamp)
            return block.span[1] + 1
        return start  # (none learnable: the next block's span covers these offsets too)


def _advance(watermark, stamp):
    """Set the watermark to ``stamp``, or 1 µs past where it is when that is not later; the
    stamp set."""
    previous = watermark.current_watermark()
    if previous is not None and stamp <= previous:
        stamp = previous + Duration(micros=1)
    watermark.set_watermark(stamp)
    return stamp


class ReadPartitionForever(ReadPartition):
    """The unbounded (streaming) reader: the same reader, declared unbounded per element."""

    @beam.DoFn.unbounded_per_element()
    def process(self, element, tracker=beam.DoFn.RestrictionParam(_OffsetRangeProvider()),
                watermark=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        yield from super().process(element, tracker, watermark)


class ReadFeedback(beam.DoFn):
    """(partition, start, stop) of a sharded run's feedback topic -> ((model key, shard), part)
    for every shard of the model but the one that wrote the part (``connectors.feedback``), in
    offset order, until this run's end marker (a splittable DoFn, unbounded until then).

    Messages of other runs and anything else on the topic are skipped (counted, and logged
    once a minute). Every round of a sharded model waits for this reader: a poll returns as
    soon as a message has come, and a bundle ends (its parts go on to the shards) as soon as
    the messages fetched with them are read, without waiting for more."""

    def __init__(self, topic, run, shards, poll_ms=20, idle_resume_s=0.01, max_bundle_s=0.1):
        self.topic, self.run, self.shards = topic, run, shards
        self.poll_ms, self.idle_resume_s, self.max_bundle_s = poll_ms, idle_resume_s, max_bundle_s

    def setup(self):
        self.readers = {}
        self.skipped = Metrics.counter("unitless", "feedback_messages_skipped")
        self.last_warning = 0.0

    def teardown(self):
        for reader in self.readers.values():
            reader.close()

    @beam.DoFn.unbounded_per_element()
    def process(self, element, tracker=beam.DoFn.RestrictionParam(_OffsetRangeProvider()),
                watermark=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        partition = element[0]
        if partition not in self.readers:
            self.readers[partition] = open_reader(self.topic, partition, 1024)
        reader = self.readers[partition]
        reader.seek(tracker.current_restriction().start)
        ends = time.time() + self.max_bundle_s
        read_any = False
        while True:
            # once some are read, only those fetched already: the shards wait for them
            records = reader.poll_any(0 if read_any else self.poll_ms)
            if not records:
                _advance(watermark, Timestamp.now())
                tracker.defer_remainder(None if read_any else Duration.of(self.idle_resume_s))
                return
            for offset, value in zip(records.offsets, records.values):
                if not tracker.try_claim(offset):
                    return
                try:
                    message = decode_feedback(value)
                except ValueError as err:
                    self._skip(partition, offset, err)
                    continue
                if message.run != self.run:
                    continue
                if isinstance(message, EndMessage):
                    tracker.try_claim(UNBOUNDED)  # the range is done: the run has ended
                    return
                stamp = _advance(watermark, Timestamp.now())
                for shard in range(self.shards):
                    if shard != message.shard:
                        yield TimestampedValue(((message.model, shard), message), stamp)
            read_any = True
            if time.time() >= ends:
                tracker.defer_remainder()
                return

    def _skip(self, partition, offset, err):
        self.skipped.inc()
        if time.time() - self.last_warning >= 60:
            self.last_warning = time.time()
            log.warning("feedback topic %s/%s offset %d skipped: %s", self.topic.topic,
                        partition, offset, err)
