"""The one compiled loop: exact predict-then-update over a batch, in order."""
from numba import njit

from .baselines import adagrad_step, adam_step, cocob_step, sgd_step
from .kotlowski import kotlowski1_step, kotlowski2_step
from .mirror_descent import omd_diagonal_step, omd_pnorm_step
from .normalized import nag_step, ng_step, snag_step
from .scinol import scinol1_step, scinol2_step

# A learner's kernel code is its step's index here; ``step`` below branches in the same order.
# (Branching on a code rather than taking the step function as an argument lets numba cache the
# compiled loop on disk, so a new process starts without compiling.)
STEPS = (ng_step, nag_step, snag_step, omd_diagonal_step, omd_pnorm_step, kotlowski1_step,
         kotlowski2_step, scinol1_step, scinol2_step, sgd_step, adagrad_step, adam_step,
         cocob_step)


@njit(cache=True)
def step(code, V, M, S, k, idx, val, y, weight, loss, tau, hp):
    """STEPS[code](...): one learner's predict-then-update on one example."""
    args = (V, M, S, k, idx, val, y, weight, loss, tau, hp)
    if code == 0:
        return ng_step(*args)
    if code == 1:
        return nag_step(*args)
    if code == 2:
        return snag_step(*args)
    if code == 3:
        return omd_diagonal_step(*args)
    if code == 4:
        return omd_pnorm_step(*args)
    if code == 5:
        return kotlowski1_step(*args)
    if code == 6:
        return kotlowski2_step(*args)
    if code == 7:
        return scinol1_step(*args)
    if code == 8:
        return scinol2_step(*args)
    if code == 9:
        return sgd_step(*args)
    if code == 10:
        return adagrad_step(*args)
    if code == 11:
        return adam_step(*args)
    return cocob_step(*args)


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
