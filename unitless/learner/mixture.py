"""A mixture of scale-invariant learners weighted by their progressive losses (learning with
expert advice): ``mix``, tuning-free and invariant to feature scales because its parts are.

Its parts each learn every example as they would alone (each from the loss of its own
prediction): coin betting (``coin``, its defaults) and NAG (Ross et al. 2013, Alg. 2) at the
step sizes ``NAG_RATES``. The mixture predicts from their predictions ŷ_j, weighting part j by
π_j ∝ exp(−η L_j), L_j its weighted loss over the examples before this one (a uniform prior):

* logistic loss: η = 1 and the parts' probabilities mixed, p = Σ_j π_j σ(ŷ_j), ŷ = log p/(1−p).
  The log loss is 1-mixable, so this is the Bayes mixture: with importance weights at most 1
  its total loss is at most the best part's plus ln P (P parts), whatever the examples (Vovk
  1990; Cesa-Bianchi & Lugosi 2006, Sec. 3.3), and often below every part's (a weight w > 1
  makes the loss w ℓ only 1/w-mixable: the bound loosens, the rule stays);
* any other loss: ŷ = Σ_j π_j ŷ_j with AdaHedge's η = ln P / Δ (de Rooij, van Erven, Grünwald,
  Koolen 2014, "Follow the leader if you can, hedge if you must"), Δ the mixability gaps summed
  so far (η = ∞, following the leaders, while Δ = 0): no rate to set, and unchanged by the
  loss's units. A part whose loss so far is infinite has no weight, and an example's gap counts
  only the parts whose loss on it is finite: one part blown up leaves the others to predict.

Nothing in the weights depends on a feature's units, so the mixture keeps its parts'
invariance. The grid of NAG rates is the parts' one fixed choice (chosen on the sets of
benchmarks/results/accuracy.md, which shows the grids tried): a user sets nothing. The
weights a checkpoint shows as ``w`` (V[0]) are the coin part's: the mixture's prediction is
not linear in any one weight vector.

The parts run together over the example's features (``_parts``), not as their own step
functions one after another: they keep max |x_i| once (coin's M_i is each NAG part's s_i, NAG's
t and N are every part's), so a feature's state is 12 numbers, not 15, and its scale is read
once (the mixture's cost: benchmarks/results/throughput.md). The reference traces of
tests/unit/test_learner_traces.py hold it to coin's and NAG's own, run apart.
"""
import math

import numpy as np
from numba import njit

from .coin import DEFAULTS, NORM_FLOOR, kt_bet
from .losses import LOGISTIC, loss_and_derivative

NAG_RATES = np.array([0.5, 2.0, 8.0])  # η of each NAG part
COIN_EPSILON, COIN_BETA = DEFAULTS["epsilon"], DEFAULTS["lipschitz"]
PARTS = 1 + len(NAG_RATES)
# V: coin's (its w first: the weights a checkpoint shows), M_i = max |x_i| (coin's M and every
# NAG part's s: the same numbers), then each NAG part's w and G. S: coin's N and T, NAG's t and
# N (the same for every part), each part's loss so far, then AdaHedge's Δ.
VECTORS = ("w", "coin_theta", "coin_G", "M", "coin_wealth", "coin_L",
           *(f"nag{j + 1}_{v}" for j in range(len(NAG_RATES)) for v in ("w", "G")))
SCALARS = ("coin_N", "coin_T", "nag_t", "nag_N", *(f"loss_{j}" for j in range(PARTS)), "gap")
_NAG = 6  # V[_NAG + 2j], V[_NAG + 2j + 1]: NAG part j's w and G
_COIN_N, _COIN_T, _NAG_T, _NAG_N, _LOSSES = 0, 1, 2, 3, 4  # S's columns
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
def _adahedge_eta(gap):
    """AdaHedge's η = ln P / Δ; ∞ while Δ = 0."""
    return math.log(PARTS) / gap if gap > 0.0 else np.inf


@njit(cache=True, inline="always")
def _log_weight(L_j, least, eta):
    """log π_j, not normalised: −η (L_j − min L); η = ∞: 0 for the parts of least L, −∞ for
    the others."""
    if math.isinf(eta):  # (while Δ = 0 every part has had the same losses: −∞ only by rounding)
        return 0.0 if L_j == least else -np.inf
    return -eta * (L_j - least)


@njit(cache=True)
def _parts(V, S, k, idx, val, y, weight, loss, tau, y_hats, losses):
    """Each part's predict-then-update on the example, the parts together over its features
    (sharing M and NAG's t and N): their ŷ_j and weighted losses into ``y_hats``, ``losses``
    (coin first). Coin betting as ``coin.coin_step``
    (VW --coin); NAG as ``normalized.nag_predict``/``nag_update`` (Ross et al. Alg. 2), steps
    numbered as there."""
    w, theta, G, max_abs, wealth, L = V[0, k], V[1, k], V[2, k], V[3, k], V[4, k], V[5, k]
    J = NAG_RATES.shape[0]
    nag_w, nag_G = V[_NAG::2, k], V[_NAG + 1::2, k]  # [part, slot]
    raw, norm, n_add = 0.0, 0.0, 0.0
    for a in range(idx.shape[0]):
        i, x = idx[a], val[a]
        # NAG 1. w_i ← w_i s_i/|x_i|, s_i ← |x_i| where |x_i| > s_i; coin: M_i ← max(M_i, |x_i|)
        if abs(x) > max_abs[i]:
            for j in range(J):
                nag_w[j, i] = nag_w[j, i] * max_abs[i] / abs(x)
            max_abs[i] = abs(x)
        raw += kt_bet(COIN_EPSILON + wealth[i], theta[i], G[i], L[i], max_abs[i]) * x
        norm += (x / max_abs[i]) ** 2
    for a in range(idx.shape[0]):  # NAG 2. N ← N + Σ x_i²/s_i², once every s_i is rescaled
        n_add += (val[a] / max_abs[idx[a]]) ** 2  # (a feature twice in the example: as NAG has it)
    for j in range(J):  # NAG 2. ŷ = Σ w_i x_i
        y_j = 0.0
        for a in range(idx.shape[0]):
            y_j += nag_w[j, idx[a]] * val[a]
        y_hats[1 + j] = y_j
    S[k, _COIN_N] += weight * norm  # coin: N, T, ŷ = Σ w_i x_i / mean
    S[k, _COIN_T] += weight
    mean = (S[k, _COIN_N] + NORM_FLOOR) / S[k, _COIN_T] if S[k, _COIN_T] > 0.0 else 1.0
    y_hats[0] = raw / mean
    S[k, _NAG_T] += 1.0  # NAG: t, N
    S[k, _NAG_N] += n_add
    t, N = S[k, _NAG_T], S[k, _NAG_N]
    ell, g_coin = loss_and_derivative(loss, y, y_hats[0], tau)
    losses[0], g_coin = weight * ell, g_coin * weight
    for a in range(idx.shape[0]):
        i, x = idx[a], val[a]
        gx = g_coin * x  # coin: L_i first, then the bet the wealth is charged for
        if abs(g_coin) > L[i]:
            L[i] = max(abs(g_coin), COIN_BETA)
        bet = kt_bet(COIN_EPSILON + wealth[i], theta[i], G[i], L[i], max_abs[i])
        theta[i] -= gx
        G[i] += abs(gx)
        wealth[i] -= gx * bet
        w[i] = bet / mean
    for j in range(J):  # NAG 3. G_i += (g x_i)²; w_i −= η √(t/N) g x_i/(s_i √G_i)
        ell, g = loss_and_derivative(loss, y, y_hats[1 + j], tau)
        losses[1 + j], g = weight * ell, g * weight
        if g == 0.0 or N <= 0.0:  # (N = 0: no feature yet, nothing to update)
            continue
        rate = NAG_RATES[j] * math.sqrt(t / N)
        for a in range(idx.shape[0]):
            i = idx[a]
            gx = g * val[a]
            nag_G[j, i] += gx * gx
            if nag_G[j, i] > 0.0:  # ((g x_i)² can underflow to 0 when the loss saturates)
                nag_w[j, i] -= rate * gx / (max_abs[i] * math.sqrt(nag_G[j, i]))


@njit(cache=True, inline="always")
def _hedge_weight(L_j, least, eta):
    """π̃_j, unnormalised: every part alike once every part's loss so far is infinite."""
    return 1.0 if math.isinf(least) else math.exp(_log_weight(L_j, least, eta))


@njit(cache=True)
def _hedge(S, k, L, y_hats, losses):
    """Any loss but logistic: ŷ = Σ π_j ŷ_j with AdaHedge's weights, and Δ grown by this
    example's mixability gap h − m, over the parts of weight > 0 whose loss on it is finite:
    h their weighted mean loss, m = ℓ_min − (1/η) log Σ π_j e^{−η (ℓ_j − ℓ_min)} the mix loss
    (η = ∞: ℓ_min), taken from the least loss so that it cannot overflow; a gap that is not
    finite is not added."""
    eta, least = _adahedge_eta(S[k, _GAP]), L.min()
    total = mean = weights = h = 0.0
    ell_min = np.inf
    for j in range(PARTS):
        pi = _hedge_weight(L[j], least, eta)
        total, mean = total + pi, mean + pi * y_hats[j]
        if pi > 0.0 and math.isfinite(losses[j]):
            weights, h, ell_min = weights + pi, h + pi * losses[j], min(ell_min, losses[j])
    if weights > 0.0:
        m = ell_min
        if not math.isinf(eta):
            mixed = 0.0
            for j in range(PARTS):
                pi = _hedge_weight(L[j], least, eta)
                if pi > 0.0 and math.isfinite(losses[j]):
                    mixed += pi * math.exp(-eta * (losses[j] - ell_min))
            m -= math.log(mixed / weights) / eta
        gap = h / weights - m
        if gap > 0.0 and math.isfinite(gap):  # (≥ 0 in exact arithmetic)
            S[k, _GAP] += gap
    return mean / total


@njit(cache=True)
def mix_step(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
             val: np.ndarray, y: float, weight: float, loss: int, tau: float,
             hp: np.ndarray) -> tuple[float, float]:
    """The parts' predict-then-update (``_parts``), then the mixture's ŷ from their predictions
    and the weights before this example; the parts' losses added to their totals. V, S:
    VECTORS, SCALARS; no hyperparameters."""
    y_hats, losses = np.empty(PARTS), np.empty(PARTS)
    _parts(V, S, k, idx, val, y, weight, loss, tau, y_hats, losses)
    L = S[k, _LOSSES:_GAP]
    if loss == LOGISTIC:  # log Σ π̃_j σ(±ŷ_j), π̃ unnormalised
        least, up, down = L.min(), -np.inf, -np.inf
        for j in range(PARTS):
            lw = _log_weight(L[j], least, 1.0)  # (η = 1: the Bayes mixture)
            up = _add_log(up, lw + _log_sigmoid(y_hats[j]))
            down = _add_log(down, lw + _log_sigmoid(-y_hats[j]))
        y_hat = up - down
    else:
        y_hat = _hedge(S, k, L, y_hats, losses)
    L += losses
    ell, _ = loss_and_derivative(loss, y, y_hat, tau)
    return y_hat, weight * ell
