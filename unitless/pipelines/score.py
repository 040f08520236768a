"""The scoring pipeline: apply each model key's latest checkpoint to examples, learning nothing."""
import apache_beam as beam
import numpy as np
import pyarrow as pa

from ..connectors.records import DeadLetter
from ..learner import loss_values, predict, predicted_class, probability
from .checkpoints import latest_checkpoint, model_keys, read_checkpoint
from ..connectors.records import dead_letter_table
from .keyed_model import PREDICTION_SCHEMA, KeyedModel
from .train import DEAD, ReadFiles, WriteTables

SCORE_SCHEMA = pa.schema([f for f in PREDICTION_SCHEMA if f.name in
                          ("id", "model_key", "prediction", "probability", "label", "loss",
                           "source", "position")])


def load_models(model_dir):
    keys = model_keys(model_dir)
    if not keys:
        raise FileNotFoundError(f"no checkpoints under {model_dir}")
    return {k: KeyedModel.from_table(read_checkpoint(latest_checkpoint(model_dir, k))).state
            for k in keys}


def score_block(models, key, block):
    """(scores table or None, dead letters) for one model key's block."""
    state = models.get(key)
    if state is None:
        return None, [DeadLetter(block.source, int(p), str(r), f"no model for key {key!r}")
                      for p, r in zip(block.positions, block.raw or [None] * len(block))]
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
    return pa.table([pa.array(block.ids, pa.string()), pa.array([key] * n, pa.string()),
                     pa.array(prediction), pa.array(prob), pa.array(block.labels),
                     pa.array(loss), pa.array([block.source] * n, pa.string()),
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


def build_scoring(pipeline, files, fmt, spec, model_dir, predictions, output_format, dead_letter,
                  chunk_size):
    load_models(model_dir)  # fail fast, before the pipeline starts
    read = (pipeline | "Files" >> beam.Create(files)
            | "Read and parse" >> beam.ParDo(ReadFiles(fmt, spec, chunk_size)
                                             ).with_outputs(DEAD, main="blocks"))
    scored = (read.blocks | "Key by model" >> beam.FlatMap(lambda b: b.split_by_key())
              | "Score" >> beam.ParDo(ScoreDoFn(model_dir)).with_outputs(DEAD, main="scores"))
    scored.scores | "Write scores" >> beam.ParDo(WriteTables(predictions, output_format))
    ((read[DEAD], scored[DEAD]) | beam.Flatten()
     | "Write dead letters" >> beam.ParDo(WriteTables(dead_letter, "jsonl")))
