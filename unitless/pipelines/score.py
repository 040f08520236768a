"""The scoring pipeline: apply each model key's latest checkpoint to examples, learning nothing."""
import logging
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa

from ..learner import loss_values, predict, predicted_class, probability
from .checkpoints import load_latest, model_keys
from ..connectors.records import dead_letter_table
from .keyed_model import PREDICTION_SCHEMA, KeyedModel
from .train import DEAD, ReadFiles, WriteToSink, key_by_model

SCORE_SCHEMA = pa.schema([f for f in PREDICTION_SCHEMA if f.name in
                          ("id", "model_key", "prediction", "probability", "label", "loss",
                           "source", "position")])
log = logging.getLogger("unitless")


def load_models(model_dir):
    """{model key: learner state} from each key's newest valid checkpoint under model_dir. A key
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
    if not models:
        raise FileNotFoundError(f"no valid checkpoints under {model_dir}")
    return models


def score_block(models, key, block):
    """(scores table or None, dead letters) for one model key's block."""
    state = models.get(key)
    if state is None:  # MissingModel refused these where they were read
        return None, block.screen([(r, f"no model for key {key!r}") for r in range(len(block))])[1]
    scores = predict(state, block.batch())
    n = len(block)
    single = scores.shape[1] == 1
    prediction = scores[:, 0] if single else predicted_class(scores)
    prob = probability(scores[:, 0]) if single and state.loss == "logistic" else np.full(n, np.nan)
    labels = block.labels
    if single and state.loss in ("logistic", "hinge"):
        labels = np.where(labels == 0, -1.0, labels)
    loss = (loss_values(state.loss, labels, scores[:, 0], state.hyperparameters.get(
        "quantile_tau", 0.5)) if single else np.full(n, np.nan))
    return pa.table([block.ids, pa.repeat(pa.scalar(key, pa.string()), n),
                     pa.array(prediction), pa.array(prob), pa.array(block.labels),
                     pa.array(loss), pa.repeat(pa.scalar(block.source, pa.string()), n),
                     pa.array(block.positions)], schema=SCORE_SCHEMA), []


@dataclass(frozen=True)
class MissingModel:
    """Refuses examples whose model key has no checkpoint (run where examples are read)."""
    keys: frozenset

    def __call__(self, block):
        return [(r, f"no model for key {k!r}") for r, k in enumerate(block.keys.to_pylist())
                if k not in self.keys]


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


def build_scoring(pipeline, files, fmt, spec, model_dir, predictions, output_format, dead_letter,
                  chunk_size):
    check = MissingModel(frozenset(load_models(model_dir)))  # fails fast on no models
    blocks = (pipeline | "Files" >> beam.Create(files)
              | "Read and parse" >> beam.ParDo(ReadFiles(fmt, spec, chunk_size, check,
                                                         dead_letter)))
    scored = (blocks | "Key by model" >> key_by_model()
              | "Score" >> beam.ParDo(ScoreDoFn(model_dir)).with_outputs(DEAD, main="scores"))
    scored.scores | "Write scores" >> beam.ParDo(WriteToSink(predictions, output_format,
                                                             "predictions"))
    scored[DEAD] | "Write dead letters" >> beam.ParDo(WriteToSink(dead_letter, "jsonl",
                                                                  "dead letters"))
