"""The public learner calls: validate a batch, learn from it in order, predict with frozen weights."""
from dataclasses import dataclass

import numpy as np

from .kernel import run_batch
from .losses import CLASSIFICATION_LOSSES, LOSS_CODES


class InvalidExampleError(ValueError):
    """An example the learner refuses; ``position`` is its index in the batch."""

    def __init__(self, position, reason):
        super().__init__(f"example {position} of the batch: {reason}")
        self.position = position
        self.reason = reason


@dataclass
class BatchResult:
    scores: np.ndarray  # [n, K]: ŷ of each one-against-all learner before it learned the example
    losses: np.ndarray  # [n]: the (importance-weighted) loss suffered on each example


def check_batch(state, batch):
    """Reasons the learner refuses examples: a list of (position, reason), in batch order."""
    return check_examples(batch, state.dim, state.n_classes, state.loss)


def check_examples(batch, dim, n_classes, loss):
    """``check_batch`` for a learner of that dimension, number of classes and loss."""
    problems = {}

    def flag(rows, reason):
        for r in np.flatnonzero(rows):
            problems.setdefault(int(r), reason(int(r)))

    row_of = np.repeat(np.arange(len(batch)), np.diff(batch.indptr))
    bad_value = ~np.isfinite(batch.values)
    if bad_value.any():
        first = {}
        for pos in np.flatnonzero(bad_value)[::-1]:
            first[int(row_of[pos])] = pos
        flag(np.isin(np.arange(len(batch)), list(first)),
             lambda r: f"feature value {batch.values[first[r]]} (feature index "
                       f"{batch.indices[first[r]]}) is not finite")
    bad_index = (batch.indices < 0) | (batch.indices >= dim)
    if bad_index.any():
        rows = np.zeros(len(batch), bool)
        rows[row_of[bad_index]] = True
        flag(rows, lambda r: f"a feature index is outside 0..{dim - 1}")
    y = batch.labels
    flag(~np.isfinite(y), lambda r: f"label {y[r]} is not finite")
    if n_classes > 1:
        ok = (y == np.round(y)) & (y >= 1) & (y <= n_classes)
        flag(np.isfinite(y) & ~ok,
             lambda r: f"label {y[r]} is not a class in 1..{n_classes}")
    elif loss in CLASSIFICATION_LOSSES:
        flag(np.isfinite(y) & ~np.isin(y, (-1.0, 0.0, 1.0)),
             lambda r: f"label {y[r]} is not a {loss} label (-1/+1, or 0/1)")
    w = batch.weights
    flag(~np.isfinite(w) | (w < 0), lambda r: f"importance weight {w[r]} is not finite and ≥ 0")
    return sorted(problems.items())


def _labels_for_kernel(state, labels):
    if state.n_classes == 1 and state.loss in CLASSIFICATION_LOSSES:
        return np.where(labels == 0.0, -1.0, labels)  # 0/1 labels mean -1/+1
    return labels


def learn(state, batch):
    """Predict then update on every example of the batch, in order; returns a BatchResult.

    The whole batch is checked first: an invalid example raises InvalidExampleError and the
    state is left exactly as it was.
    """
    problems = check_batch(state, batch)
    if problems:
        raise InvalidExampleError(*problems[0])
    n = len(batch)
    scores = np.empty((n, state.n_classes))
    losses = np.empty(n)
    run_batch(state.spec.code, state.V, state.M, state.S, state.hp_array(),
              LOSS_CODES[state.loss], state.hyperparameters.get("quantile_tau", 0.5),
              batch.indptr, batch.indices, batch.values, _labels_for_kernel(state, batch.labels),
              batch.weights, scores, losses)
    state.mark_seen(batch.indices)
    state.examples_seen += n
    state.cumulative_loss += float(losses.sum())
    return BatchResult(scores, losses)


def predict(state, batch):
    """Scores ŷ = wᵀx with the weights as they are, learning nothing: shape [n, K]."""
    W = state.weights
    rows = np.repeat(np.arange(len(batch)), np.diff(batch.indptr))
    scores = np.zeros((len(batch), state.n_classes))
    for k in range(state.n_classes):
        np.add.at(scores[:, k], rows, W[k, batch.indices] * batch.values)
    return scores


def probability(scores):
    """P(y = +1) for logistic-loss scores."""
    return 1.0 / (1.0 + np.exp(-scores))


def predicted_class(scores):
    """Class 1..K with the highest one-against-all score (or the sign for K = 1)."""
    if scores.shape[1] == 1:
        return np.where(scores[:, 0] >= 0, 1.0, -1.0)
    return np.argmax(scores, axis=1) + 1.0
