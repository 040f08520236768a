"""One model's state split over feature shards, learned with a bounded delay.

Each shard holds the state of the features ``shard_of`` gives it, as a LearnerState of its own.
An example is learned in three parts, whoever runs them: ``predict_part`` (every shard's part of
ŷ), ``combine`` (ŷ, its loss and gradient, the model's scalars) and ``update_part`` (every shard
applies the gradient). ``learn_with_delay`` runs them in one process with delay τ: the reference
a distributed run is checked against. The protocol: docs/design.md, "One model over feature
shards".
"""
from typing import NamedTuple, Sequence

import numpy as np

from . import kernel
from .examples import Batch
from .losses import LOSS_CODES
from .online import BatchResult, InvalidExampleError, check_batch, count_learned, learner_labels
from .registry import ALGORITHMS, get_algorithm
from .state import LearnerState, new_state

SHARDABLE = tuple(name for name, a in ALGORITHMS.items() if a.shardable)


def shard_of(indices: np.ndarray, n_shards: int) -> np.ndarray:
    """The shard (0..n_shards-1) holding each feature index: the top bits of the index mixed by
    SplitMix64's finaliser, independent of the bits the shard's slot table hashes on."""
    z = np.asarray(indices, dtype=np.int64).astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (((z >> np.uint64(32)) * np.uint64(n_shards)) >> np.uint64(32)).astype(np.int64)


def split_batch(batch: Batch, n_shards: int) -> list[Batch]:
    """The batch as each shard sees it: every example, with the features that shard holds."""
    shard = shard_of(batch.indices, n_shards)
    rows = np.repeat(np.arange(len(batch)), np.diff(batch.indptr))
    parts = []
    for s in range(n_shards):
        keep = shard == s
        indptr = np.zeros(len(batch) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows[keep], minlength=len(batch)), out=indptr[1:])
        parts.append(Batch(indptr, batch.indices[keep], batch.values[keep], batch.labels,
                           batch.weights))
    return parts


def new_shards(n_shards: int, algorithm: str, dim: int, loss: str = "logistic", n_classes: int = 1,
               bias_index: int = -1, **hyperparameters: float) -> list[LearnerState]:
    """``n_shards`` fresh shards of one model (``new_state``'s arguments)."""
    if n_shards < 1:
        raise ValueError(f"a model needs at least one shard, not {n_shards}")
    if not get_algorithm(algorithm).shardable:
        raise ValueError(f"{algorithm} cannot be split over feature shards (its prediction "
                         f"reads state of features the example does not carry); these can: "
                         f"{', '.join(SHARDABLE)}")
    return [new_state(algorithm, dim, loss, n_classes, bias_index, **hyperparameters)
            for _ in range(n_shards)]


class Part(NamedTuple):
    """A shard's part of a run of examples: what ``combine`` takes (scores: its part of ŷ
    [n, K]; scalars: its scalars after each example [n, K, scalars]) and what its own
    ``update_part`` of them takes (memo [K, features of the run])."""
    scores: np.ndarray
    scalars: np.ndarray
    memo: np.ndarray


def predict_part(shard: LearnerState, batch: Batch) -> Part:
    """This shard's Part of the batch's examples; ``batch`` holds the shard's features only
    (``split_batch``)."""
    n, K = len(batch), shard.n_classes
    part = Part(np.empty((n, K)), np.empty((n, K, shard.S.shape[1])),
                np.empty((K, len(batch.indices))))
    slots = shard.map_features(batch.indices)  # (first: new features may grow the arrays)
    kernel.predict_part(shard.spec.code, shard.V, shard.M, shard.S, shard.hp_array(),
                        batch.indptr, slots, batch.values, *part)
    return part


def combine(shard: LearnerState, parts: Sequence[Part], labels: np.ndarray,
            weights: np.ndarray) -> tuple[BatchResult, np.ndarray, np.ndarray]:
    """The model's view of examples every shard has computed its part of (``parts``: each
    shard's ``predict_part``, in shard order): BatchResult (ŷ and loss), g [n, K] and the
    model's scalars [n, K, scalars]. ``shard``: any shard (for the learner and its loss)."""
    part_scores = np.stack([p.scores for p in parts])
    part_scalars = np.stack([p.scalars for p in parts])
    n, K = part_scores.shape[1:]
    summed = np.array([name in shard.spec.summed for name in shard.spec.scalars], dtype=bool)
    scores, gradients, losses = np.empty((n, K)), np.empty((n, K)), np.empty(n)
    scalars = np.empty_like(part_scalars[0])
    kernel.combine_parts(LOSS_CODES[shard.loss], shard.hyperparameters.get("quantile_tau", 0.5),
                         part_scores, part_scalars, summed, learner_labels(shard, labels),
                         weights, scores, gradients, losses, scalars)
    return BatchResult(scores, losses), gradients, scalars


def update_part(shard: LearnerState, batch: Batch, part: Part, gradients: np.ndarray,
                scalars: np.ndarray) -> None:
    """Apply the examples' gradients (``combine``) to this shard's features, in order; ``part``:
    the shard's own Part of them."""
    kernel.update_part(shard.spec.code, shard.V, shard.M, shard.hp_array(), batch.indptr,
                       shard.find_features(batch.indices), batch.values, gradients,
                       batch.weights, scalars, part.memo)


def learn_with_delay(shards: Sequence[LearnerState], batch: Batch,
                     max_delay: int = 0) -> BatchResult:
    """Learn the batch in order with every shard, each example's part computed with at most
    ``max_delay`` of the gradients before it not yet applied; returns the model's BatchResult.
    An invalid example raises InvalidExampleError before anything is learned."""
    if max_delay < 0:
        raise ValueError(f"the delay bound is a number of examples, not {max_delay}")
    problems = check_batch(shards[0], batch)
    if problems:
        raise InvalidExampleError(*problems[0])
    parts = split_batch(batch, len(shards))
    block = max_delay + 1
    results = []
    for a in range(0, len(batch), block):
        b = min(a + block, len(batch))
        pieces = [p.slice(a, b) for p in parts]
        computed = [predict_part(shard, piece) for shard, piece in zip(shards, pieces)]
        result, gradients, scalars = combine(shards[0], computed, batch.labels[a:b],
                                             batch.weights[a:b])
        for shard, piece, part in zip(shards, pieces, computed):
            update_part(shard, piece, part, gradients, scalars)
            count_learned(shard, result.losses)
        results.append(result)
    if not results:
        return BatchResult(np.empty((0, shards[0].n_classes)), np.empty(0))
    return BatchResult(np.vstack([r.scores for r in results]),
                       np.concatenate([r.losses for r in results]))


def merge(shards: Sequence[LearnerState]) -> LearnerState:
    """The unsharded model the shards make up: every shard's features, the summed scalars added
    over shards, the counts and counters as the first shard has them."""
    first = shards[0]
    model = new_state(first.algorithm, first.dim, first.loss, first.n_classes, first.bias_index,
                      **first.hyperparameters)
    for shard in shards:
        assert shard.slot_index is not None
        slots = model.map_features(shard.slot_index[:shard.n_slots])  # (may grow model.V)
        model.V[:, :, slots] = shard.V[:, :, :shard.n_slots]
        model.name_features(shard.feature_names)
    model.S[...] = first.S
    for j, name in enumerate(first.spec.scalars):
        if name in first.spec.summed:
            for shard in shards[1:]:
                model.S[:, j] += shard.S[:, j]
    model.examples_seen, model.cumulative_loss = first.examples_seen, first.cumulative_loss
    return model
