"""The one compiled loop: exact predict-then-update over a batch, in order; and its three parts
for a model split over feature shards (``sharded.py``): each shard's part of every ŷ, the
combined ŷ with its loss and gradient, each shard's update."""
import hashlib
import os
import sys
import warnings
from typing import Any

import numpy as np
from numba import literal_unroll, njit
from numba.core.dispatcher import Dispatcher
from numba.core.errors import NumbaExperimentalFeatureWarning

from .losses import NO_MEMO, loss_and_derivative
from .registry import ALGORITHMS


@njit(cache=True)
def _cannot_predict(V, M, S, k, idx, val, hp, memo):  # (a learner that cannot be split: never called)
    return 0.0


@njit(cache=True)
def _cannot_update(V, M, S, k, idx, val, g, weight, hp, memo):
    pass


def in_halves(predict_half: Any, update_half: Any, with_memo: bool) -> Dispatcher:
    """The step of a learner written in two halves (normalized.py says how): its predict, the
    loss and its update given g = ∂ℓ/∂ŷ; ``with_memo``, with room for what the update needs of
    the prediction (else none: numba compiles only the branch taken). Not cached on its own:
    a closure's cache key changes with every process, and the compiled loop that calls it
    (``run_batch``, cached) holds its code."""
    @njit
    def halves_step(V, M, S, k, idx, val, y, weight, loss, tau, hp):
        if with_memo:
            memo = np.empty(idx.shape[0])
        else:
            memo = NO_MEMO
        y_hat = predict_half(V, M, S, k, idx, val, hp, memo)
        ell, g = loss_and_derivative(loss, y, y_hat, tau)
        update_half(V, M, S, k, idx, val, g, weight, hp, memo)
        return y_hat, weight * ell
    return halves_step


PREDICTS = tuple(a.predict or _cannot_predict for a in ALGORITHMS.values())
UPDATES = tuple(a.update or _cannot_update for a in ALGORITHMS.values())
# A learner's kernel code is its position in the registry (``Algorithm.code``), and ``step``
# dispatches to the step function at that position. (Branching on a code rather than taking the
# step function as an argument lets numba cache the compiled loop on disk, so a new process
# starts without compiling.)
STEPS = tuple(a.step or in_halves(a.predict, a.update, a.memo) for a in ALGORITHMS.values())

# Unrolling over a tuple of step functions types them as first-class functions, which numba
# flags as experimental when it compiles ``step``; the loop only calls them, which is supported.
# Silenced for this file only (numba reports it against the source file, as module "…/kernel").
warnings.filterwarnings("ignore", message="First-class function type feature is experimental",
                        category=NumbaExperimentalFeatureWarning,
                        module=r".*unitless[\\/]learner[\\/]kernel")


@njit(cache=True)
def step(code: int, V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
         val: np.ndarray, y: float, weight: float, loss: int, tau: float,
         hp: np.ndarray) -> tuple[float, float]:
    """STEPS[code](...): one learner's predict-then-update on one example (its own step, or
    its two halves around the loss, ``in_halves``). Returns (ŷ, the weighted loss)."""
    y_hat, ell = 0.0, 0.0
    i = 0
    for f in literal_unroll(STEPS):
        if i == code:
            y_hat, ell = f(V, M, S, k, idx, val, y, weight, loss, tau, hp)
        i += 1
    return y_hat, ell


@njit(cache=True)
def predict(code: int, V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
            val: np.ndarray, hp: np.ndarray, memo: np.ndarray) -> float:
    """PREDICTS[code](...): the first half of a learner's step, up to ŷ."""
    y_hat = 0.0
    i = 0
    for f in literal_unroll(PREDICTS):
        if i == code:
            y_hat = f(V, M, S, k, idx, val, hp, memo)
        i += 1
    return y_hat


@njit(cache=True)
def update(code: int, V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
           val: np.ndarray, g: float, weight: float, hp: np.ndarray, memo: np.ndarray) -> None:
    """UPDATES[code](...): the second half, given g = ∂ℓ/∂ŷ."""
    i = 0
    for f in literal_unroll(UPDATES):
        if i == code:
            f(V, M, S, k, idx, val, g, weight, hp, memo)
        i += 1


@njit(cache=True, inline="always")
def learner_label(label: float, k: int, K: int) -> float:
    """The label one-against-all learner k of K sees: +1 for class k+1, else −1 (K = 1: the
    label as is)."""
    if K > 1:
        return 1.0 if label == k + 1 else -1.0
    return label


@njit(cache=True)
def run_batch(code: int, V: np.ndarray, M: np.ndarray, S: np.ndarray, hp: np.ndarray, loss: int,
              tau: float, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
              labels: np.ndarray, weights: np.ndarray, served: np.ndarray, scores: np.ndarray,
              losses: np.ndarray) -> None:
    """Feed examples 0..n-1 to learner STEPS[code] one by one; K = S.shape[0] one-against-all
    learners.

    Learner k sees ``learner_label``. scores[n, k] is learner k's ŷ before it learned example
    n; losses[n] sums their losses. An example with ``served[n]`` is predicted as if it were
    the next one learned: its whole step is run, then what the step may change is put back
    (its slots of V, and S; every slot and M for a learner with matrices, whose step writes
    across them), so the next example is learned by the same model whatever was served.
    """
    K = S.shape[0]
    whole = M.shape[0] > 0  # a learner with matrices: its step writes across every slot
    for n in range(labels.shape[0]):
        a, b = indptr[n], indptr[n + 1]
        idx, val = indices[a:b], values[a:b]
        if served[n]:
            S0 = S.copy()
            V0 = V.copy() if whole else V[:, :, idx].copy()
            M0 = M.copy() if whole else M
        total = 0.0
        for k in range(K):
            y = learner_label(labels[n], k, K)
            y_hat, ell = step(code, V, M, S, k, idx, val, y, weights[n], loss, tau, hp)
            scores[n, k] = y_hat
            total += ell
        losses[n] = total
        if served[n]:
            S[...] = S0
            if whole:
                V[...] = V0
                M[...] = M0
            else:
                V[:, :, idx] = V0


@njit(cache=True)
def run_many(code: int, V: np.ndarray, M: np.ndarray, S: np.ndarray, hp: np.ndarray, loss: int,
             tau: float, rows: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
             values: np.ndarray, labels: np.ndarray, weights: np.ndarray, served: np.ndarray,
             scores: np.ndarray, losses: np.ndarray, seen_after: np.ndarray,
             examples_seen: np.ndarray, cumulative_loss: np.ndarray, unsafe: np.ndarray) -> None:
    """``run_batch`` over examples of many models sharing one arena of slots (``many.py``):
    example n is learned by the model of row rows[n], whose scalars are S[rows[n]] and whose
    features are at the slots ``indices`` give. Each model sees its own examples in the
    batch's order and no other state, so it does the very operations learning them alone does.
    A model's counters move as ``online.count_learned``'s do (``seen_after[n]``: its
    examples_seen after example n). The first example whose prediction, loss (or its model's
    cumulative loss with it) or touched state is not finite marks its model ``unsafe`` and the model learns nothing more in this call:
    the caller puts it back and learns its examples the per-model way."""
    K = S.shape[1]
    for n in range(labels.shape[0]):
        m = rows[n]
        if unsafe[m]:
            continue
        a, b = indptr[n], indptr[n + 1]
        idx, val = indices[a:b], values[a:b]
        Sm = S[m]
        if served[n]:
            S0 = Sm.copy()
            V0 = V[:, :, idx].copy()
        total = 0.0
        finite = True
        for k in range(K):
            y = learner_label(labels[n], k, K)
            y_hat, ell = step(code, V, M, Sm, k, idx, val, y, weights[n], loss, tau, hp)
            scores[n, k] = y_hat
            total += ell
            finite = finite and np.isfinite(y_hat)
        if served[n]:
            Sm[...] = S0
            V[:, :, idx] = V0
            losses[n] = np.nan
        else:
            losses[n] = total
            finite = (finite and np.isfinite(total) and np.isfinite(cumulative_loss[m] + total)
                      and np.isfinite(Sm).all())
            for e in range(idx.shape[0]):
                for v in range(V.shape[0]):
                    for k in range(K):
                        finite = finite and np.isfinite(V[v, k, idx[e]])
        if not finite:
            unsafe[m] = 1
            continue
        if not served[n]:
            examples_seen[m] += 1
            cumulative_loss[m] += total
        seen_after[n] = examples_seen[m]


@njit(cache=True)
def predict_part(code: int, V: np.ndarray, M: np.ndarray, S: np.ndarray, hp: np.ndarray,
                 indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, scores: np.ndarray,
                 scalars: np.ndarray, memo: np.ndarray) -> None:
    """A shard's part of examples 0..n-1: scores[n, k] = Σ w_i x_i over the shard's features
    (after the learner's steps before ŷ, which change the shard's state); scalars[n, k] = the
    shard's S[k] after it; memo[k, a:b] what learner k's update of the example will need from
    its prediction (features a..b-1 of the batch)."""
    K = S.shape[0]
    for n in range(indptr.shape[0] - 1):
        a, b = indptr[n], indptr[n + 1]
        for k in range(K):
            scores[n, k] = predict(code, V, M, S, k, indices[a:b], values[a:b], hp,
                                   memo[k, a:b])
            scalars[n, k, :] = S[k, :]


@njit(cache=True)
def combine_parts(loss: int, tau: float, part_scores: np.ndarray, part_scalars: np.ndarray,
                  summed: np.ndarray, labels: np.ndarray, weights: np.ndarray, scores: np.ndarray,
                  gradients: np.ndarray, losses: np.ndarray, scalars: np.ndarray) -> None:
    """The model's ŷ = Σ_s ŷ_s of every example and learner (shards [S, n, K]), its loss (summed
    over learners into losses[n]) and g = ∂ℓ/∂ŷ; the model's scalars: those marked ``summed``
    added over shards, the others (counts every shard keeps alike) as shard 0 has them."""
    n_shards, K = part_scores.shape[0], part_scores.shape[2]
    for n in range(labels.shape[0]):
        total = 0.0
        for k in range(K):
            y_hat = part_scores[0, n, k]
            for s in range(1, n_shards):
                y_hat += part_scores[s, n, k]
            ell, g = loss_and_derivative(loss, learner_label(labels[n], k, K), y_hat, tau)
            scores[n, k], gradients[n, k] = y_hat, g
            total += weights[n] * ell
            for j in range(summed.shape[0]):
                value = part_scalars[0, n, k, j]
                if summed[j]:
                    for s in range(1, n_shards):
                        value += part_scalars[s, n, k, j]
                scalars[n, k, j] = value
        losses[n] = total


@njit(cache=True)
def update_part(code: int, V: np.ndarray, M: np.ndarray, hp: np.ndarray, indptr: np.ndarray,
                indices: np.ndarray, values: np.ndarray, gradients: np.ndarray,
                weights: np.ndarray, scalars: np.ndarray, memo: np.ndarray) -> None:
    """A shard's update by examples 0..n-1 in order: example n's gradient on learner k
    (gradients[n, k]), its weight, the model's scalars as they were at its ŷ (scalars[n, k])
    and the memo its prediction left (``predict_part``)."""
    K = gradients.shape[1]
    for n in range(indptr.shape[0] - 1):
        a, b = indptr[n], indptr[n + 1]
        for k in range(K):
            update(code, V, M, scalars[n], k, indices[a:b], values[a:b], gradients[n, k],
                   weights[n], hp, memo[k, a:b])


def _stamp_caches_with_their_sources():
    """Key the on-disk cache of every compiled function of the package on all the sources the
    compiled code is built from.

    numba keys a function's cache on its own file's contents, but compiled code holds the code of
    the functions it calls: ``run_batch`` holds every step function (and the registry's order of
    them), a step function the losses it inlines. An edit to a step module, the registry or
    the losses would otherwise leave the old compiled code running. Here every cached function
    of the package gets one stamp, the SHA-256 of the registry and of every module defining a
    compiled function, so any edit to them recompiles on next use (once, then cached again).
    """
    package = __name__.rpartition(".")[0]
    modules = [m for name, m in sorted(sys.modules.items())
               if name.startswith(package + ".") and getattr(m, "__file__", None)]
    dispatchers = [(m, d) for m in modules for d in vars(m).values()
                   if isinstance(d, Dispatcher) and d.py_func.__module__ == m.__name__]
    sources = sorted({m.__file__ for m, _ in dispatchers}
                     | {sys.modules[package + ".registry"].__file__})
    digest = hashlib.sha256()
    for path in sources:
        with open(path, "rb") as f:
            digest.update(os.path.basename(path).encode() + b"\0" + f.read() + b"\0")
    stamp = digest.digest()
    for _, d in dispatchers:
        cache_file = getattr(getattr(d, "_cache", None), "_cache_file", None)
        if cache_file is not None and hasattr(cache_file, "_source_stamp"):
            cache_file._source_stamp = stamp  # (numba internals: without them, numba's own key)


_stamp_caches_with_their_sources()
