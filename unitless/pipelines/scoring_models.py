"""The models a step predicts with, each key's newest checkpoint read from a model directory
and looked for again while it runs (``ScoringModels``), and a prediction made with one of them
that changes nothing (``scored``): what scoring, RunInference and serving apart from learning
share."""
import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import apache_beam as beam
import numpy as np

from ..learner import LearnerState, check_examples, example_losses, predict_next, read_metadata
from ..models.keyed_model import KeyedModel
from ..parse.records import DeadLetter, ExampleBlock
from ..store.catalog import load_latest, newest_version
from ..store.shards import sharded_models
from .config import REFRESH_SECONDS
from .options import default

log = logging.getLogger("unitless")
# (Beam counts it where a step runs; elsewhere, as in a test calling ScoringModels, it is a no-op)
MODEL_REFRESHES = beam.metrics.Metrics.counter("unitless", "model_refreshes")


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
    models: OrderedDict[str, Scoring]
    looked: Dict[str, float]
    newest: Dict[str, tuple]
    sharded: Optional[Dict[str, Scoring]]

    def __init__(self, model_dir: str, refresh_seconds: float = REFRESH_SECONDS,
                 capacity: int = default("models_in_memory")) -> None:
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

    def get(self, key: str) -> Optional[Scoring]:
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
        # (a key's first read told; its refreshes, which serving apart makes every second, not)
        log.log(logging.INFO if current is None else logging.DEBUG,
                "model %r: scoring with checkpoint %s", key, found[0])
        self.models[key] = Scoring(state, checkpoint_id, found[0], written)
        self._keep_capacity()

    def drop(self, key: str) -> None:
        """Forget the key's model (read again when it is next asked for)."""
        with self._lock:
            self._drop(key)

    def _drop(self, key):
        self.models.pop(key, None)
        self.looked.pop(key, None)
        self.newest.pop(key, None)

    def _keep_capacity(self):
        while len(self.models) > self.capacity:
            self._drop(next(iter(self.models)))


def _learner(state):
    return (f"{state.algorithm}/{state.loss}, dimension {state.dim}, {state.n_classes} "
            f"class(es), bias index {state.bias_index}")


def scored(state: LearnerState, block: ExampleBlock
           ) -> Tuple[ExampleBlock, Optional[np.ndarray], Optional[np.ndarray], List[DeadLetter]]:
    """(the block's examples kept, their predictions [n, K] and losses (NaN without a label),
    dead letters) by the learner ``state``, which is left as it was (``predict_next``): what
    it refuses, with training's reasons (``check_examples``: a feature value not finite or past
    its bound, an index past the model's dimension, a label that is not one of its labels),
    and an example whose prediction, or loss, is not finite, so no output holds NaN or
    infinity."""
    block, refused = block.screen(check_examples(block.batch(), state.dim, state.n_classes,
                                                 state.loss, block.served))
    if not len(block):
        return block, None, None, refused
    scores = predict_next(state, block.batch())
    with np.errstate(over="ignore", invalid="ignore"):  # (refused below, with the reason)
        loss = example_losses(state, scores, block.labels)
    kept, not_finite = _finite_outcomes(scores, loss, block.served)
    if not_finite:
        block, dead = block.screen(not_finite)
        refused, scores, loss = refused + dead, scores[kept], loss[kept]
    return block, scores, loss, refused


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
