"""The graph's reading step: each input (files, a topic's partitions, the user's own records)
by its source, and the ``ReadExamples`` transform over them."""
from typing import Any, Callable, Dict, FrozenSet, Mapping, Optional, Sequence, Tuple, Union

import apache_beam as beam

from ...connectors.kafka import (KafkaSourceConfig, KafkaTopic, bundle_seconds, is_kafka,
                                 partition_ranges)
from ...parse.records import ExampleBlock
from ...parse.spec import RecordSpec
from ...store.resume import partition_starts, resume_positions
from ..config import configure, learner_check
from .dead_letters import DEAD
from .files import ParseRecords, ReadFiles
from .partitions import ReadPartition, ReadPartitionForever


def read_source(pipeline: beam.Pipeline, inputs: Sequence[str], fmt: str, spec: RecordSpec,
                chunk_size: int, check: Optional[Callable[[ExampleBlock], list]],
                dead_letter: Optional[str], kafka_settings: Mapping[str, Any],
                streaming: bool = False, earliest: Optional[Dict[str, int]] = None,
                furthest: Optional[Dict[str, int]] = None, served: FrozenSet[str] = frozenset()
                ) -> Tuple[beam.PCollection, beam.PCollection]:
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
        taught: Any = getattr(learner, "cfg", learner)  # (its TrainConfig)
        self._setup(configure(inputs, **options), streaming,
                    learner_check(taught) if taught is not None else None,
                    taught.model_dir if taught is not None and taught.resume else None)

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


def as_blocks(examples: beam.PCollection, spec: RecordSpec, chunk_size: int,
              check: Optional[Callable[[ExampleBlock], list]], dead_letter: Optional[str],
              kafka_settings: Optional[Mapping[str, Any]] = None
              ) -> Tuple[beam.PCollection, Optional[beam.PCollection]]:
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
