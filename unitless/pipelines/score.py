"""The scoring pipeline: each model key's latest checkpoint predicts examples, learning nothing."""
import logging
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa

from ..connectors.records import dead_letter_table
from ..learner import example_losses, predict_next
from .checkpoints import load_latest, model_keys, sharded_models
from .config import configure
from .io import DEAD, ReadExamples, WriteDeadLetters, WritePredictions, as_blocks
from .keyed_model import PREDICTION_SCHEMA, KeyedModel, outcome_columns
from .train import key_by_model

SCORE_SCHEMA = pa.schema([f for f in PREDICTION_SCHEMA if f.name in
                          ("id", "model_key", "prediction", "probability", "label", "loss",
                           "error", "source", "position")])
log = logging.getLogger("unitless")


def load_models(model_dir):
    """{model key: learner state} from each key's newest valid checkpoint under model_dir (a
    model over feature shards: its consistent cut, merged into one state). A key
    none of whose checkpoints is valid gets no model (with a warning: its examples then go to
    the dead letters); FileNotFoundError when no key has a valid checkpoint."""
    models = {}
    for key in model_keys(model_dir):
        found = load_latest(model_dir, key)
        if found is None:
            log.warning("model %r has no valid checkpoint under %s; it is not scored", key,
                        model_dir)
            continue
        models[key] = KeyedModel.from_table(found[1]).state
    for key, _, _, _, model in sharded_models(model_dir):  # merged: a whole model per worker
        models[key] = model
    if not models:
        raise FileNotFoundError(f"no valid checkpoints under {model_dir}")
    return models


def score_block(models, key, block):
    """(scores table or None, dead letters) for one model key's block: each example's
    prediction, as the model would make it were the example the next it learns
    (``predict_next``: the model is left as it was), and where it has a label, its loss and
    error."""
    state = models.get(key)
    if state is None:
        return None, block.screen([(r, f"no model for key {key!r}") for r in range(len(block))])[1]
    scores = predict_next(state, block.batch())
    n = len(block)
    prediction, prob, error = outcome_columns(state, scores, block.labels)
    missing = np.isnan(block.labels)  # no label: the label and loss are null (not NaN)
    loss = example_losses(state, scores, block.labels)
    return pa.table([block.ids, pa.repeat(pa.scalar(key, pa.string()), n), prediction, prob,
                     pa.array(block.labels, mask=missing), pa.array(loss, mask=missing), error,
                     pa.repeat(pa.scalar(block.source, pa.string()), n),
                     pa.array(block.positions)], schema=SCORE_SCHEMA), []


class ScoreDoFn(beam.DoFn):
    def __init__(self, model_dir):
        self.model_dir = model_dir

    def setup(self):
        self.models = load_models(self.model_dir)

    def process(self, element):
        table, dead = score_block(self.models, *element)
        if dead:
            yield beam.pvalue.TaggedOutput(DEAD, dead_letter_table(dead))
        if table is not None:
            yield table


class Score(beam.PTransform):
    """ExampleBlocks (from ``ReadExamples``) or the user's own records (as for ``Learn``) -> a
    PCollection of scores (Arrow tables: id, model key, prediction, probability, label, loss,
    error, source, position), each example scored by its model key's latest checkpoint in
    ``model_dir``, learning nothing. Examples whose key has no model, and records that cannot be
    read, are ``transform.dead_letters`` once it is applied (nothing is written: pass them to
    ``WriteDeadLetters``). Reading options as for ``Learn`` (``label_column``, ``bits``, ...);
    a label is optional."""

    def __init__(self, model_dir, **options):
        super().__init__()
        self.model_dir = model_dir
        self.cfg = configure(require_label=False, dead_letter=None, **options)
        self.dead_letters = None

    def expand(self, examples):
        load_models(self.model_dir)  # fails fast, at graph construction, on no models
        blocks, parse_dead = as_blocks(examples, self.cfg.spec, self.cfg.chunk_size, None, None)
        scored = (blocks | "Key by model" >> key_by_model(self.cfg.chunk_size)
                  | "Score" >> beam.ParDo(ScoreDoFn(self.model_dir)).with_outputs(
                      DEAD, main="scores"))
        self.dead_letters = scored[DEAD] if parse_dead is None else (
            (parse_dead, scored[DEAD]) | "Dead letters" >> beam.Flatten())
        return scored.scores


@dataclass(frozen=True)
class MissingModel:
    """Refuses examples whose model key has no checkpoint (run where examples are read, so the
    dead letter keeps the raw record)."""
    keys: frozenset

    def __call__(self, block):
        return [(r, f"no model for key {k!r}") for r, k in enumerate(block.keys.to_pylist())
                if k not in self.keys]


def build_scoring(pipeline, cfg, model_dir, streaming=False):
    """The `unitless score` graph: read ``cfg.inputs`` (files or Kafka), score each example
    with its key's model, write the scores to ``cfg.predictions`` and every dead letter to
    ``cfg.dead_letter``."""
    read = ReadExamples.from_config(cfg, streaming, MissingModel(frozenset(load_models(model_dir))))
    score = Score(model_dir, bits=cfg.spec.bits, chunk_size=cfg.chunk_size)
    scores = pipeline | "Read" >> read | score
    scores | "Write scores" >> WritePredictions(cfg.predictions, cfg.output_format,
                                                cfg.kafka_settings)
    # the reader writes its own dead letters (durably, as it reads)
    score.dead_letters | "Write dead letters" >> WriteDeadLetters(
        cfg.dead_letter, kafka_config=cfg.kafka_settings)
