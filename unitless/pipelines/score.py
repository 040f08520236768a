"""The scoring pipeline: each model key's latest checkpoint predicts examples, learning nothing;
a newer checkpoint, and a key's first, are taken up while it runs."""
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa

from ..connectors.records import dead_letter_table
from ..learner import check_examples, example_losses, predict_next, read_metadata
from ..schemas import SCORE_SCHEMA
from ..store.keyed_model import KeyedModel, outcome_columns
from ..store.models import (has_checkpoint, lists_models, load_latest, model_keys,
                             newest_version)
from ..store.shards import sharded_models
from .config import REFRESH_SECONDS, configure
from .io import DEAD, ReadExamples, WriteDeadLetters, WritePredictions, as_blocks
from .train import key_by_model

log = logging.getLogger("unitless")
# (Beam counts it where a step runs; elsewhere, as in a test calling ScoringModels, it is a no-op)
MODEL_REFRESHES = beam.metrics.Metrics.counter("unitless", "model_refreshes")


def load_models(model_dir):
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


def _scoring_model(table):
    model = KeyedModel.from_table(table)
    return model.state, model.checkpoint_id or f"{model.key}@{model.state.examples_seen}"


class Scoring(NamedTuple):
    """A key's model as scoring uses it."""
    state: Any            # the LearnerState, shared between threads
    checkpoint_id: str    # key@examples, as predictions name it
    checkpoint: str       # where it was read: a part's locator, a file, or a shard pattern
    written: Optional[float] = None  # when the checkpoint was taken (epoch s), where it says


class ScoringModels:
    """The models a scoring step uses, by model key: each key's newest valid checkpoint, read
    when one of the key's examples first comes (none at the start: a directory of a million
    models serves its first prediction as soon as that key's model is read), and looked for
    again when one comes and ``refresh_seconds`` have passed since the key was last looked for
    (0: every time), so a newer checkpoint is taken up, and a key whose first checkpoint
    appears after the start is scored from then on, without a restart and without a look at
    every key. Looking is a listing of the key's group directory (and of its per-key
    directory); a checkpoint is read only when a newer manifest or file is listed. A newer
    checkpoint that cannot be read (truncated, corrupt) or whose learner is another
    (algorithm, loss, dimension, classes, bias) is skipped with a warning, and the model in use
    kept. At most ``capacity`` models are kept, the least recently scored leaving first (read
    again when its key returns). Models over feature shards are read, merged, at the first
    look and kept.

    One instance may serve many threads (Beam's RunInference shares it): its bookkeeping is
    under a lock; the models it hands out are shared as they are (``predict_next`` reads a
    model and writes nothing to it)."""

    def __init__(self, model_dir, refresh_seconds=REFRESH_SECONDS, capacity=10_000):
        if capacity < 1:
            raise ValueError(f"a scoring cache holds 1 model or more, not {capacity}")
        self.model_dir, self.refresh_seconds, self.capacity = model_dir, refresh_seconds, capacity
        self.models = OrderedDict()  # key -> Scoring, least recently scored first
        self.looked = {}  # key -> when last looked for
        self.newest = {}  # key -> the newest checkpoint file listed (read or skipped)
        self.sharded = None  # key -> Scoring of the models over feature shards, once read
        self._lock = threading.Lock()

    def __getstate__(self):  # (a lock does not pickle; each copy reads its models anew)
        return {"model_dir": self.model_dir, "refresh_seconds": self.refresh_seconds,
                "capacity": self.capacity}

    def __setstate__(self, state):
        self.__init__(**state)

    def get(self, key):
        """The key's model (a ``Scoring``), or None when it has none yet."""
        with self._lock:
            if self.sharded is None:
                self.sharded = {k: Scoring(model, f"{k}@{meta['examples_seen']}", where)
                                for k, _, where, meta, model in sharded_models(self.model_dir)}
            if key in self.sharded:
                return self.sharded[key]
            now = time.monotonic()
            if now - self.looked.get(key, -np.inf) >= self.refresh_seconds:
                self.looked[key] = now
                self._look(key)
            found = self.models.get(key)
            if found is not None:
                self.models.move_to_end(key)
            return found

    def _look(self, key):
        version = newest_version(self.model_dir, key)
        if version == self.newest.get(key):
            return
        self.newest[key] = version
        found = load_latest(self.model_dir, key)  # (warns of each file it cannot read)
        if found is None:
            return
        state, checkpoint_id = _scoring_model(found[1])
        written = read_metadata(found[1]).get("time")
        current = self.models.get(key)
        if current is not None:
            was, now = _learner(current.state), _learner(state)
            if was != now:
                log.warning("ignoring checkpoint %s: its learner %s is not the one in use, %s",
                            found[0], now, was)
                return
            if state.examples_seen <= current.state.examples_seen:
                return  # (the newest could not be read: an older one was found)
            MODEL_REFRESHES.inc()  # (a key's first read is not a refresh)
        log.info("model %r: scoring with checkpoint %s", key, found[0])
        self.models[key] = Scoring(state, checkpoint_id, found[0], written)
        self._keep_capacity()

    def _keep_capacity(self):
        while len(self.models) > self.capacity:
            key, _ = self.models.popitem(last=False)
            self.looked.pop(key, None)
            self.newest.pop(key, None)


def _learner(state):
    return (f"{state.algorithm}/{state.loss}, dimension {state.dim}, {state.n_classes} "
            f"class(es), bias index {state.bias_index}")


def score_block(models, key, block):
    """(scores table or None, dead letters) for one model key's block: each example's
    prediction, as the model would make it were the example the next it learns
    (``predict_next``: the model is left as it was), and where it has a label, its loss and
    error; ``models`` a ScoringModels. Refused, with training's reasons: what the model's
    learner refuses (``check_examples``: a feature value not finite or past its bound, an
    index past the model's dimension, a label that is not one of its labels), and an example
    whose prediction, or loss, is not finite, so no output holds NaN or infinity."""
    return score_with(models.get(key), key, block)


def score_with(found, key, block):
    """``score_block`` with the key's model ``found`` (a ``Scoring``, or None: it has none)."""
    if found is None:
        return None, block.screen([(r, f"no model for key {key!r}") for r in range(len(block))])[1]
    state, checkpoint_id = found.state, found.checkpoint_id
    block, refused = block.screen(check_examples(block.batch(), state.dim, state.n_classes,
                                                 state.loss, block.served))
    if not len(block):
        return None, refused
    scores = predict_next(state, block.batch())
    with np.errstate(over="ignore", invalid="ignore"):  # (refused below, with the reason)
        loss = example_losses(state, scores, block.labels)
    kept, not_finite = _finite_outcomes(scores, loss, block.served)
    if not_finite:
        block, dead = block.screen(not_finite)
        refused, scores, loss = refused + dead, scores[kept], loss[kept]
        if not len(block):
            return None, refused
    n = len(block)
    prediction, prob, error = outcome_columns(state, scores, block.labels)
    missing = block.served  # no label: the label and loss are null (not NaN)
    return pa.table([block.ids, pa.repeat(pa.scalar(key, pa.string()), n), prediction, prob,
                     pa.array(block.labels, mask=missing), pa.array(loss, mask=missing), error,
                     pa.repeat(pa.scalar(block.source, pa.string()), n),
                     pa.array(block.positions),
                     pa.repeat(pa.scalar(checkpoint_id, pa.string()), n)],
                    schema=SCORE_SCHEMA), refused


def _finite_outcomes(scores, loss, served):
    """(rows kept, [(row, reason)] refused): an example whose prediction is not finite, or
    whose loss is not (where it has a label), is refused in training's words."""
    finite_score = np.isfinite(scores).all(axis=1)
    finite_loss = served | np.isfinite(loss)
    kept = finite_score & finite_loss
    if kept.all():
        return kept, []
    return kept, [(int(r), "the prediction is not finite" if not finite_score[r]
                   else "the loss is not finite") for r in np.flatnonzero(~kept)]


class ScoreDoFn(beam.DoFn):
    def __init__(self, model_dir, refresh_seconds, capacity=10_000):
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

    def __init__(self, model_dir, refresh_seconds=REFRESH_SECONDS):
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


def build_scoring(pipeline, cfg, model_dir, streaming=False, refresh_seconds=REFRESH_SECONDS):
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
