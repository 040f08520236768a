"""Losses ℓ(y, ŷ) and their derivatives g = ∂ℓ/∂ŷ, compiled for the inner loop.

Losses are identified by small integer codes so the compiled kernel can branch on them.
"""
import math

import numpy as np
from numba import njit

LOGISTIC, HINGE, SQUARED, ABSOLUTE, QUANTILE = 0, 1, 2, 3, 4
# The ``memo`` of a learner's step halves that keep nothing there (see ``normalized.py``).
NO_MEMO = np.empty(0)
LOSS_CODES = {"logistic": LOGISTIC, "hinge": HINGE, "squared": SQUARED,
              "absolute": ABSOLUTE, "quantile": QUANTILE}
CLASSIFICATION_LOSSES = ("logistic", "hinge")
# Lipschitz constant in ŷ, used by the scale-invariant OMD learners (squared loss is not
# Lipschitz; 1 is the conventional stand-in, as for labels and predictions of order 1).
LIPSCHITZ = {"logistic": 1.0, "hinge": 1.0, "squared": 1.0, "absolute": 1.0, "quantile": 1.0}


@njit(cache=True, inline="always")
def loss_and_derivative(loss: int, y: float, y_hat: float, tau: float) -> tuple[float, float]:
    """Return (ℓ(y, ŷ), ∂ℓ/∂ŷ); tau is the quantile level of the quantile loss."""
    if loss == LOGISTIC:  # log(1 + e^{-yŷ})
        z = y * y_hat
        if z > 0.0:
            e = math.exp(-z)
            return math.log1p(e), -y * e / (1.0 + e)
        return -z + math.log1p(math.exp(z)), -y / (1.0 + math.exp(z))
    if loss == HINGE:  # max(0, 1 - yŷ)
        margin = 1.0 - y * y_hat
        if margin > 0.0:
            return margin, -y
        return 0.0, 0.0
    if loss == SQUARED:  # (ŷ - y)²
        r = y_hat - y
        return r * r, 2.0 * r
    if loss == ABSOLUTE:  # |ŷ - y|
        r = y_hat - y
        if r > 0.0:
            return r, 1.0
        if r < 0.0:
            return -r, -1.0
        return 0.0, 0.0
    # QUANTILE: τ(y - ŷ) if y ≥ ŷ else (1 - τ)(ŷ - y)
    r = y - y_hat
    if r > 0.0:
        return tau * r, -tau
    if r < 0.0:
        return -(1.0 - tau) * r, 1.0 - tau
    return 0.0, 0.0


def loss_values(loss: str, y: np.ndarray, y_hat: np.ndarray, tau: float = 0.5) -> np.ndarray:
    """Vectorised ℓ(y, ŷ) for reporting (e.g. test loss of a scored set)."""
    y = np.asarray(y, dtype=np.float64)
    y_hat = np.asarray(y_hat, dtype=np.float64)
    if loss == "logistic":
        return np.logaddexp(0.0, -y * y_hat)
    if loss == "hinge":
        return np.maximum(0.0, 1.0 - y * y_hat)
    if loss == "squared":
        return (y_hat - y) ** 2
    if loss == "absolute":
        return np.abs(y_hat - y)
    if loss == "quantile":
        r = y - y_hat
        return np.where(r >= 0, tau * r, (tau - 1.0) * r)
    raise ValueError(f"unknown loss {loss!r}; choose one of {sorted(LOSS_CODES)}")
