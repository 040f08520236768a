"""Every Beam source and sink of unitless: files and Kafka partitions in, predictions and dead
letters out. Parsing is in ``parse/``, Kafka clients and the sinks themselves in
``connectors/`` (both free of Beam); this module only drives them from DoFns.

Sources write the records they refuse to the dead-letter sink themselves, durably, before they
hand on the block after them: once a checkpoint records a position past a refused record, that
record's dead letter exists, and a resumed run (which reads the source again) does not repeat
the dead letters at or before ``logged_through[source]``.
"""
import bisect
import logging
import time
from typing import Any, Mapping, Optional, Sequence, Union

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp

from ..connectors.feedback import EndMessage
from ..connectors.feedback import decode as decode_feedback
from ..connectors.files import read_file
from ..parse.jsonl import parse_records
from ..connectors.kafka import (CLIENT_SETTING, UNBOUNDED, KafkaSourceConfig, KafkaTopic,
                                bundle_seconds, is_kafka, parse_messages, partition_ranges)
from ..connectors.kafka_clients import Records, open_reader
from ..connectors.sinks import open_sink
from ..parse.records import ExampleBlock, dead_letter_table
from ..store.resume import partition_starts, resume_positions
from .config import configure, kafka_settings, learner_check

log = logging.getLogger("unitless")
DEAD = "dead_letter"  # the tag of every step's dead-letter output


class _DeadLetters:
    """A source's dead-letter sink: writes what a block refused, durably, except what a resumed
    run already wrote (at or before ``logged_through[source]``); counts it."""

    def __init__(self, target, kafka_settings, logged_through):
        self.sink = open_sink(target, "jsonl", "dead letters", kafka_settings)
        self.logged_through = logged_through or {}
        self.bad = Metrics.counter("unitless", "bad_records")

    def write(self, source, dead):
        """The dead letters as a table (None when there are none), durable in the sink."""
        logged = self.logged_through.get(source, -1)
        dead = [d for d in dead if d.position > logged]
        if not dead:
            return None
        self.bad.inc(len(dead))
        table = dead_letter_table(dead)
        self.sink.write(table)
        self.sink.flush()
        return table

    def close(self):
        self.sink.close()


class ReadFiles(beam.DoFn):
    """File path -> ExampleBlocks; what it refuses goes to the dead letters (see the module).

    ``check(block)`` names the rows to refuse, [(row, reason)]; they become dead letters here,
    where the raw records are at hand, and blocks travel on without them.

    With ``spans`` (a run that reads one file), each block carries the span of lines or rows it
    was read from, the file's first from its start: a model then learns each block as it
    arrives, when it comes in order (see ``ordering.InOrder``), instead of holding the file in Beam
    state until the end of the input. Several files get none: their blocks wait, so that
    files are learned in the order of their names on every runner.
    """

    def __init__(self, fmt, spec, chunk_size, check, dead_letter, kafka_settings=None,
                 logged_through=None, spans=False):
        self.fmt, self.spec, self.chunk_size, self.check = fmt, spec, chunk_size, check
        self.dead_letter, self.kafka_settings = dead_letter, kafka_settings
        self.logged_through, self.spans = logged_through, spans
        self.blank = Metrics.counter("unitless", "blank_lines")

    def setup(self):
        self.dead = _DeadLetters(self.dead_letter, self.kafka_settings, self.logged_through)

    def teardown(self):
        self.dead.close()

    def process(self, path):
        start = 0  # of the lines or rows read, not yet in a block handed on
        for block, dead in read_file(path, self.fmt, self.spec, self.chunk_size):
            self.blank.inc(block.blank_lines)
            if self.spans and len(block):
                block.span = (start, int(block.positions[-1]))
                start = block.span[1] + 1
            yield from _hand_on(block, dead, self.check, self.dead, path)


class ParseRecords(beam.DoFn):
    """A batch (list) of the user's own records (dicts, ``beam.Row``s) -> an ExampleBlock
    without a source (``parse_records``); records that cannot be read go to the dead letters
    with the reason, as JSON."""

    def __init__(self, spec, check, dead_letter, kafka_settings=None):
        self.spec, self.check = spec, check
        self.dead_letter, self.kafka_settings = dead_letter, kafka_settings

    def setup(self):
        self.dead = _DeadLetters(self.dead_letter, self.kafka_settings, None)

    def teardown(self):
        self.dead.close()

    def process(self, records):
        block, dead = parse_records(self.spec, None, list(enumerate(records)))
        yield from _hand_on(block, dead, self.check, self.dead, None)


def _hand_on(block, dead, check, dead_letters, source):
    """A parsed block's outputs: the rows ``check`` refuses join its dead letters, which are
    written (durably) and output first; then the rest of the block, without its raw records."""
    block, refused = block.screen(check(block) if check else [])
    table = dead_letters.write(source, dead + refused)
    if table is not None:
        yield beam.pvalue.TaggedOutput(DEAD, table)
    if len(block):
        block.raw = None
        yield block


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
        self.dead = _DeadLetters(self.cfg.dead_letter,
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
        try:
            consumer = self._reader_for(partition, restriction.start)
        except ConnectionError as err:
            if restriction.stop != UNBOUNDED:
                raise
            log.warning("Kafka partition %s: %s; trying again in 1 s", partition, err)
            tracker.defer_remainder(Duration.of(1.0))  # a broker down for now: streams go on
            return
        consumer.seek(restriction.start)
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
                # streaming, an empty poll after some that were not: what has come is read
                # (or the bundle's time is up), so its blocks are handed on
                if streaming and read_any:
                    yield from self._emit(partition, pending, stamp, start)
                    tracker.defer_remainder()
                    return
                if streaming:
                    # an idle partition must not hold back the watermark (and with it every
                    # model's learning, see InOrder): its next block will be stamped later
                    _advance(watermark, Timestamp.now())
                    tracker.defer_remainder(Duration.of(self.cfg.idle_resume_s))
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


class WriteToSink(beam.DoFn):
    """Arrow tables -> a sink (part files or Kafka), flushed at the end of every bundle."""

    def __init__(self, target, fmt, kind, kafka_settings=None):
        self.target, self.fmt, self.kind, self.kafka_settings = target, fmt, kind, kafka_settings

    def setup(self):
        self.sink = open_sink(self.target, self.fmt, self.kind, self.kafka_settings)

    def start_bundle(self):
        self.sink.discard()

    def process(self, table):
        self.sink.write(table)

    def finish_bundle(self):
        self.sink.flush()

    def teardown(self):
        self.sink.close()


def read_source(pipeline, inputs, fmt, spec, chunk_size, check, dead_letter, kafka_settings,
                streaming=False, earliest=None, furthest=None, served=frozenset()):
    """Files or Kafka topics -> (ExampleBlocks, dead-letter tables). A Kafka source starts
    each partition at ``earliest`` (a resumed run's restart offsets, by source); dead letters
    at or before ``furthest`` are not written again. The topics ``served`` (their names) are
    served apart from learning: their bundles end as a single topic's do, since a runner hands
    a bundle's blocks on to the serving step only when it ends (``bundle_seconds``)."""
    if is_kafka(inputs[0]):
        reads = []
        for n, url in enumerate(inputs):  # (a topic's partitions; the first's steps unnumbered)
            topic = KafkaTopic.parse(url, kafka_settings)
            source = KafkaSourceConfig(topic, fmt, spec, check, chunk_size,
                                       max_bundle_s=bundle_seconds(
                                           1 if topic.topic in served else len(inputs)),
                                       dead_letter=dead_letter, logged_through=furthest)
            ranges = partition_ranges(topic, partition_starts(earliest or {}, topic.topic),
                                      bounded=not streaming)
            reader = ReadPartitionForever if streaming else ReadPartition
            suffix = f" {n + 1}" if n else ""
            reads.append(pipeline | f"Partitions{suffix}" >> beam.Create(ranges)
                         | f"Read Kafka{suffix}" >> beam.ParDo(reader(source)).with_output_types(
                             ExampleBlock).with_outputs(DEAD, main="blocks"))
        if len(reads) == 1:
            return reads[0].blocks, reads[0][DEAD]
        return ([r.blocks for r in reads] | "Topics" >> beam.Flatten(),
                [r[DEAD] for r in reads] | "Topics' dead letters" >> beam.Flatten())
    else:
        read = (pipeline | "Files" >> beam.Create(inputs)
                | "Read and parse" >> beam.ParDo(ReadFiles(
                    fmt, spec, chunk_size, check, dead_letter, kafka_settings, furthest,
                    spans=len(inputs) == 1)
                ).with_output_types(ExampleBlock).with_outputs(DEAD, main="blocks"))
    return read.blocks, read[DEAD]


class ReadExamples(beam.PTransform):
    """Files (paths or globs; csv, libsvm, vw, jsonl, parquet, gzip ok) or one Kafka topic
    (``kafka://host:port/topic``) -> a PCollection of ExampleBlocks, for ``Learn`` or ``Score``.

    Options are the reading options of ``unitless train`` as keywords (``format``,
    ``label_column``, ``bits``, ``categorical_columns``, ``classes``, ``dead_letter``, ...; see
    ``config.READ_OPTIONS``), with the same defaults. Records that cannot be read are written to
    ``dead_letter`` (a directory, a Kafka URL, or None) before the block after them is handed
    on, and are also this transform's ``dead_letters`` output (Arrow tables), available as
    ``transform.dead_letters`` once it is applied.

    ``learner``: the ``Learn`` these examples are for. The reader then also refuses, with their
    raw records, the examples that learner would refuse (a label outside its classes, ...), and
    when it resumes, starts a Kafka topic at the offsets its checkpoints record. ``streaming``:
    read a Kafka topic without end.
    """

    def __init__(self, inputs: Union[str, Sequence[str], None] = None, *,
                 streaming: bool = False, learner: Optional[beam.PTransform] = None,
                 **options: Any):
        super().__init__()
        if not inputs:
            raise ValueError("ReadExamples needs inputs: file paths or globs, or a kafka:// URL")
        learner = getattr(learner, "cfg", learner)
        self._setup(configure(inputs, **options), streaming,
                    learner_check(learner) if learner is not None else None,
                    learner.model_dir if learner is not None and learner.resume else None)

    def _setup(self, cfg, streaming, check, resume_dir):
        self.cfg, self.streaming, self.check, self.resume_dir = cfg, streaming, check, resume_dir
        self.dead_letters = None

    @classmethod
    def from_config(cls, cfg, streaming=False, check=None, resume_dir=None):
        """The reader of a run's configuration (the `unitless` command's): ``check(block)``
        names the rows to refuse here; ``resume_dir`` the model directory a resumed run
        continues."""
        read = cls.__new__(cls)
        beam.PTransform.__init__(read)
        read._setup(cfg, streaming, check, resume_dir)
        return read

    def expand(self, pbegin):
        cfg = self.cfg
        earliest, furthest = {}, {}
        if self.resume_dir:
            # read once: the earliest position each checkpoint records is where a Kafka
            # source restarts; records refused at or before the furthest have dead letters
            earliest, furthest = resume_positions(self.resume_dir)
        served = frozenset(KafkaTopic.parse(url).topic for url in cfg.inputs if is_kafka(url)
                           ) - cfg.label_sources if cfg.serve_apart else frozenset()
        blocks, self.dead_letters = read_source(
            pbegin.pipeline, cfg.inputs, cfg.format, cfg.spec, cfg.chunk_size, self.check,
            cfg.dead_letter, cfg.kafka_settings, self.streaming, earliest, furthest, served)
        return blocks


class WritePredictions(beam.PTransform):
    """Arrow tables of predictions or scores -> part files (``output_format``: parquet, jsonl,
    csv) in a directory, or one Kafka message per row on a ``kafka://host:port/topic`` (key =
    model key, JSON value). Each bundle's output is made durable when the bundle ends."""
    kind, default_format = "predictions", "parquet"

    def __init__(self, target: str, output_format: Optional[str] = None,
                 kafka_config: Union[Mapping[str, Any], Sequence[str], None] = None):
        super().__init__()
        self.target = target
        self.output_format = output_format or self.default_format
        self.kafka_settings = kafka_settings(kafka_config)

    def expand(self, tables):
        return tables | beam.ParDo(WriteToSink(self.target, self.output_format, self.kind,
                                               self.kafka_settings))


class WriteDeadLetters(WritePredictions):
    """Dead-letter tables -> JSON lines (source, position, raw bytes as text and base64,
    reason) in a directory, or one Kafka message per dead letter."""
    kind, default_format = "dead letters", "jsonl"


def as_blocks(examples, spec, chunk_size, check, dead_letter, kafka_settings=None):
    """(ExampleBlocks, dead-letter tables or None): a PCollection of ExampleBlocks (typed so,
    as ``ReadExamples`` gives them) as it is; any other is the user's own records, batched
    (up to ``chunk_size`` a block, within a bundle, in order) and parsed (``ParseRecords``)."""
    if examples.element_type is ExampleBlock:
        return examples, None
    parsed = (examples
              | "Batch records" >> beam.BatchElements(min_batch_size=1,
                                                      max_batch_size=chunk_size)
              | "Parse records" >> beam.ParDo(ParseRecords(
                  spec, check, dead_letter, kafka_settings)).with_output_types(
                      ExampleBlock).with_outputs(DEAD, main="blocks"))
    return parsed.blocks, parsed[DEAD]
