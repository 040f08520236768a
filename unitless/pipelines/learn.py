"""The training pipeline, ``Learn``: read examples, serve them (with --labels), key them by
model, learn them in the learning step (``train.LearnBlocks`` under ``ordering.InOrder``), and
count what happened (``accounting``); the checks a run makes before it starts; and the
`unitless train` graph (``build_training``)."""
import logging
from dataclasses import replace
from typing import Any, Optional, cast

import apache_beam as beam
import pyarrow as pa

from ..connectors.kafka import is_kafka
from ..connectors.sinks import check_target
from ..connectors.storage import list_dir, remove_leftovers, remove_tree
from ..runtime.beam_patches import watch_jobs_without_a_deadline
from ..runtime.bundles import hold_each_key_in_one_bundle
from ..store.checkpoint_file import read_once
from ..store.groups import group_counts, published_dir
from ..store.catalog import checkpoint_metadata
from ..store.ownership import OWNER, own, refuse_earlier_models, start_over
from ..store.resume import covered_partitions, served_positions
from ..store.shards import shard_counts
from ..store.starts import starts_dir
from .accounting import ACCOUNTS, RANGES, CheckAccounts, CountOverlaps, count_as, count_predictions
from .config import TrainConfig, check_resume, configure, learner_check
from .io.dead_letters import DEAD
from .io.sources import ReadExamples, as_blocks
from .keying import key_by_model
from .ordering import InOrder
from .serve import SERVED, serve_step
from .sharded import learn_over_shards
from .train import LearnBlocks

log = logging.getLogger("unitless")


def check_before_start(cfg: TrainConfig) -> None:
    """Fail fast, with one line, on what would otherwise fail inside the pipeline: outputs that
    cannot be written, and --resume of models trained with other settings. Then remove the
    temporary files that a killed run left in the output directories. The model directory is
    this process's from then on (``ownership``): another run's is refused, and so are an
    earlier run's models without --resume, unless --overwrite removes them."""
    for target in (cfg.predictions, cfg.dead_letter):
        check_target(target, cfg.kafka_settings)
    check_target(cfg.model_dir)
    own(cfg.model_dir)  # (first: what follows removes files another run may be writing)
    if cfg.serve_apart:  # (states an earlier run published: this run publishes its own)
        remove_tree(published_dir(cfg.model_dir))
    if cfg.overwrite:
        start_over(cfg.model_dir, [d for d in (cfg.predictions, cfg.dead_letter)
                                   if d is not None and not is_kafka(d)])
    elif not cfg.resume:
        refuse_earlier_models(cfg.model_dir)
    for directory, depth in ((cfg.model_dir, 4), (cfg.predictions, 1), (cfg.dead_letter, 1)):
        if directory is not None and not is_kafka(directory):
            remove_leftovers(directory, depth)  # (4: MODEL_DIR/published/groups/<n>/<group>/)
    if cfg.resume:
        models, counts = checkpoint_metadata(cfg.model_dir), shard_counts(cfg.model_dir)
        if counts and not cfg.shards:
            raise ValueError(f"--resume: {cfg.model_dir} holds models over {counts[-1]} feature "
                             f"shards: resume with --shards {counts[-1]}")
        if models and cfg.shards:
            raise ValueError(f"--resume: {cfg.model_dir} holds models without feature shards: "
                             "resume without --shards")
        grouped = [g for g in group_counts(cfg.model_dir) if g != cfg.model_groups]
        if grouped and not cfg.shards:
            # (a model is read back from its own group's directory only)
            raise ValueError(f"--resume: {cfg.model_dir} holds models in {grouped[-1]} model "
                             f"groups: resume with --model-groups {grouped[-1]}")
        listed = [n for names in list_dir(cfg.model_dir) for n in names if n != OWNER]
        if not models and not counts and listed:
            log.warning("--resume: %s holds no readable unitless checkpoint; every model starts "
                        "afresh", cfg.model_dir)
        for _, path, meta in models:  # (each model is checked again when it is read)
            check_resume(cfg, meta, path)


class Learn(beam.PTransform):
    """ExampleBlocks (from ``ReadExamples``) or the user's own records (dicts or ``beam.Row``s:
    the label, and the id, model key and weight fields named by ``label_column``,
    ``id_column``, ``model_key_column``, ``weight_column``; every other field a feature,
    numbers as values, strings one-hot; batched here up to ``chunk_size`` examples a block) ->
    a PCollection of predictions (Arrow tables, one row per example, made before the model
    learned it; ``Rows()`` turns them into dicts).

    One model per model key, learning every example exactly once and each source's examples in
    input order, checkpointed in ``model_dir``; options are ``unitless train``'s flags as
    keywords, with its defaults (``config.configure``); the examples refused are
    ``transform.dead_letters`` once it is applied. What it guarantees whatever the runner and
    its options: docs/usage.md ("In your own Beam pipeline") and docs/guarantees.md.
    ``outputs=False``: neither PCollection is made whole (the learning step's predictions
    are returned, ``dead_letters`` stays None), for a graph that only needs them written.
    """

    def __init__(self, config: Optional[TrainConfig] = None, outputs: bool = True,
                 **options: Any):
        super().__init__()
        self.cfg = config if config is not None else configure(**options)
        # (False: `unitless train`'s own graph, which writes every prediction and dead letter
        # through its sinks and uses neither PCollection whole: they stay the learning step's,
        # since a Flatten of the serving step's with the learning step's would make a batch
        # runner hold every prediction of the run in memory)
        self.outputs = outputs
        self.dead_letters = None

    def expand(self, examples):
        cfg = self.cfg
        if cfg.labels and not examples.is_bounded and cfg.label_wait is None:
            # (a label whose example never comes would hold its model's later labels for ever)
            raise ValueError("--labels on a stream that does not end needs --label-wait: how "
                             "long an example waits for its label, and a label for its example")
        hold_each_key_in_one_bundle(examples.pipeline.options)
        watch_jobs_without_a_deadline()  # (this process submits: a Prism job may run long)
        with read_once():  # (the checks and the covered partitions read the same checkpoints)
            check_before_start(cfg)
            covered = covered_partitions(cfg.model_dir) if cfg.resume and not cfg.shards else ()
            through = served_positions(cfg.model_dir) if cfg.resume and cfg.serve_apart else None
        blocks, parse_dead = as_blocks(examples, cfg.spec, cfg.chunk_size, learner_check(cfg),
                                       cfg.dead_letter, cfg.kafka_settings)
        tallies = [blocks | "Count read" >> count_as("read")]
        dead = []
        if parse_dead is not None:
            tallies.append(parse_dead | "Count unreadable" >> count_as("read", "refused"))
            dead.append(parse_dead)
        served = None
        if cfg.serve_apart:
            # (served examples are counted by the learning step, as it takes them: Tally.served)
            served = blocks | "Serve" >> serve_step(cfg, through)
            blocks = served.blocks
            tallies.append(served[DEAD] | "Count refused serving" >> count_as("refused"))
            dead.append(served[DEAD])
        if cfg.shards:
            predictions, replayed = learn_over_shards(blocks, cfg)
            tallies.append(replayed)
        else:
            learned = (blocks | "Key by model" >> key_by_model(
                           cfg.chunk_size, starts=starts_dir(cfg.model_dir), covered=covered,
                           model_groups=cfg.model_groups)
                       # (its output type declared: Beam would read it from the bytecode of
                       # InOrder.process, a fifth of a second of every run's start)
                       | "Learn" >> beam.ParDo(InOrder(LearnBlocks(
                           cfg, streaming=not blocks.is_bounded))).with_output_types(
                           pa.Table).with_outputs(DEAD, ACCOUNTS, RANGES, main="predictions"))
            predictions = learned.predictions
            tallies += [learned[DEAD] | "Count refused" >> count_as("refused"), learned[ACCOUNTS]]
            if blocks.is_bounded:
                tallies.append(learned[RANGES] | "Learned twice" >> CountOverlaps())
            dead.append(learned[DEAD])
        tallies.append(predictions | "Count predicted" >> count_predictions())
        if blocks.is_bounded:
            _ = (tallies | "Tallies" >> beam.Flatten()
                 | "Account" >> CheckAccounts(cfg.resume, models_counted=not cfg.shards))
        if not self.outputs:
            return predictions
        if len(dead) == 1:
            self.dead_letters = dead[0]
        else:
            self.dead_letters = (dead | "Dead letters" >> beam.Flatten() if dead
                                 else blocks.pipeline | "No dead letters" >> beam.Create([]))
        if served is not None:
            predictions = (served[SERVED], predictions) | "All predictions" >> beam.Flatten()
        return predictions


def build_training(pipeline: beam.Pipeline, cfg: TrainConfig, streaming: bool = False) -> None:
    """The `unitless train` graph: read ``cfg.inputs``, learn, each prediction and dead letter
    written where ``cfg`` says (no PCollection of all of them: ``Learn``'s ``outputs``)."""
    # (labels files are read as inputs: the learning step tells them by their source)
    read = ReadExamples.from_config(replace(cfg, inputs=[*cast(list, cfg.inputs), *cfg.labels])
                                    if cfg.labels else cfg, streaming, learner_check(cfg),
                                    cfg.model_dir if cfg.resume else None)
    with read_once():  # (the reader's resume positions too)
        _ = pipeline | "Read" >> read | Learn(cfg, outputs=False)
