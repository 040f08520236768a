"""A mixture of scale-invariant learners weighted by their progressive losses (learning with
expert advice): ``mix``, tuning-free and invariant to feature scales because its parts are.

Its parts each learn every example as they would alone (each from the loss of its own
prediction): coin betting (``coin``, its defaults) and NAG (Ross et al. 2013, Alg. 2) at the
step sizes ``NAG_RATES``. The mixture predicts from their predictions ŷ_j, weighting part j by
π_j ∝ exp(−η L_j), L_j its weighted loss over the examples before this one (a uniform prior):

* logistic loss: η = 1 and the parts' probabilities mixed, p = Σ_j π_j σ(ŷ_j), ŷ = log p/(1−p).
  The log loss is 1-mixable, so this is the Bayes mixture: its total loss is at most the best
  part's plus ln P (P parts), whatever the examples (Vovk 1990; Cesa-Bianchi & Lugosi 2006,
  Sec. 3.3), and often below every part's;
* any other loss: ŷ = Σ_j π_j ŷ_j with AdaHedge's η = ln P / Δ (de Rooij, van Erven, Grünwald,
  Koolen 2014, "Follow the leader if you can, hedge if you must"), Δ the mixability gaps summed
  so far (η = ∞, following the leaders, while Δ = 0): no rate to set, and unchanged by the
  loss's units.

Nothing in the weights depends on a feature's units, so the mixture keeps its parts'
invariance. The grid of NAG rates is the parts' one fixed choice (measured:
benchmarks/results/accuracy.md): a user sets nothing. The weights a checkpoint shows as ``w``
(V[0]) are the coin part's: the mixture's prediction is not linear in any one weight vector.
"""
import math

import numpy as np
from numba import njit

from .coin import DEFAULTS, coin_step
from .losses import LOGISTIC, NO_MEMO, loss_and_derivative
from .normalized import nag_predict, nag_update

NAG_RATES = np.array([0.5, 2.0, 8.0])  # η of each NAG part
COIN_HP = np.array(list(DEFAULTS.values()))  # coin's ε and β at their defaults
COIN_VECTORS = ("w", "theta", "G", "M", "wealth", "L")
NAG_VECTORS = ("w", "s", "G")
PARTS = 1 + len(NAG_RATES)
# V: coin's six (its w first: the weights inspected), then each NAG part's three; S: coin's
# two, each NAG part's two, each part's loss so far, then AdaHedge's Δ
VECTORS = ("w", *(f"coin_{v}" for v in COIN_VECTORS[1:]),
           *(f"nag{j + 1}_{v}" for j in range(len(NAG_RATES)) for v in NAG_VECTORS))
SCALARS = ("coin_N", "coin_T",
           *(f"nag{j + 1}_{s}" for j in range(len(NAG_RATES)) for s in ("t", "N")),
           *(f"loss_{j}" for j in range(PARTS)), "gap")
_NAG_V, _NAG_S = len(COIN_VECTORS), 2  # where the first NAG part's vectors, scalars start
_LOSSES = _NAG_S + 2 * len(NAG_RATES)
_GAP = _LOSSES + PARTS


@njit(cache=True, inline="always")
def _log_sigmoid(z):
    """log σ(z) = −log(1 + e^−z), without overflow."""
    return -math.log1p(math.exp(-z)) if z > 0.0 else z - math.log1p(math.exp(z))


@njit(cache=True, inline="always")
def _add_log(a, b):
    """log(e^a + e^b)."""
    if a < b:
        a, b = b, a
    return a if b == -np.inf else a + math.log1p(math.exp(b - a))


@njit(cache=True, inline="always")
def _eta(loss, gap):
    """1 for logistic loss (the Bayes mixture); AdaHedge's ln P / Δ for any other."""
    if loss == LOGISTIC:
        return 1.0
    return math.log(PARTS) / gap if gap > 0.0 else np.inf


@njit(cache=True, inline="always")
def _log_weight(L_j, least, eta):
    """log π_j, not normalised: −η (L_j − min L); η = ∞: 0 for the parts of least L, −∞ for
    the others."""
    if math.isinf(eta):
        return 0.0 if L_j == least else -np.inf
    return -eta * (L_j - least)


@njit(cache=True)
def mix_step(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
             val: np.ndarray, y: float, weight: float, loss: int, tau: float,
             hp: np.ndarray) -> tuple[float, float]:
    """Each part's predict-then-update, then the mixture's ŷ from their predictions and the
    weights before this example; the parts' losses added to their totals. V, S: VECTORS,
    SCALARS; no hyperparameters. (Sums over the parts as they come, in scalars: no array is
    made per example.)"""
    L = S[k, _LOSSES:_GAP]
    eta, least = _eta(loss, S[k, _GAP]), L.min()
    # logistic: log Σ π̃_j σ(±ŷ_j); others: log Σ π̃_j, Σ π̃_j ŷ_j, Σ π̃_j ℓ_j (π̃ unnormalised),
    # and log Σ π̃_j e^{−η ℓ_j} or (η = ∞) the least ℓ_j of the leaders, for AdaHedge's gap
    up = down = total = mixed_loss = -np.inf
    mean = hedge = 0.0
    least_loss = np.inf
    for j in range(PARTS):
        if j == 0:
            y_j, ell = coin_step(V[0:_NAG_V], M, S[:, 0:_NAG_S], k, idx, val, y, weight, loss,
                                 tau, COIN_HP)
        else:
            a, b = _NAG_V + 3 * (j - 1), _NAG_S + 2 * (j - 1)
            Vj, Sj, rate = V[a:a + 3], S[:, b:b + 2], NAG_RATES[j - 1:j]
            y_j = nag_predict(Vj, M, Sj, k, idx, val, rate, NO_MEMO)
            ell, g = loss_and_derivative(loss, y, y_j, tau)
            nag_update(Vj, M, Sj, k, idx, val, g, weight, rate, NO_MEMO)
            ell *= weight
        lw = _log_weight(L[j], least, eta)
        L[j] += ell
        if loss == LOGISTIC:
            up, down = _add_log(up, lw + _log_sigmoid(y_j)), _add_log(down, lw + _log_sigmoid(-y_j))
        elif lw > -np.inf:
            pi = math.exp(lw)
            total, mean, hedge = _add_log(total, lw), mean + pi * y_j, hedge + pi * ell
            if math.isinf(eta):
                least_loss = min(least_loss, ell)
            else:
                mixed_loss = _add_log(mixed_loss, lw - eta * ell)
    if loss == LOGISTIC:
        y_hat = up - down
    else:
        norm = math.exp(total)
        y_hat = mean / norm
        # AdaHedge's mixability gap: the weighted mean loss less the mix loss (≥ 0 exactly)
        mix_loss = least_loss if math.isinf(eta) else -(mixed_loss - total) / eta
        S[k, _GAP] += max(hedge / norm - mix_loss, 0.0)
    ell, _ = loss_and_derivative(loss, y, y_hat, tau)
    return y_hat, weight * ell
