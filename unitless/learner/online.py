"""The public learner calls: validate a batch, learn from it in order, predict with frozen weights."""
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional, Union

import numpy as np
from numba import njit

from .examples import Batch
from .kernel import run_batch
from .state import LearnerState
from .losses import CLASSIFICATION_LOSSES, LOSS_CODES, loss_values

if TYPE_CHECKING:
    from .many import RowState

# The largest |value| a feature value, label or importance weight may have: squares and products
# of a few such values stay finite in float64 (1e100² = 1e200 < 1.8e308).
MAX_MAGNITUDE = 1e100


class InvalidExampleError(ValueError):
    """An example the learner refuses; ``position`` is its index in the batch."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"example {position} of the batch: {reason}")
        self.position = position
        self.reason = reason


@dataclass
class BatchResult:
    scores: np.ndarray  # [n, K]: ŷ of each one-against-all learner before it learned the example
    losses: np.ndarray  # [n]: the (importance-weighted) loss suffered on each example


def check_batch(state: LearnerState, batch: Batch,
                served: Optional[np.ndarray] = None) -> list[tuple[int, str]]:
    """Reasons the learner refuses examples: a list of (position, reason), in batch order."""
    return check_examples(batch, state.dim, state.n_classes, state.loss, served)


def check_examples(batch: Batch, dim: int, n_classes: int, loss: str,
                   served: Optional[np.ndarray] = None) -> list[tuple[int, str]]:
    """``check_batch`` for a learner of that dimension, number of classes and loss. Examples
    marked ``served`` (a mask) have no label: they are checked as if it were 1, which every
    loss takes."""
    if served is not None and served.any():
        batch = replace(batch, labels=np.where(served, 1.0, batch.labels))
    n = len(batch)
    codes, entry = np.empty(n, dtype=np.int8), np.empty(n, dtype=np.int64)
    if not _problem_codes(batch.indptr, batch.indices, batch.values, batch.labels,
                          batch.weights, dim, n_classes, loss in CLASSIFICATION_LOSSES, codes,
                          entry):
        return []
    y, w = batch.labels, batch.weights
    reasons = {
        BAD_VALUE: lambda r: (f"feature value {batch.values[entry[r]]} (feature index "
                              f"{batch.indices[entry[r]]}) is not finite with "
                              f"|x| ≤ {MAX_MAGNITUDE:g}"),
        BAD_INDEX: lambda r: f"a feature index is outside 0..{dim - 1}",
        BAD_LABEL: lambda r: f"label {y[r]} is not finite with |y| ≤ {MAX_MAGNITUDE:g}",
        NOT_A_CLASS: (lambda r: f"label {y[r]} is not a class in 1..{n_classes}") if n_classes > 1
        else (lambda r: f"label {y[r]} is not a {loss} label (-1/+1, or 0/1)"),
        BAD_WEIGHT: lambda r: f"importance weight {w[r]} is not in 0..{MAX_MAGNITUDE:g}",
    }
    return [(int(r), reasons[codes[r]](r)) for r in np.flatnonzero(codes)]


# Why ``_problem_codes`` refuses an example, the first that applies in this order
BAD_VALUE, BAD_INDEX, BAD_LABEL, NOT_A_CLASS, BAD_WEIGHT = 1, 2, 3, 4, 5


@njit(cache=True)
def _problem_codes(indptr, indices, values, labels, weights, dim, n_classes, classification,
                   codes, entry):
    """codes[r]: why example r is refused (0: it is not), the first that applies of a feature
    value not finite with |x| ≤ MAX_MAGNITUDE (entry[r]: the first such), a feature index
    outside 0..dim-1, a label not finite with |y| ≤ MAX_MAGNITUDE, a label that is not a class
    (1..n_classes for one-against-all; -1, 0 or +1 for a binary classification loss), an
    importance weight not in 0..MAX_MAGNITUDE. Returns how many are refused. One pass,
    compiled: it runs for every block, however small."""
    refused = 0
    for r in range(labels.shape[0]):
        code = 0
        for e in range(indptr[r], indptr[r + 1]):
            if not abs(values[e]) <= MAX_MAGNITUDE:  # (NaN fails the comparison)
                code, entry[r] = BAD_VALUE, e
                break
            if code == 0 and (indices[e] < 0 or indices[e] >= dim):
                code = BAD_INDEX  # (unless a value further on is bad)
        y, w = labels[r], weights[r]
        # (each test only when none before it applies: the codes' order is their priority)
        if code == 0 and not abs(y) <= MAX_MAGNITUDE:
            code = BAD_LABEL
        elif code == 0 and n_classes > 1 and not (y == np.floor(y) and 1 <= y <= n_classes):
            code = NOT_A_CLASS
        elif code == 0 and n_classes == 1 and classification and not (y == 1.0 or y == 0.0
                                                                        or y == -1.0):
            code = NOT_A_CLASS
        elif code == 0 and not (w >= 0 and w <= MAX_MAGNITUDE):
            code = BAD_WEIGHT
        codes[r] = code
        refused += code != 0
    return refused


def learner_labels(state: Union[LearnerState, "RowState"], labels: np.ndarray) -> np.ndarray:
    """The labels as the learner sees them: binary 0/1 labels mean -1/+1 (the one place this
    mapping is made); class numbers and regression targets as they are."""
    if state.n_classes == 1 and state.loss in CLASSIFICATION_LOSSES:
        return np.where(labels == 0.0, -1.0, labels)
    return labels


def learn(state: LearnerState, batch: Batch) -> BatchResult:
    """Predict then update on every example of the batch, in order; returns a BatchResult.

    The whole batch is checked first: an invalid example raises InvalidExampleError and the
    state is left exactly as it was.
    """
    problems = check_batch(state, batch)
    if problems:
        raise InvalidExampleError(*problems[0])
    return _learn_checked(state, batch, state.map_features(batch.indices),
                          np.zeros(len(batch), dtype=np.bool_))


def _learn_checked(state, batch, slots, served):
    """``learn`` on a batch already checked whose features are at ``slots``; the examples
    marked ``served`` are predicted as the next example learned would be and not learned
    (their losses NaN: they have no label)."""
    n = len(batch)
    scores = np.empty((n, state.n_classes))
    losses = np.empty(n)
    run_batch(state.spec.code, state.V, state.M, state.S, state.hp_array(),
              LOSS_CODES[state.loss], state.hyperparameters.get("quantile_tau", 0.5),
              batch.indptr, slots, batch.values,
              learner_labels(state, np.where(served, 1.0, batch.labels)), batch.weights,
              served, scores, losses)
    losses[served] = np.nan
    count_learned(state, losses[~served])
    return BatchResult(scores, losses)


def count_learned(state: LearnerState, losses: np.ndarray) -> None:
    """Count a batch's examples into the state's counters, their losses summed one after the
    other (not pairwise): the same total however the stream is cut into batches."""
    state.examples_seen += len(losses)
    with np.errstate(over="ignore"):  # (a sum past float's range is refused: ``_Snapshot``)
        state.cumulative_loss = float(np.cumsum(np.append(state.cumulative_loss, losses))[-1])


def learn_or_refuse(state: LearnerState, batch: Batch,
                    served: Optional[np.ndarray] = None
                    ) -> tuple[np.ndarray, BatchResult, list[tuple[int, str]]]:
    """Learn every example of the batch that the learner can take, in order, and refuse the
    others, leaving the state as if they had never come.

    ``served`` (a mask, or None for none) marks examples without a label: each is predicted
    as the next example learned would be (``predict_next``) and not learned, in its place in
    the order. Refused: the examples ``check_batch`` names (a served one checked as if its
    label were 1, which every loss takes), and any example whose prediction, loss or
    resulting state is not finite (the state is restored to what it was before it, and the
    next example is learned from there). Returns (rows kept, BatchResult of those rows,
    refused [(row, reason)]); a served row's loss is NaN. When nothing is refused or served it
    does exactly what ``learn`` does.
    """
    served = np.zeros(len(batch), dtype=np.bool_) if served is None else np.asarray(served)
    refused = check_batch(state, batch, served)
    rows = np.arange(len(batch))
    if refused:
        rows = np.setdiff1d(rows, [r for r, _ in refused])
        batch, served = batch.take(rows), served[rows]
    parts: list = []
    _learn_finite(state, batch, served, rows, parts, refused)
    kept = [p for p in parts if p[0].size]
    if not kept:
        return rows[:0], BatchResult(np.empty((0, state.n_classes)), np.empty(0)), sorted(refused)
    return (np.concatenate([r for r, _ in kept]),
            BatchResult(np.vstack([b.scores for _, b in kept]),
                        np.concatenate([b.losses for _, b in kept])), sorted(refused))


def _learn_finite(state, batch, served, rows, parts, refused):
    """Learn the batch; if anything came out non-finite, restore the state and bisect down to
    the examples responsible (learning the others in order)."""
    if not len(batch):
        return
    slots = state.map_features(batch.indices)
    snapshot = _Snapshot(state, slots)
    result = _learn_checked(state, batch, slots, served)
    problem = snapshot.non_finite(state, result, served)
    if problem is None:
        parts.append((rows, result))
        return
    snapshot.restore(state)
    if len(batch) == 1:
        refused.append((int(rows[0]), problem))
        return
    half = len(batch) // 2
    _learn_finite(state, batch.slice(0, half), served[:half], rows[:half], parts, refused)
    _learn_finite(state, batch.slice(half, len(batch)), served[half:], rows[half:], parts,
                  refused)


class _Snapshot:
    """The part of a state that learning a batch whose features are at ``slots`` can change:
    those slots (every slot, for a learner with matrices: its step writes across them), the
    scalars and the counters. Slots not taken hold the initial values and get them back on
    ``restore``: a non-finite step can reach them (a loop over every coordinate multiplies NaN
    by their zero). The batch's new features keep their slots, at their initial values, which
    is the same as having none."""

    def __init__(self, state, slots):
        n = state.n_slots
        # every slot (a slice: copies, not gathers) where there are no more of them than the
        # batch's feature occurrences, which finding the batch's own would cost as much
        whole = state.M.shape[0] or n <= len(slots)
        self.touched = t = slice(0, n) if whole else np.unique(slots)
        self.V = state.V[:, :, t].copy()
        self.M = state.M[:, :, t, t].copy() if state.M.shape[0] else None  # (t a slice)
        self.S = state.S.copy()
        self.counters = (state.examples_seen, state.cumulative_loss)

    def non_finite(self, state, result, served):
        """Why the batch's outcome cannot be kept, or None (served examples have no loss)."""
        if not np.isfinite(result.scores).all():
            return "the prediction is not finite"
        if not np.isfinite(result.losses[~served]).all():
            return "the loss is not finite"
        if not np.isfinite(state.cumulative_loss):  # (a checkpoint must be readable)
            return "the model's cumulative loss with it is not finite"
        t = self.touched
        if not (np.isfinite(state.V[:, :, t]).all() and np.isfinite(state.S).all()
                and (self.M is None or np.isfinite(state.M[:, :, t, t]).all())):
            return "learning it makes the learner's state non-finite"
        return None

    def restore(self, state):
        t, n = self.touched, state.n_slots
        state.V[:, :, n:] = state.initial()[:, None, None]
        state.V[:, :, t] = self.V
        if self.M is not None:
            state.M[:, :, n:, :] = 0.0
            state.M[:, :, :, n:] = 0.0
            state.M[:, :, t, t] = self.M
        state.S[...] = self.S
        state.examples_seen, state.cumulative_loss = self.counters


def predict_next(state: LearnerState, batch: Batch) -> np.ndarray:
    """Each example's scores [n, K] as the model would predict it were it the next example it
    learns: its whole step (a scale update before the prediction included) run and undone
    (``run_batch``'s served examples), so each is predicted by the same model. A learner
    predicts before it sees the label, so the label plays no part.

    The step runs on a view of the call's own (``LearnerState.serving_view``), never on the
    model: a feature the model has not seen is at its initial values there, as a slot given to
    it would be, and nothing of the model is written. So a loaded model is never changed by
    serving and can serve many threads at once without a lock."""
    view, slots = state.serving_view(batch.indices)
    served = np.ones(len(batch), dtype=np.bool_)
    return _learn_checked(view, batch, slots, served).scores


def predict(state: LearnerState, batch: Batch) -> np.ndarray:
    """Scores ŷ = wᵀx with the weights as they are, learning nothing: shape [n, K]. Not what
    the model itself predicts for a learner whose step rescales or derives its weights before
    predicting (``predict_next``)."""
    slots = state.find_features(batch.indices)
    known = slots >= 0  # a feature no example carried has weight 0
    rows = np.repeat(np.arange(len(batch)), np.diff(batch.indptr))[known]
    scores = np.zeros((len(batch), state.n_classes))
    for k in range(state.n_classes):
        np.add.at(scores[:, k], rows, state.V[0, k, slots[known]] * batch.values[known])
    return scores


def probability(scores: np.ndarray) -> np.ndarray:
    """P(y = +1) for logistic-loss scores. Below a score of about -709, e^-score is past
    float's range: inf, and the probability 1 / (1 + inf) = 0, the true one to float
    precision; numpy's warning of that overflow would only alarm the user (a learner that is
    not scale-free, sgd on unscaled features, makes such scores)."""
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-scores))


def predicted_class(scores: np.ndarray) -> np.ndarray:
    """Class 1..K with the highest one-against-all score (or the sign for K = 1)."""
    if scores.shape[1] == 1:
        return np.where(scores[:, 0] >= 0, 1.0, -1.0)
    return np.argmax(scores, axis=1) + 1.0


def example_losses(state: Union[LearnerState, "RowState"], scores: np.ndarray,
                   labels: np.ndarray) -> np.ndarray:
    """Each example's loss at ``scores`` [n, K], as ``learn`` reports it: for one-against-all
    the sum of the K binary losses (learner k's label +1 for class k + 1, else -1). NaN where
    there is no loss to tell: no label (an example served, or scored without one), or no
    score (one served before a resume); those are not computed, as a loss of NaN would be
    with a warning (numpy's 'invalid value encountered in logaddexp')."""
    labels = np.asarray(labels, dtype=np.float64)
    losses = np.full(len(labels), np.nan)
    known = ~(np.isnan(labels) | np.isnan(scores).any(axis=1))
    if known.all():
        return _losses(state, scores, labels)
    if known.any():
        losses[known] = _losses(state, scores[known], labels[known])
    return losses


def _losses(state, scores, labels):
    """``example_losses`` of examples that each have a label and a score."""
    y = learner_labels(state, labels)
    tau = state.hyperparameters.get("quantile_tau", 0.5)
    if state.n_classes == 1:
        return loss_values(state.loss, y, scores[:, 0], tau)
    signs = np.where(np.arange(1, state.n_classes + 1) == y[:, None], 1.0, -1.0)
    return loss_values(state.loss, signs, scores, tau).sum(axis=1)


def mistakes(state: Union[LearnerState, "RowState"], scores: np.ndarray,
             labels: np.ndarray) -> np.ndarray:
    """1.0 where the predicted class is not the label, else 0.0 (classification only)."""
    return (predicted_class(scores) != learner_labels(state, labels)).astype(np.float64)
