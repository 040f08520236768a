"""Kempka & Kotłowski (seminar slides; ICML 2019): ScInOL1 and ScInOL2, no learning rate.

Shared step signature: see ``normalized.py``. A coordinate whose value is 0 in this example is
not touched (and is not passed in: examples carry only non-zero features).
"""
import math

import numpy as np
from numba import njit

MAX_EXPONENT = 700.0


@njit(cache=True)
def scinol1_predict(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                    val: np.ndarray, hp: np.ndarray, memo: np.ndarray) -> float:
    """ScInOL1(ε), steps 1-2. V = (w, S², G, M, β); S = (t,); hp = (ε,)."""
    w, S2, G, Mx, beta = V[0, k], V[1, k], V[2, k], V[3, k], V[4, k]
    eps = hp[0]
    S[k, 0] += 1.0
    t = S[k, 0]
    y_hat = 0.0
    for j in range(idx.shape[0]):
        i, x = idx[j], val[j]
        Mx[i] = max(Mx[i], abs(x))  # 1. M_i ← max(M_i, |x_{t,i}|)
        scale2 = S2[i] + Mx[i] * Mx[i]
        beta[i] = min(beta[i], eps * scale2 / (x * x * t))  # β_i ← min(β_i, ε(S_i²+M_i²)/(x² t))
        root = math.sqrt(scale2)
        theta = G[i] / root  # 2. θ_i = G_i/√(S_i²+M_i²)
        # w_i = β_i sign(θ_i)/(2√(S_i²+M_i²)) (e^{|θ_i|/2} − 1)
        w[i] = (beta[i] * math.copysign(1.0, theta) / (2.0 * root)
                * math.expm1(min(abs(theta) / 2.0, MAX_EXPONENT)))
        y_hat += w[i] * x
    return y_hat


@njit(cache=True)
def scinol1_update(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                   val: np.ndarray, g: float, weight: float, hp: np.ndarray,
                   memo: np.ndarray) -> None:
    """ScInOL1(ε), step 3."""
    S2, G = V[1, k], V[2, k]
    g *= weight
    for j in range(idx.shape[0]):  # 3. G_i ← G_i − g x ; S_i² ← S_i² + (g x)²
        i = idx[j]
        gx = g * val[j]
        G[i] -= gx
        S2[i] += gx * gx


@njit(cache=True)
def scinol2_predict(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                    val: np.ndarray, hp: np.ndarray, memo: np.ndarray) -> float:
    """ScInOL2(ε), steps 1-2. V = (w, S², G, M, η); hp = (ε,) (ε is η's initial value);
    memo: the bets w_{t,i}."""
    w, S2, G, Mx, eta = V[0, k], V[1, k], V[2, k], V[3, k], V[4, k]
    y_hat = 0.0
    for j in range(idx.shape[0]):
        i, x = idx[j], val[j]
        Mx[i] = max(Mx[i], abs(x))  # 1. M_i ← max(M_i, |x_{t,i}|)
        root = math.sqrt(S2[i] + Mx[i] * Mx[i])
        theta = G[i] / root  # 2. θ_i = G_i/√(S_i²+M_i²)
        # w_i = sign(θ_i) min(|θ_i|, 1)/(2√(S_i²+M_i²)) η_i
        w[i] = math.copysign(min(abs(theta), 1.0), theta) / (2.0 * root) * eta[i]
        memo[j] = w[i]
        y_hat += w[i] * x
    return y_hat


@njit(cache=True)
def scinol2_update(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                   val: np.ndarray, g: float, weight: float, hp: np.ndarray,
                   memo: np.ndarray) -> None:
    """ScInOL2(ε), step 3."""
    S2, G, eta = V[1, k], V[2, k], V[4, k]
    g *= weight
    for j in range(idx.shape[0]):  # 3. G −= g x ; S² += (g x)² ; η_i −= g x w_{t,i}
        i = idx[j]
        gx = g * val[j]
        G[i] -= gx
        S2[i] += gx * gx
        eta[i] -= gx * memo[j]
