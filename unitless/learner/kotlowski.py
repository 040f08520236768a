"""Kotłowski, *Scale-Invariant Unconstrained Online Learning* (ALT 2017): Alg. 1 (coordinate-wise)
and Alg. 2 (full-matrix, O(d²) per example).

Shared step signature: see ``normalized.py``. Exponents are capped at 700 so that a weight
overflows to a large finite number instead of inf (e^700 ≈ 1e304); the papers' analysis keeps
them far below that on real data.
"""
import math

import numpy as np
from numba import njit

from .losses import loss_and_derivative

MAX_EXPONENT = 700.0
# x⊥ counts as 0 when ‖x⊥‖ ≤ PERP_TOLERANCE ‖x‖ (x lies in the range of S already).
PERP_TOLERANCE = 1e-9


@njit(cache=True)
def kotlowski1_step(V, M, S, k, idx, val, y, weight, loss, tau, hp):
    """Kotłowski Alg. 1. V = (w, s², h); S = (t, d); hp = (α,).

    d is the number of features seen so far (d_t, this example's included), not the hashed
    dimension 2^bits: the paper's d is the number of features, and the result must not depend on
    --bits (README "Choices made").
    """
    w, s2, h = V[0, k], V[1, k], V[2, k]
    alpha = hp[0]
    S[k, 0] += 1.0
    t = S[k, 0]
    for j in range(idx.shape[0]):
        i, x = idx[j], val[j]
        if s2[i] == 0.0:
            S[k, 1] += 1.0  # d_t counts feature i from its first non-zero value
        s2[i] += x * x  # 1. s_i² ← s_i² + x_{t,i}²
    d = S[k, 1]
    y_hat = 0.0
    for j in range(idx.shape[0]):
        i, x = idx[j], val[j]
        # 2. w_i = h_i/(α t d s_i²) · exp((h_i² + x_{t,i}²)/(2α s_i²))
        exponent = min((h[i] * h[i] + x * x) / (2.0 * alpha * s2[i]), MAX_EXPONENT)
        w[i] = h[i] / (alpha * t * d * s2[i]) * math.exp(exponent)
        y_hat += w[i] * x
    ell, g = loss_and_derivative(loss, y, y_hat, tau)
    g *= weight
    for j in range(idx.shape[0]):  # 3. h_i ← h_i − g x_{t,i}
        h[idx[j]] -= g * val[j]
    return y_hat, weight * ell


@njit(cache=True)
def _matvec(A, x):
    out = np.zeros(x.shape[0])
    for r in range(x.shape[0]):
        acc = 0.0
        for c in range(x.shape[0]):
            acc += A[r, c] * x[c]
        out[r] = acc
    return out


@njit(cache=True)
def _dot(a, b):
    acc = 0.0
    for i in range(a.shape[0]):
        acc += a[i] * b[i]
    return acc


@njit(cache=True)
def kotlowski2_step(V, M, S, k, idx, val, y, weight, loss, tau, hp):
    """Kotłowski Alg. 2. M = (S†, P); V = (w, h, D); S = (ν,); hp = (α,).

    Alg. 2 is invariant under any fixed invertible map, so it runs on z = D⁻¹x where D_i is the
    first non-zero |x_i| seen (then frozen): the same algorithm on a fixed linear image of the
    stream, whose S† stays well-conditioned when raw feature scales differ by 10¹². S†, P and h
    live in z-coordinates; w = D⁻¹ η S† h is the weight on raw x, so ŷ = wᵀx.
    """
    S_pinv, P = M[0, k], M[1, k]
    w, h, D = V[0, k], V[1, k], V[2, k]
    alpha = hp[0]
    d = w.shape[0]
    x = np.zeros(d)
    for j in range(idx.shape[0]):
        i = idx[j]
        if D[i] == 0.0:
            D[i] = abs(val[j])
        x[i] += val[j] / D[i]  # x here is z = D⁻¹ x_t
    # 1. rank-one update of S† for S ← S + x xᵀ (Lemma 7, App. E)
    x_perp = x - _matvec(P, x)  # x⊥ = (I − P) x
    u = _matvec(S_pinv, x)
    beta = 1.0 + _dot(x, u)  # β = 1 + xᵀ S†_old x
    perp2 = _dot(x_perp, x_perp)
    if perp2 <= (PERP_TOLERANCE * PERP_TOLERANCE) * _dot(x, x):
        for r in range(d):  # S† ← S† − S† x xᵀ S† / β
            for c in range(d):
                S_pinv[r, c] -= u[r] * u[c] / beta
    else:
        # S† ← S† − (S† x x⊥ᵀ + x⊥ xᵀ S†)/‖x⊥‖² + β x⊥ x⊥ᵀ/‖x⊥‖⁴ ; P ← P + x⊥ x⊥ᵀ/‖x⊥‖²
        for r in range(d):
            for c in range(d):
                S_pinv[r, c] += ((beta * x_perp[r] * x_perp[c] / perp2
                                  - u[r] * x_perp[c] - x_perp[r] * u[c]) / perp2)
                P[r, c] += x_perp[r] * x_perp[c] / perp2
    # 2. η = (1/α) exp((hᵀ S† h − ν)/(2α)) ; w = η S† h ; ŷ = wᵀx
    Sh = _matvec(S_pinv, h)
    eta = math.exp(min((_dot(h, Sh) - S[k, 0]) / (2.0 * alpha), MAX_EXPONENT)) / alpha
    y_hat = 0.0
    for i in range(d):
        y_hat += eta * Sh[i] * x[i]
        w[i] = eta * Sh[i] / D[i] if D[i] > 0.0 else 0.0
    ell, g = loss_and_derivative(loss, y, y_hat, tau)
    g *= weight
    # 3. h ← h − g x ; ν ← ν + g² xᵀ S† x (S† after step 1)
    for i in range(d):
        h[i] -= g * x[i]
    S[k, 0] += g * g * _dot(x, _matvec(S_pinv, x))
    return y_hat, weight * ell
