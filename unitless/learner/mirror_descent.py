"""Orabona, Crammer, Cesa-Bianchi, *A Generalized Online Mirror Descent* (MLJ 2015), Sec. 5:
the scale-invariant OMD learners. θ = −η Σ g_s x_s is the dual vector, b_i = max |x_i| seen.

Shared step signature: see ``normalized.py``.
"""
import math

import numpy as np
from numba import njit

from .losses import loss_and_derivative


@njit(cache=True)
def omd_diagonal_step(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                      val: np.ndarray, y: float, weight: float, loss: int, tau: float,
                      hp: np.ndarray) -> tuple[float, float]:
    """Scale-invariant AdaGrad (regulariser 13). V = (w, θ, b, Q); S = (d,); hp = (η, L).

    Q_j = Σ_{s<t} (g_s x_{s,j}/b_{s,j})². d is the number of features seen so far (this
    example's included), not the hashed dimension 2^bits (docs/design.md "Choices made").
    """
    w, theta, b, Q = V[0, k], V[1, k], V[2, k], V[3, k]
    eta, L = hp[0], hp[1]
    for j in range(idx.shape[0]):
        i = idx[j]
        if b[i] == 0.0:
            S[k, 0] += 1.0  # d_t counts feature i from its first non-zero value
        b[i] = max(b[i], abs(val[j]))  # b_{t,i} = max_{s≤t} |x_{s,i}|
    sqrt_d = math.sqrt(S[k, 0])
    y_hat = 0.0
    for j in range(idx.shape[0]):
        i, x = idx[j], val[j]
        # w_{t,j} = θ_j / (b_{t,j}² √d √(L² + Σ_{s<t} (g_s x_{s,j}/b_{s,j})²))
        w[i] = theta[i] / (b[i] * b[i] * sqrt_d * math.sqrt(L * L + Q[i]))
        y_hat += w[i] * x
    ell, g = loss_and_derivative(loss, y, y_hat, tau)
    g *= weight
    for j in range(idx.shape[0]):
        i = idx[j]
        gx = g * val[j]
        theta[i] -= eta * gx  # θ_{t+1} = θ_t − η g_t x_t
        Q[i] += (gx / b[i]) ** 2
    return y_hat, weight * ell


@njit(cache=True)
def omd_pnorm_step(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                   val: np.ndarray, y: float, weight: float, loss: int, tau: float,
                   hp: np.ndarray) -> tuple[float, float]:
    """p-norm scale-invariant OMD (regulariser 12). V = (w, θ, b); S = (m, B); hp = (η, L).

    m = max ‖x_s‖₀ so far, B = Σ_{s<t} (p_s − 1)(Σ_i (|g_s x_{s,i}|/b_{s,i})^{p_s})^{2/p_s}.
    Each prediction needs Σ_i (|θ_i|/b_i)^p over every feature: O(d) per example.
    """
    w, theta, b = V[0, k], V[1, k], V[2, k]
    eta, L = hp[0], hp[1]
    for j in range(idx.shape[0]):
        i = idx[j]
        b[i] = max(b[i], abs(val[j]))
    S[k, 0] = max(S[k, 0], float(idx.shape[0]))  # m_t = max_{s≤t} ‖x_s‖₀
    p = max(2.0, 2.0 * math.log(S[k, 0]))  # p_t = 2 ln m_t, guarded to p ≥ 2
    beta = math.sqrt(math.e * L * L * (p - 1.0) + S[k, 1])
    norm = 0.0  # Σ_i (|θ_i|/b_{t,i})^{p_t}, terms with b = 0 are 0
    for i in range(theta.shape[0]):
        if b[i] > 0.0 and theta[i] != 0.0:
            norm += (abs(theta[i]) / b[i]) ** p
    y_hat = 0.0
    for j in range(idx.shape[0]):
        i, x = idx[j], val[j]
        if norm > 0.0 and theta[i] != 0.0:
            # w_{t,j} = (Σ_i (|θ_i|/b_i)^p)^{2/p−1} |θ_j|^{p−1} / (β_t (p−1) b_j^p) sign(θ_j)
            w[i] = (norm ** (2.0 / p - 1.0) * abs(theta[i]) ** (p - 1.0)
                    / (beta * (p - 1.0) * b[i] ** p) * math.copysign(1.0, theta[i]))
        else:
            w[i] = 0.0
        y_hat += w[i] * x
    ell, g = loss_and_derivative(loss, y, y_hat, tau)
    g *= weight
    grad_norm = 0.0
    for j in range(idx.shape[0]):
        i = idx[j]
        gx = g * val[j]
        theta[i] -= eta * gx
        grad_norm += (abs(gx) / b[i]) ** p
    if grad_norm > 0.0:
        S[k, 1] += (p - 1.0) * grad_norm ** (2.0 / p)
    return y_hat, weight * ell
