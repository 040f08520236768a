"""Coin betting per coordinate (Orabona & Pál 2016, the Krichevsky–Trofimov bettor), normalised
per feature as Vowpal Wabbit's ``--coin`` does it (``coin_betting`` in its ftrl reduction,
``vowpalwabbit/core/src/reductions/ftrl.cc``, read at VW commit 872fd8d): no learning rate,
invariant to feature scales.

Each coordinate bets on the coins c_{t,i} = −g_t x_{t,i} / (L_i M_i), which lie in [−1, 1]:
M_i = max |x_{s,i}| bounds the feature, L_i = max(β, max |g_s|) the loss's derivative. The KT
bettor stakes the fraction (Σ_{s<t} c_{s,i}) / t of its money; with t replaced by
1 + Σ_{s<t} |c_{s,i}| (COCOB's data-dependent form, as VW has it) and ε the initial money,
the bet in units of x_i is

    w_{t,i} = (ε + Wealth_i) θ_i / (L_i M_i (L_i M_i + G_i)),   θ_i = −Σ g x_i, G_i = Σ |g x_i|

and Wealth_i, the money won so far, grows by −g_t x_{t,i} w_{t,i}. Every term of the bet but
θ_i / (M_i (M_i + G_i / L_i)) is free of units, so rescaling feature i by a > 0 divides w_i by a.
VW then divides ŷ by the running mean over examples of Σ_i (x_{t,i} / M_i)², the number of
features an example carries counted at their own scale (like NAG's N/t).

Shared step signature: see ``normalized.py``. A coordinate whose value is 0 in this example is
not touched. Not split over feature shards: ŷ divides by a mean over all the example's features.

Where this differs from VW 9.11.9 (also docs/design.md, "Choices made"):

* the prediction reported and scored is the ŷ above, the one the gradient is taken at. VW 9.11.9
  predicts before it learns for ``--coin`` (``learn_returns_prediction = false``; ``--oaa``
  through ``multipredict``) and reports Σ_i w_i x_i over the weights stored at each feature's
  last update (``W_XT``, kept as ``w`` here too), while its ``learn()`` takes the gradient at
  the ŷ above;
* float64 throughout (VW keeps float32);
* one-against-all classes keep their own mean of Σ_i (x_i/M_i)² (VW's ``--oaa`` adds every
  class's copy of the example into one shared mean);
* ŷ is not clipped to [−50, 50] before the loss's derivative is taken (VW clips the logistic
  loss's prediction);
* while only examples of importance weight 0 have come (Σ_t weight_t = 0, every bet still 0)
  the mean is taken as 1 where VW divides by 0.
"""
import numpy as np
from numba import njit

from .losses import loss_and_derivative

# ε (VW's --ftrl_alpha) and β (--ftrl_beta) as VW defaults them (the registry's defaults)
DEFAULTS = {"epsilon": 4.0, "lipschitz": 1.0}
# VW adds 1e-6 to Σ_t weight_t Σ_i (x_{t,i}/M_i)² before dividing by Σ_t weight_t
NORM_FLOOR = 1e-6


@njit(cache=True, inline="always")
def kt_bet(money: float, theta: float, G: float, L: float, M: float) -> float:
    """w_i = (ε + Wealth_i) θ_i / (L_i M_i (L_i M_i + G_i)); 0 while L_i M_i = 0 (no gradient
    yet)."""
    LM = L * M
    return money * theta / (LM * (LM + G)) if LM > 0.0 else 0.0


@njit(cache=True)
def coin_step(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
              val: np.ndarray, y: float, weight: float, loss: int, tau: float,
              hp: np.ndarray) -> tuple[float, float]:
    """Coin betting, VW ``--coin``. V = (w, θ, G, M, Wealth, L); S = (N, T): Σ_t weight_t
    Σ_i (x_{t,i}/M_i)² and Σ_t weight_t; hp = (ε, β): the initial money of each coordinate and
    the least Lipschitz constant assumed."""
    w, theta, G, Mx, wealth, L = V[0, k], V[1, k], V[2, k], V[3, k], V[4, k], V[5, k]
    eps, beta = hp[0], hp[1]
    raw, norm = 0.0, 0.0
    for j in range(idx.shape[0]):  # predict: M_i ← max(M_i, |x_i|); ŷ = Σ w_i x_i / mean
        i, x = idx[j], val[j]
        Mx[i] = max(Mx[i], abs(x))
        raw += kt_bet(eps + wealth[i], theta[i], G[i], L[i], Mx[i]) * x
        norm += (x / Mx[i]) ** 2
    S[k, 0] += weight * norm
    S[k, 1] += weight
    mean = (S[k, 0] + NORM_FLOOR) / S[k, 1] if S[k, 1] > 0.0 else 1.0
    y_hat = raw / mean
    ell, g = loss_and_derivative(loss, y, y_hat, tau)
    g *= weight
    for j in range(idx.shape[0]):  # update: L_i first, then the bet the wealth is charged for
        i = idx[j]
        gx = g * val[j]
        if abs(g) > L[i]:
            L[i] = max(abs(g), beta)  # L_i ← max(β, |g|) when |g| exceeds it
        bet = kt_bet(eps + wealth[i], theta[i], G[i], L[i], Mx[i])
        theta[i] -= gx  # θ_i ← θ_i − g x_i
        G[i] += abs(gx)  # G_i ← G_i + |g x_i|
        wealth[i] -= gx * bet  # Wealth_i ← Wealth_i − g x_i w_i
        w[i] = bet / mean  # the weight VW stores (ŷ = Σ w_i x_i had it predicted)
    return y_hat, weight * ell
