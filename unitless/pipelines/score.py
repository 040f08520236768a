"""The scoring pipeline: each model key's latest checkpoint predicts examples, learning nothing;
a newer checkpoint, and a key's first, are taken up while it runs."""
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import apache_beam as beam
import numpy as np
import pyarrow as pa

from ..learner import LearnerState, check_examples
from ..models.predictions import outcome_columns
from ..parse.records import DeadLetter, ExampleBlock, dead_letter_table
from ..schemas import SCORE_SCHEMA
from ..store.catalog import has_checkpoint, lists_models, load_latest, model_keys
from ..store.shards import sharded_models
from .config import REFRESH_SECONDS, TrainConfig, configure
from .io.dead_letters import DEAD
from .io.sinks import WriteDeadLetters, WritePredictions
from .io.sources import ReadExamples, as_blocks
from .keying import key_by_model
# (ScoringModels and Scoring are imported from here by users' code too)
from .scoring_models import (MODEL_REFRESHES, Scoring, ScoringModels,  # noqa: F401
                             _scoring_model, scored)

log = logging.getLogger("unitless")


def load_models(model_dir: str) -> Dict[str, Tuple[LearnerState, str]]:
    """{model key: (learner state, checkpoint id)} from each key's newest valid checkpoint
    under model_dir (a model over feature shards: its consistent cut, merged into one state). A
    key none of whose checkpoints is valid gets no model (with a warning: its examples then go
    to the dead letters); FileNotFoundError when no key has a valid checkpoint. Reads every
    model: scoring reads each when its key is first scored (``ScoringModels``)."""
    models = {}
    for key in model_keys(model_dir):
        found = load_latest(model_dir, key)
        if found is None:
            log.warning("model %r has no valid checkpoint under %s; it is not scored", key,
                        model_dir)
            continue
        models[key] = _scoring_model(found[1])
    for key, _, _, meta, model in sharded_models(model_dir):  # merged: a whole model per worker
        models[key] = model, f"{key}@{meta['examples_seen']}"
    if not models:
        raise FileNotFoundError(f"no valid checkpoints under {model_dir}")
    return models


def check_model_dir(model_dir: str) -> None:
    """FileNotFoundError unless model_dir lists a model (a listing: no model is read, so a
    pipeline over a directory of millions of models is built at once)."""
    if not lists_models(model_dir):
        raise FileNotFoundError(f"no valid checkpoints under {model_dir}")


def score_block(models: ScoringModels, key: str, block: ExampleBlock
                ) -> Tuple[Optional[pa.Table], List[DeadLetter]]:
    """(scores table or None, dead letters) for one model key's block: each example's
    prediction, as the model would make it were the example the next it learns
    (``predict_next``: the model is left as it was), and where it has a label, its loss and
    error; ``models`` a ScoringModels. Refused, with training's reasons: what the model's
    learner refuses (``check_examples``: a feature value not finite or past its bound, an
    index past the model's dimension, a label that is not one of its labels), and an example
    whose prediction, or loss, is not finite, so no output holds NaN or infinity."""
    return score_with(models.get(key), key, block)


def score_with(found: Optional[Scoring], key: str, block: ExampleBlock
               ) -> Tuple[Optional[pa.Table], List[DeadLetter]]:
    """``score_block`` with the key's model ``found`` (a ``Scoring``, or None: it has none)."""
    if found is None:
        return None, block.screen([(r, f"no model for key {key!r}") for r in range(len(block))])[1]
    block, scores, loss, refused = scored(found.state, block)
    if not len(block):
        return None, refused
    assert scores is not None
    n = len(block)
    prediction, prob, error = outcome_columns(found.state, scores, block.labels)
    missing = block.served  # no label: the label and loss are null (not NaN)
    return pa.table([block.ids, pa.repeat(pa.scalar(key, pa.string()), n), prediction, prob,
                     pa.array(block.labels, mask=missing), pa.array(loss, mask=missing), error,
                     pa.repeat(pa.scalar(block.source, pa.string()), n),
                     pa.array(block.positions),
                     pa.repeat(pa.scalar(found.checkpoint_id, pa.string()), n)],
                    schema=SCORE_SCHEMA), refused


class ScoreDoFn(beam.DoFn):
    def __init__(self, model_dir, refresh_seconds, capacity):
        self.model_dir, self.refresh_seconds, self.capacity = model_dir, refresh_seconds, capacity

    def setup(self):
        self.models = ScoringModels(self.model_dir, self.refresh_seconds, self.capacity)

    def process(self, element):
        table, dead = score_block(self.models, *element)
        if dead:
            yield beam.pvalue.TaggedOutput(DEAD, dead_letter_table(dead))
        if table is not None:
            yield table


class Score(beam.PTransform):
    """ExampleBlocks (from ``ReadExamples``) or the user's own records (as for ``Learn``) -> a
    PCollection of scores (Arrow tables: id, model key, prediction, probability, label, loss,
    error, source, position, checkpoint id), each example scored by its model key's latest
    checkpoint in ``model_dir``, learning nothing, looked for again every ``refresh_seconds``
    (``ScoringModels``). Examples whose key has no model, and records that cannot be read, are
    ``transform.dead_letters`` once it is applied (nothing is written: pass them to
    ``WriteDeadLetters``). Reading options as for ``Learn`` (``label_column``, ``bits``, ...);
    a label is optional."""

    def __init__(self, model_dir: str, refresh_seconds: float = REFRESH_SECONDS,
                 **options: Any):
        super().__init__()
        if not refresh_seconds >= 0:
            raise ValueError(f"--refresh-seconds wants 0 or more, got {refresh_seconds}")
        self.model_dir, self.refresh_seconds = model_dir, refresh_seconds
        self.cfg = configure(scoring=True, dead_letter=None, **options)
        self.dead_letters = None

    def expand(self, examples):
        check_model_dir(self.model_dir)  # fails fast, at graph construction
        blocks, parse_dead = as_blocks(examples, self.cfg.spec, self.cfg.chunk_size,
                                       ScoringCheck(1 << self.cfg.spec.bits), None)
        score = ScoreDoFn(self.model_dir, self.refresh_seconds, self.cfg.models_in_memory)
        scored = (blocks | "Key by model" >> key_by_model(self.cfg.chunk_size)
                  | "Score" >> beam.ParDo(score).with_outputs(DEAD, main="scores"))
        self.dead_letters = scored[DEAD] if parse_dead is None else (
            (parse_dead, scored[DEAD]) | "Dead letters" >> beam.Flatten())
        return scored.scores


@dataclass(frozen=True)
class ScoringCheck:
    """What scoring refuses where examples are read, so that the dead letter keeps the raw
    record, in training's words (``check_examples`` for any learner of dimension ``dim``): a
    feature value not finite with |x| ≤ 1e100, a feature index outside 0..dim-1, a label
    (where there is one) or weight out of bounds; then, with ``missing`` (a
    ``MissingModel``), a key without a model. What depends on the key's learner (a label that
    is not one of its classes) is refused where the model is (``score_block``)."""
    dim: int
    missing: Optional[Callable] = None

    def __call__(self, block):
        # (a one-output regression learner's checks: those every learner makes whatever its
        # labels' domain, which only the key's model knows)
        refused = dict(check_examples(block.batch(), self.dim, 1, "squared", block.served))
        if self.missing is not None:
            for row, reason in self.missing(block):
                refused.setdefault(row, reason)
        return sorted(refused.items())


class MissingModel:
    """Refuses examples whose model key has no checkpoint (run where examples are read, so the
    dead letter keeps the raw record). A key is looked for when it first comes (a listing of
    its group's directory), not every key of the directory at the start, so the first
    examples of a directory of many models are scored at once; a block that brings more than
    ``LIST_ALL_PAST`` keys not yet looked for has every key listed once instead, which then
    costs less. A key without a checkpoint is looked for again after ``refresh_seconds``, as
    ``ScoringModels`` does."""
    LIST_ALL_PAST = 1_000
    looked: Dict[str, float]

    def __init__(self, model_dir: str, refresh_seconds: float = REFRESH_SECONDS) -> None:
        self.model_dir, self.refresh_seconds = model_dir, refresh_seconds
        self.known, self.looked, self.listed = None, {}, False

    def __getstate__(self):  # (each worker looks anew)
        return {**self.__dict__, "known": None, "looked": {}, "listed": False}

    def __call__(self, block):
        if self.known is None:
            self.known = {key for key, *_ in sharded_models(self.model_dir, verify=False)}
        now = time.monotonic()
        due = [key for key in set(block.keys.to_pylist()) - self.known
               if now - self.looked.get(key, -np.inf) >= self.refresh_seconds]
        if len(due) > self.LIST_ALL_PAST and not self.listed:
            self.listed = True
            self.known.update(model_keys(self.model_dir))
            due = [key for key in due if key not in self.known]
        for key in due:
            self.looked[key] = now
            if has_checkpoint(self.model_dir, key):
                self.known.add(key)
        return [(r, f"no model for key {k!r}") for r, k in enumerate(block.keys.to_pylist())
                if k not in self.known]


def build_scoring(pipeline: beam.Pipeline, cfg: TrainConfig, model_dir: str,
                  streaming: bool = False, refresh_seconds: float = REFRESH_SECONDS) -> None:
    """The `unitless score` graph: read ``cfg.inputs`` (files or Kafka), score each example
    with its key's model, write the scores to ``cfg.predictions`` and every dead letter to
    ``cfg.dead_letter``."""
    check = ScoringCheck(1 << cfg.spec.bits, MissingModel(model_dir, refresh_seconds))
    read = ReadExamples.from_config(cfg, streaming, check)
    score = Score(model_dir, refresh_seconds, bits=cfg.spec.bits, chunk_size=cfg.chunk_size,
                  models_in_memory=cfg.models_in_memory)
    scores = pipeline | "Read" >> read | score
    scores | "Write scores" >> WritePredictions(cfg.predictions, cfg.output_format,
                                                cfg.kafka_settings)
    # the reader writes its own dead letters (durably, as it reads)
    score.dead_letters | "Write dead letters" >> WriteDeadLetters(
        cfg.dead_letter, kafka_config=cfg.kafka_settings)
