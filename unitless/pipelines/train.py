"""The training pipeline: read examples, key them by model, predict-then-update in a stateful
DoFn holding each model's learner state, write predictions, dead letters and checkpoints."""
import logging
import time
import typing
from dataclasses import dataclass

import apache_beam as beam
import pyarrow as pa
from apache_beam.coders import BytesCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow

from ..connectors.files import read_file, write_table
from ..connectors.kafka import (KafkaSourceConfig, KafkaTopic, ReadPartition,
                                ReadPartitionForever, WriteToKafka, is_kafka, partition_ranges)
from ..learner import check_examples, new_state
from ..learner.examples import bias_index
from .checkpoints import latest_checkpoint, read_checkpoint, resume_offsets, write_checkpoint
from ..connectors.records import dead_letter_table
from .keyed_model import KeyedModel

log = logging.getLogger("unitless")
DEAD = "dead_letter"


class ReadFiles(beam.DoFn):
    """File path -> ExampleBlocks (main output) and dead-letter tables (DEAD output).

    ``check(block)`` names the rows to refuse, [(row, reason)]; they become dead letters here,
    where the raw records are at hand, and blocks travel on without them.
    """

    def __init__(self, fmt, spec, chunk_size, check):
        self.fmt, self.spec, self.chunk_size, self.check = fmt, spec, chunk_size, check
        self.bad = Metrics.counter("unitless", "bad_records")

    def process(self, path):
        for block, dead in read_file(path, self.fmt, self.spec, self.chunk_size):
            block, refused = block.screen(self.check(block))
            dead += refused
            if dead:
                self.bad.inc(len(dead))
                yield beam.pvalue.TaggedOutput(DEAD, dead_letter_table(dead))
            if len(block):
                block.raw = None
                yield block


@dataclass(frozen=True)
class LearnerCheck:
    """The learner's checks on examples (``check_examples``), run where examples are read."""
    dim: int
    n_classes: int
    loss: str

    def __call__(self, block):
        return check_examples(block.batch(), self.dim, self.n_classes, self.loss)


def learner_check(cfg):
    return LearnerCheck(1 << cfg.spec.bits, cfg.n_classes, cfg.loss)


def key_by_model():
    """ExampleBlock -> (model key, block) per key present; str keys (a deterministic coder)."""
    return beam.FlatMap(lambda block: block.split_by_key()).with_output_types(
        typing.Tuple[str, typing.Any])


def new_keyed_model(cfg, key):
    """The key's model: resumed from its latest checkpoint when asked, else a fresh learner."""
    if cfg.resume:
        path = latest_checkpoint(cfg.model_dir, key)
        if path:
            log.info("model %r resumes from %s", key, path)
            return KeyedModel.from_table(read_checkpoint(path))
    state = new_state(cfg.algorithm, 1 << cfg.spec.bits, cfg.loss, cfg.n_classes,
                      bias_index(cfg.spec.bits) if cfg.spec.bias else -1, **cfg.hyperparameters)
    return KeyedModel(key, state)


class LearnDoFn(beam.DoFn):
    """(model key, ExampleBlock) -> prediction tables; one state read and write per block."""
    MODEL = ReadModifyWriteStateSpec("model", BytesCoder())
    END = TimerSpec("end_of_input", TimeDomain.WATERMARK)

    def __init__(self, cfg):
        self.cfg = cfg
        self.examples = Metrics.counter("unitless", "examples")
        self.bad = Metrics.counter("unitless", "bad_records")
        self.replayed = Metrics.counter("unitless", "replayed_examples_skipped")
        self.loss = Metrics.distribution("unitless", "loss_micros")
        self.checkpoints = Metrics.counter("unitless", "checkpoints")

    def setup(self):
        self.models = {}  # key -> KeyedModel last written to state (skips decoding)
        self.started = self.last_log = time.time()
        self.seen = 0

    def _model(self, key, stored):
        data = stored.read()
        cached = self.models.get(key)
        if data is None:
            model = new_keyed_model(self.cfg, key)
        elif cached is not None and cached.holds(data):
            model = cached
        else:
            model = KeyedModel.from_bytes(data)
        self.models[key] = model
        return model

    def process(self, element, stored=beam.DoFn.StateParam(MODEL),
                end=beam.DoFn.TimerParam(END)):
        key, block = element
        end.set(GlobalWindow().max_timestamp())
        model = self._model(key, stored)
        predictions, dead, skipped = model.learn_block(block)
        if skipped:
            self.replayed.inc(skipped)
        if dead:
            self.bad.inc(len(dead))
            yield beam.pvalue.TaggedOutput(DEAD, dead_letter_table(dead))
        if predictions is not None:
            self.examples.inc(predictions.num_rows)
            self.loss.update(int(1e6 * model.state.cumulative_loss / max(model.state.examples_seen, 1)))
            yield predictions
            self._log(model, predictions.num_rows)
        if model.checkpoint_due(self.cfg.checkpoint_every, self.cfg.checkpoint_seconds):
            self._checkpoint(model)
        stored.write(model.to_bytes())

    @on_timer(END)
    def end_of_input(self, key=beam.DoFn.KeyParam, stored=beam.DoFn.StateParam(MODEL)):
        model = self._model(key, stored)
        if model.checkpoint_examples != model.state.examples_seen:
            self._checkpoint(model)
            stored.write(model.to_bytes())

    def _checkpoint(self, model):
        model.mark_checkpoint()
        path = write_checkpoint(self.cfg.model_dir, model.key, model.to_table(),
                                model.state.examples_seen, self.cfg.keep_checkpoints)
        self.checkpoints.inc()
        log.info("model %r: checkpoint %s (%d examples, progressive loss %.6f)", model.key, path,
                 model.state.examples_seen,
                 model.state.cumulative_loss / max(model.state.examples_seen, 1))

    def _log(self, model, n):
        self.seen += n
        now = time.time()
        if now - self.last_log >= self.cfg.log_every_seconds:
            log.info("%d examples, %.0f examples/s; model %r progressive loss %.6f", self.seen,
                     self.seen / (now - self.started), model.key,
                     model.state.cumulative_loss / max(model.state.examples_seen, 1))
            self.last_log = now


class WriteTables(beam.DoFn):
    """Arrow tables -> one part file per bundle in a directory (atomic rename)."""

    def __init__(self, directory, fmt):
        self.directory, self.fmt = directory, fmt

    def start_bundle(self):
        self.tables = []

    def process(self, table):
        self.tables.append(table)

    def finish_bundle(self):
        if self.tables:
            write_table(self.directory, pa.concat_tables(self.tables), self.fmt)
        self.tables = []


def read_examples(pipeline, cfg, streaming=False):
    """Files or a Kafka topic -> (ExampleBlocks, dead-letter tables)."""
    if is_kafka(cfg.inputs[0]):
        topic = KafkaTopic.parse(cfg.inputs[0], cfg.kafka_settings)
        source = KafkaSourceConfig(topic, cfg.format, cfg.spec, learner_check(cfg),
                                   cfg.chunk_size)
        starts = resume_offsets(cfg.model_dir, topic.topic) if cfg.resume else {}
        ranges = partition_ranges(topic, starts, bounded=not streaming)
        read = (pipeline | "Partitions" >> beam.Create(ranges)
                | "Read Kafka" >> beam.ParDo((ReadPartitionForever if streaming else ReadPartition)(
                    source, DEAD)).with_outputs(
                    DEAD, main="blocks"))
    else:
        read = (pipeline | "Files" >> beam.Create(cfg.inputs)
                | "Read and parse" >> beam.ParDo(ReadFiles(
                    cfg.format, cfg.spec, cfg.chunk_size, learner_check(cfg))
                ).with_outputs(DEAD, main="blocks"))
    return read.blocks, read[DEAD]


def write_tables(tables, target, fmt, kind, settings):
    """Arrow tables -> part files in a directory, or one Kafka message per row."""
    if is_kafka(target):
        return tables | f"{kind} to Kafka" >> beam.ParDo(
            WriteToKafka(KafkaTopic.parse(target, settings), kind))
    return tables | f"Write {kind}" >> beam.ParDo(WriteTables(target, fmt))


def build_training(pipeline, cfg, streaming=False):
    """Add the training graph to ``pipeline``; returns the predictions PCollection."""
    blocks, read_dead = read_examples(pipeline, cfg, streaming)
    learned = (blocks
               | "Key by model" >> key_by_model()
               | "Learn" >> beam.ParDo(LearnDoFn(cfg)).with_outputs(DEAD, main="predictions"))
    write_tables(learned.predictions, cfg.predictions, cfg.output_format, "predictions",
                 cfg.kafka_settings)
    dead = (read_dead, learned[DEAD]) | "All dead letters" >> beam.Flatten()
    write_tables(dead, cfg.dead_letter, "jsonl", "dead letters", cfg.kafka_settings)
    return learned.predictions
