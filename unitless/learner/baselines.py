"""Baselines the seeds compare against; none of them is scale-invariant.

Shared step signature: see ``normalized.py``. Adam and COCOB update only the coordinates present
in the example (the usual sparse/lazy form); on dense data without zeros this is plain Adam/COCOB.
"""
import math

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _dot(w, idx, val):
    y_hat = 0.0
    for j in range(idx.shape[0]):
        y_hat += w[idx[j]] * val[j]
    return y_hat


@njit(cache=True)
def sgd_predict(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                val: np.ndarray, hp: np.ndarray, memo: np.ndarray) -> float:
    """SGD with η_t = η/√t. V = (w,); S = (t,); hp = (η,)."""
    S[k, 0] += 1.0
    return _dot(V[0, k], idx, val)


@njit(cache=True)
def sgd_update(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
               val: np.ndarray, g: float, weight: float, hp: np.ndarray, memo: np.ndarray) -> None:
    w = V[0, k]
    rate = hp[0] / math.sqrt(S[k, 0]) * weight * g
    for j in range(idx.shape[0]):  # w ← w − (η/√t) g x
        w[idx[j]] -= rate * val[j]


@njit(cache=True)
def adagrad_predict(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                    val: np.ndarray, hp: np.ndarray, memo: np.ndarray) -> float:
    """AdaGrad (Duchi et al. 2011), diagonal. V = (w, G); hp = (η,)."""
    return _dot(V[0, k], idx, val)


@njit(cache=True)
def adagrad_update(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                   val: np.ndarray, g: float, weight: float, hp: np.ndarray,
                   memo: np.ndarray) -> None:
    w, G = V[0, k], V[1, k]
    g *= weight
    if g != 0.0:
        for j in range(idx.shape[0]):  # G_i += (g x_i)² ; w_i −= η g x_i/√G_i
            i = idx[j]
            gx = g * val[j]
            G[i] += gx * gx
            if G[i] > 0.0:  # (g x_i)² can underflow to 0 when the loss saturates
                w[i] -= hp[0] * gx / math.sqrt(G[i])


@njit(cache=True)
def adam_predict(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                 val: np.ndarray, hp: np.ndarray, memo: np.ndarray) -> float:
    """Adam (Kingma & Ba 2015). V = (w, m, v); S = (t,); hp = (η, β1, β2, ε)."""
    S[k, 0] += 1.0
    return _dot(V[0, k], idx, val)


@njit(cache=True)
def adam_update(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                val: np.ndarray, g: float, weight: float, hp: np.ndarray,
                memo: np.ndarray) -> None:
    w, m, v = V[0, k], V[1, k], V[2, k]
    eta, beta1, beta2, eps = hp[0], hp[1], hp[2], hp[3]
    t = S[k, 0]
    g *= weight
    c1, c2 = 1.0 - beta1 ** t, 1.0 - beta2 ** t
    for j in range(idx.shape[0]):
        i = idx[j]
        gx = g * val[j]
        m[i] = beta1 * m[i] + (1.0 - beta1) * gx
        v[i] = beta2 * v[i] + (1.0 - beta2) * gx * gx
        w[i] -= eta * (m[i] / c1) / (math.sqrt(v[i] / c2) + eps)


@njit(cache=True)
def cocob_predict(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                  val: np.ndarray, hp: np.ndarray, memo: np.ndarray) -> float:
    """COCOB-Backprop (Orabona & Tommasi 2017, Alg. 2), w₁ = 0.

    V = (w, L, G, Reward, θ) with L starting at 1e-8; hp = (α,). memo: the bets w_{t,i}.
    """
    w = V[0, k]
    for j in range(idx.shape[0]):
        memo[j] = w[idx[j]]
    return _dot(w, idx, val)


@njit(cache=True)
def cocob_update(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                 val: np.ndarray, g: float, weight: float, hp: np.ndarray,
                 memo: np.ndarray) -> None:
    w, L, G, reward, theta = V[0, k], V[1, k], V[2, k], V[3, k], V[4, k]
    alpha = hp[0]
    g *= weight
    for j in range(idx.shape[0]):
        i = idx[j]
        gx = g * val[j]
        L[i] = max(L[i], abs(gx))
        G[i] += abs(gx)
        reward[i] = max(reward[i] - memo[j] * gx, 0.0)  # the bet w_{t,i} ŷ was made with
        theta[i] += gx
        # w_{t+1,i} = −θ_i/(L_i max(G_i + L_i, α L_i)) (L_i + Reward_i)
        w[i] = -theta[i] / (L[i] * max(G[i] + L[i], alpha * L[i])) * (L[i] + reward[i])
