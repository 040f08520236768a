"""The one compiled loop: exact predict-then-update over a batch, in order."""
from numba import njit


# Not cached on disk: numba cannot save an overload whose argument is another dispatcher. The
# step functions themselves are cached; compiling this loop costs ~0.7 s per process (measured
# in benchmarks/results/pipeline.md).
@njit
def run_batch(step, V, M, S, hp, loss, tau, indptr, indices, values, labels, weights,
              scores, losses):
    """Feed examples 0..n-1 to ``step`` one by one; K = S.shape[0] one-against-all learners.

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
            y_hat, ell = step(V, M, S, k, idx, val, y, weights[n], loss, tau, hp)
            scores[n, k] = y_hat
            total += ell
        losses[n] = total
