"""Our learners over a stream in one ``learn()`` call, their progressive losses, learning-rate
grids and the best rate in hindsight."""
import math
import time
from types import SimpleNamespace

import numpy as np

# The η grid of the slides' artificial experiment.
SLIDES_ETAS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0]


def mean_logistic(y, scores):
    """Mean logistic loss log(1 + e^(−y·s)) of scores against ±1 labels."""
    return float(np.mean(np.logaddexp(0.0, -np.asarray(y) * np.asarray(scores))))


def hp_for(eta):
    """Hyperparameters for a learning rate η (None: the learner's defaults)."""
    return {} if eta is None else {"learning_rate": eta}


def run_learner(algorithm, batch, dim, bias=-1, loss="logistic", n_classes=1, catch=True, **hp):
    """A fresh state learns the stream in one ``learn()`` call (predict-then-update). Returns
    .state, .result (the BatchResult; None if the learner raised), .error (its text, or None)
    and .seconds; ``catch=False`` lets the exception through."""
    from unitless.learner import learn, new_state
    state = new_state(algorithm, dim, loss, n_classes=n_classes, bias_index=bias, **hp)
    t = time.perf_counter()
    try:
        result, error = learn(state, batch), None
    except Exception as e:  # a learner that crashes is reported, not hidden
        if not catch:
            raise
        result, error = None, f"{type(e).__name__}: {e}"
    return SimpleNamespace(state=state, result=result, error=error,
                           seconds=time.perf_counter() - t)


def run_dense(algorithm, X, y, **kw):
    """``run_learner`` over dense rows, with dense_batch's bias feature after the columns."""
    from unitless.learner import dense_batch
    return run_learner(algorithm, dense_batch(X, y), X.shape[1] + 1, bias=X.shape[1], **kw)


def zero_one(scores, y):
    """Progressive 0-1 loss: how often the class predicted from the pre-update scores is wrong."""
    from unitless.learner import predicted_class
    return float(np.mean(predicted_class(scores) != y))


def log_grid(lo, hi, num, digits=None, sig=None):
    """num learning rates log-spaced from 10^lo to 10^hi, rounded to `digits` decimals or to
    `sig` significant digits."""
    xs = [float(x) for x in np.logspace(lo, hi, num)]
    if sig is not None:
        return [float(f"{x:.{sig}g}") for x in xs]
    return [round(x, digits) for x in xs] if digits is not None else xs


def best(losses):
    """Best in hindsight: (η, loss) with the lowest finite loss in {η: loss}, ties to the
    smaller η; (None, nan) when none is finite."""
    ok = [(v, e) for e, v in losses.items() if v is not None and math.isfinite(v)]
    if not ok:
        return None, float("nan")
    v, e = min(ok)
    return e, v
