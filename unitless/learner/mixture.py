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
_LOSSES, _GAP = 4, 4 + PARTS


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
def _parts(V, S, k, idx, val, y, weight, loss, tau, y_hats, losses):
    """Each part's predict-then-update on the example, in one pass over its features for the
    predictions and one for the updates (the parts share M and NAG's t and N): their ŷ_j and
    weighted losses into ``y_hats``, ``losses`` (coin first). Coin betting as ``coin.coin_step``
    (VW --coin); NAG as ``normalized.nag_predict``/``nag_update`` (Ross et al. Alg. 2), steps
    numbered as there."""
    w, theta, G, Mx, wealth, L = V[0, k], V[1, k], V[2, k], V[3, k], V[4, k], V[5, k]
    J = NAG_RATES.shape[0]
    nag_w, nag_G = V[_NAG::2, k], V[_NAG + 1::2, k]  # [part, slot]
    raw, norm, n_add = 0.0, 0.0, 0.0
    for a in range(idx.shape[0]):
        i, x = idx[a], val[a]
        if abs(x) > Mx[i]:  # NAG 1. w_i ← w_i s_i/|x_i|, s_i ← |x_i|; coin: M_i ← max(M_i, |x_i|)
            for j in range(J):
                nag_w[j, i] = nag_w[j, i] * Mx[i] / abs(x)
            Mx[i] = abs(x)
        raw += kt_bet(COIN_EPSILON + wealth[i], theta[i], G[i], L[i], Mx[i]) * x
        norm += (x / Mx[i]) ** 2
    for a in range(idx.shape[0]):  # NAG 2. N ← N + Σ x_i²/s_i², once every s_i is rescaled
        n_add += (val[a] / Mx[idx[a]]) ** 2  # (a feature twice in the example: as NAG has it)
    for j in range(J):  # NAG 2. ŷ = Σ w_i x_i
        y_j = 0.0
        for a in range(idx.shape[0]):
            y_j += nag_w[j, idx[a]] * val[a]
        y_hats[1 + j] = y_j
    S[k, 0] += weight * norm  # coin: N, T, ŷ = Σ w_i x_i / mean
    S[k, 1] += weight
    mean = (S[k, 0] + NORM_FLOOR) / S[k, 1] if S[k, 1] > 0.0 else 1.0
    y_hats[0] = raw / mean
    S[k, 2] += 1.0  # NAG: t, N
    S[k, 3] += n_add
    t, N = S[k, 2], S[k, 3]
    ell, g_coin = loss_and_derivative(loss, y, y_hats[0], tau)
    losses[0], g_coin = weight * ell, g_coin * weight
    for a in range(idx.shape[0]):
        i, x = idx[a], val[a]
        gx = g_coin * x  # coin: L_i first, then the bet the wealth is charged for
        if abs(g_coin) > L[i]:
            L[i] = max(abs(g_coin), COIN_BETA)
        bet = kt_bet(COIN_EPSILON + wealth[i], theta[i], G[i], L[i], Mx[i])
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
                nag_w[j, i] -= rate * gx / (Mx[i] * math.sqrt(nag_G[j, i]))


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
    eta, least = _eta(loss, S[k, _GAP]), L.min()
    # logistic: log Σ π̃_j σ(±ŷ_j); others: log Σ π̃_j, Σ π̃_j ŷ_j, Σ π̃_j ℓ_j (π̃ unnormalised),
    # and log Σ π̃_j e^{−η ℓ_j} or (η = ∞) the least ℓ_j of the leaders, for AdaHedge's gap
    up = down = total = mixed_loss = -np.inf
    mean = hedge = 0.0
    least_loss = np.inf
    for j in range(PARTS):
        y_j, ell = y_hats[j], losses[j]
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
