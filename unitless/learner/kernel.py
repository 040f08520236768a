"""The one compiled loop: exact predict-then-update over a batch, in order."""
import hashlib
import os
import sys
import warnings

from numba import literal_unroll, njit
from numba.core.dispatcher import Dispatcher
from numba.core.errors import NumbaExperimentalFeatureWarning

from .registry import ALGORITHMS

# A learner's kernel code is its position in the registry (``Algorithm.code``), and ``step``
# dispatches to the step function at that position. (Branching on a code rather than taking the
# step function as an argument lets numba cache the compiled loop on disk, so a new process
# starts without compiling.)
STEPS = tuple(a.step for a in ALGORITHMS.values())

# Unrolling over a tuple of step functions types them as first-class functions, which numba
# flags as experimental when it compiles ``step``; the loop only calls them, which is supported.
# Silenced for this file only (numba reports it against the source file, as module "…/kernel").
warnings.filterwarnings("ignore", message="First-class function type feature is experimental",
                        category=NumbaExperimentalFeatureWarning,
                        module=r".*unitless[\\/]learner[\\/]kernel")


@njit(cache=True)
def step(code, V, M, S, k, idx, val, y, weight, loss, tau, hp):
    """STEPS[code](...): one learner's predict-then-update on one example."""
    y_hat, ell = 0.0, 0.0
    i = 0
    for f in literal_unroll(STEPS):
        if i == code:
            y_hat, ell = f(V, M, S, k, idx, val, y, weight, loss, tau, hp)
        i += 1
    return y_hat, ell


@njit(cache=True)
def run_batch(code, V, M, S, hp, loss, tau, indptr, indices, values, labels, weights,
              scores, losses):
    """Feed examples 0..n-1 to learner STEPS[code] one by one; K = S.shape[0] one-against-all
    learners.

    With K = 1 the label is used as is; with K > 1 learner k sees +1 for label k+1, else −1.
    scores[n, k] is learner k's ŷ before it learned example n; losses[n] sums their losses.
    """
    K = S.shape[0]
    for n in range(labels.shape[0]):
        a, b = indptr[n], indptr[n + 1]
        idx, val = indices[a:b], values[a:b]
        total = 0.0
        for k in range(K):
            y = labels[n]
            if K > 1:
                y = 1.0 if labels[n] == k + 1 else -1.0
            y_hat, ell = step(code, V, M, S, k, idx, val, y, weights[n], loss, tau, hp)
            scores[n, k] = y_hat
            total += ell
        losses[n] = total


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
