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


@njit(cache=True)
def kotlowski1_step(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                    val: np.ndarray, y: float, weight: float, loss: int, tau: float,
                    hp: np.ndarray) -> tuple[float, float]:
    """Kotłowski Alg. 1. V = (w, s², h); S = (t, d); hp = (α,).

    d is the number of features seen so far (d_t, this example's included), not the hashed
    dimension 2^bits: the paper's d is the number of features, and the result must not depend on
    --bits (docs/design.md "Choices made").
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
def _dot(a, b):
    acc = 0.0
    for i in range(a.shape[0]):
        acc += a[i] * b[i]
    return acc


# Kotłowski Alg. 2 works with a numerical range of S: a direction of S counts when its eigenvalue
# exceeds RANGE_RCOND · tr(S) (the pinv cut-off; tr(S) ≥ λ_max, and S's rounding noise lies near
# 1e-16 · tr(S)). x⊥ counts as 0 when the eigenvalue it would add, ‖x⊥‖²/β (the Schur
# complement of S + x xᵀ along x⊥), is below that cut-off.
RANGE_RCOND = 1e-12
# A rank-one step that adds a direction with ‖x⊥‖ ≪ ‖x‖ multiplies the error of P by ‖x‖/‖x⊥‖
# (and of S† by its square): below this ‖x⊥‖²/‖x‖², S† and P are recomputed from S instead.
REFACTOR_PERP = 1e-6
# ... and when the mass of S outside range(P), tr(S) − tr(P S), exceeds this · tr(S): parts of x
# dropped as "in range" have added up to a direction, or P has drifted from a projector.
REFACTOR_MASS = 1e-8


@njit(cache=True)
def _jacobi_eigh(A):
    """Eigenvalues and eigenvectors (columns) of the symmetric A by cyclic Jacobi rotations
    (accurate to rounding relative to each eigenvalue, tiny ones included; numba's own
    np.linalg.eigh needs SciPy). A is overwritten."""
    n = A.shape[0]
    V = np.eye(n)
    floor = 0.0
    for i in range(n):
        floor += abs(A[i, i])
    floor *= 1e-20  # off-diagonal entries below this are rounding noise of S
    for sweep in range(60):
        rotated = False
        for p in range(n - 1):
            for q in range(p + 1, n):
                apq = A[p, q]
                if abs(apq) <= floor or abs(apq) <= 1e-17 * math.sqrt(abs(A[p, p] * A[q, q])):
                    A[p, q] = 0.0
                    A[q, p] = 0.0
                    continue
                rotated = True
                theta = (A[q, q] - A[p, p]) / (2.0 * apq)
                t = 1.0 / (abs(theta) + math.sqrt(theta * theta + 1.0))
                if theta < 0.0:
                    t = -t
                c = 1.0 / math.sqrt(t * t + 1.0)
                s = t * c
                for k in range(n):
                    akp, akq = A[k, p], A[k, q]
                    A[k, p] = c * akp - s * akq
                    A[k, q] = s * akp + c * akq
                for k in range(n):
                    apk, aqk = A[p, k], A[q, k]
                    A[p, k] = c * apk - s * aqk
                    A[q, k] = s * apk + c * aqk
                A[p, q] = 0.0
                A[q, p] = 0.0
                for k in range(n):
                    vkp, vkq = V[k, p], V[k, q]
                    V[k, p] = c * vkp - s * vkq
                    V[k, q] = s * vkp + c * vkq
        if not rotated:
            break
    lam = np.empty(n)
    for i in range(n):
        lam[i] = A[i, i]
    return lam, V


@njit(cache=True)
def _refactor(S_pinv, P, S, act, trace):
    """S† and P = S S† recomputed from S (on the coordinates seen, ``act``) by an eigendecomposition,
    keeping the eigenvalues above RANGE_RCOND · tr(S); the result is exactly symmetric."""
    n = act.shape[0]
    A = np.empty((n, n))
    for a in range(n):
        for b in range(n):
            A[a, b] = S[act[a], act[b]]
    lam, U = _jacobi_eigh(A)
    cut = RANGE_RCOND * trace
    for a in range(n):
        for b in range(a, n):
            sp = 0.0
            pp = 0.0
            for j in range(n):
                if lam[j] > cut:
                    uu = U[a, j] * U[b, j]
                    sp += uu / lam[j]
                    pp += uu
            S_pinv[act[a], act[b]] = sp
            S_pinv[act[b], act[a]] = sp
            P[act[a], act[b]] = pp
            P[act[b], act[a]] = pp


@njit(cache=True)
def _sparse_matvec(A, act, nz, x):
    """A x on the coordinates ``act`` for x non-zero only on ``nz``."""
    out = np.zeros(x.shape[0])
    for a in range(act.shape[0]):
        r = act[a]
        acc = 0.0
        for j in range(nz.shape[0]):
            acc += A[r, nz[j]] * x[nz[j]]
        out[r] = acc
    return out


@njit(cache=True)
def kotlowski2_step(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                    val: np.ndarray, y: float, weight: float, loss: int, tau: float,
                    hp: np.ndarray) -> tuple[float, float]:
    """Kotłowski Alg. 2. M = (S†, P, S); V = (w, h, D); S = (ν,); hp = (α,).

    Alg. 2 is invariant under any fixed invertible map, so it runs on z = D⁻¹x where D_i is the
    first non-zero |x_i| seen (then frozen): the same algorithm on a fixed linear image of the
    stream, whose S† stays well-conditioned when raw feature scales differ by 10¹². S†, P, S and
    h live in z-coordinates; w = D⁻¹ η S† h is the weight on raw x, so ŷ = wᵀx.

    S† and P follow S ← S + z zᵀ by the paper's rank-one updates (Lemma 7, App. E); S itself is
    kept too, and S† and P are recomputed from it exactly when a rank-one step would amplify
    their rounding (a new direction nearly inside the range) or when S has mass outside the range
    of P (module constants). Everything runs on the coordinates seen so far, so the result does
    not depend on the model's dimension.
    """
    S_pinv, P, Sm = M[0, k], M[1, k], M[2, k]
    w, h, D = V[0, k], V[1, k], V[2, k]
    alpha = hp[0]
    d = w.shape[0]
    x = np.zeros(d)
    for j in range(idx.shape[0]):
        i = idx[j]
        if D[i] == 0.0:
            D[i] = abs(val[j])
        x[i] += val[j] / D[i]  # x here is z = D⁻¹ x_t
    n_act = 0
    for i in range(d):
        if D[i] > 0.0:
            n_act += 1
    act = np.empty(n_act, dtype=np.int64)  # the coordinates seen so far, in index order
    n_act = 0
    for i in range(d):
        if D[i] > 0.0:
            act[n_act] = i
            n_act += 1
    n_nz = 0
    for i in range(d):
        if x[i] != 0.0:
            n_nz += 1
    nz = np.empty(n_nz, dtype=np.int64)  # this example's non-zero coordinates
    n_nz = 0
    for i in range(d):
        if x[i] != 0.0:
            nz[n_nz] = i
            n_nz += 1
    # S ← S + x xᵀ (kept exactly, for the recomputations)
    for a in range(n_nz):
        for b in range(n_nz):
            Sm[nz[a], nz[b]] += x[nz[a]] * x[nz[b]]
    trace = 0.0
    for a in range(n_act):
        trace += Sm[act[a], act[a]]
    # 1. rank-one update of S† for S ← S + x xᵀ (Lemma 7, App. E)
    Px = _sparse_matvec(P, act, nz, x)
    u = _sparse_matvec(S_pinv, act, nz, x)
    x_perp = x - Px  # x⊥ = (I − P) x
    beta = 1.0 + _dot(x, u)  # β = 1 + xᵀ S†_old x
    perp2 = 0.0
    for a in range(n_act):
        perp2 += x_perp[act[a]] * x_perp[act[a]]
    refactor = False
    if perp2 <= RANGE_RCOND * trace * beta:  # x⊥ = 0: S† ← S† − S† x xᵀ S† / β
        # (each product written so that entries (r, c) and (c, r) round alike: S† stays
        # exactly symmetric, updated row by row)
        for a in range(n_act):
            r = act[a]
            for c in range(d):  # u is 0 off the coordinates seen: those entries stay as they are
                S_pinv[r, c] -= (u[r] * u[c]) / beta
    elif perp2 < REFACTOR_PERP * _dot(x, x):
        refactor = True
    else:
        # S† ← S† − (S† x x⊥ᵀ + x⊥ xᵀ S†)/‖x⊥‖² + β x⊥ x⊥ᵀ/‖x⊥‖⁴ ; P ← P + x⊥ x⊥ᵀ/‖x⊥‖²
        for a in range(n_act):
            r = act[a]
            for c in range(d):  # x⊥ and u are 0 off the coordinates seen
                pp = x_perp[r] * x_perp[c] / perp2
                S_pinv[r, c] += (beta * pp - (u[r] * x_perp[c] + x_perp[r] * u[c])) / perp2
                P[r, c] += pp
    if not refactor:
        inside = 0.0  # tr(P S)
        for a in range(n_act):
            r = act[a]
            for c in range(d):
                inside += P[r, c] * Sm[r, c]  # S and P are symmetric
        refactor = trace - inside > REFACTOR_MASS * trace
    if refactor:
        _refactor(S_pinv, P, Sm, act, trace)
    # 2. η = (1/α) exp((hᵀ S† h − ν)/(2α)) ; w = η S† h ; ŷ = wᵀx
    Sh = np.zeros(d)
    hSh = 0.0
    for a in range(n_act):
        r = act[a]
        acc = 0.0
        for c in range(d):
            acc += S_pinv[r, c] * h[c]
        Sh[r] = acc
        hSh += h[r] * acc
    eta = math.exp(min((hSh - S[k, 0]) / (2.0 * alpha), MAX_EXPONENT)) / alpha
    y_hat = 0.0
    for a in range(n_act):
        i = act[a]
        y_hat += eta * Sh[i] * x[i]
        w[i] = eta * Sh[i] / D[i]
    ell, g = loss_and_derivative(loss, y, y_hat, tau)
    g *= weight
    # 3. h ← h − g x ; ν ← ν + g² xᵀ S† x (S† after step 1)
    for j in range(n_nz):
        h[nz[j]] -= g * x[nz[j]]
    S[k, 0] += g * g * _dot(x, _sparse_matvec(S_pinv, act, nz, x))
    return y_hat, weight * ell
