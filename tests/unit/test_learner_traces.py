"""Every algorithm checked against a hand-computed trace of a few examples derived from the formulas.

For each learner in ``unitless.learner.ALGORITHMS`` this file holds a small, independent plain-Python
reference written directly from /work/shared/ALGORITHMS.md (variable names as there, one comment per
line citing the step), plus the conventions of docs/design.md "Choices made":

* a zero feature value is skipped entirely (the reference loops over the non-zero features only);
* sNAG keeps s_i = Σ x_i² (including the current x_i²) and uses √(s_i/t_i) in place of NAG's s_i,
  t_i = t − t0_i + 1 the trials since feature i first appeared (t0_i);
* Kotłowski Alg. 2 runs on z = D⁻¹x, D_i the first non-zero |x_i| seen; exponents capped at 700;
* OMD (diagonal) and Kotłowski Alg. 1 use d = the number of features seen so far (x_t's
  included), not the model dimension; OMD uses L = 1; p-norm OMD uses p_t = max(2, 2 ln m_t);
* Adam and COCOB touch only the coordinates present in the example;
* coin betting (not in ALGORITHMS.md) is written from Vowpal Wabbit's ftrl.cc, its names as there.

Weights that an algorithm computes from x_t at prediction time (OMD, Kotłowski, ScInOL) are stored
as last computed: a coordinate absent from x_t keeps the w_i it had when it was last present.

The library (``learn`` on ``dense_batch(X, y, bias=False)``) and the reference must agree on the
predictions made before each update, the losses, and every final state array named in the registry
(state.V / state.S / state.M) to 1e-12 relative. NAG and ScInOL2 also get a two-example trace whose
expected numbers are written out as literals, with the arithmetic in comments.
"""
import math

import numpy as np
import pytest

from unitless.learner import ALGORITHMS, dense_batch, learn, new_state

RTOL = 1e-12
# docs/design.md "Choices made": exponents in Kotłowski's algorithms and ScInOL1 capped at 700
CAP = 700.0


# ---------------------------------------------------------------------------------------------
# Losses ℓ(y, ŷ) and g = ∂ℓ/∂ŷ, from the "Common protocol" paragraph of ALGORITHMS.md.
# ---------------------------------------------------------------------------------------------

def loss_value(loss, y, y_hat):
    if loss == "logistic":
        return float(np.logaddexp(0.0, -y * y_hat))  # log(1 + e^{-yŷ})
    if loss == "hinge":
        return max(0.0, 1.0 - y * y_hat)  # max(0, 1 − yŷ)
    if loss == "squared":
        return (y_hat - y) ** 2  # (ŷ − y)²
    raise ValueError(loss)


def loss_derivative(loss, y, y_hat):
    if loss == "logistic":
        z = y * y_hat  # d/dŷ log(1 + e^{-yŷ}) = −y/(1 + e^{yŷ}) = −y e^{−z}/(1 + e^{−z}), z = yŷ
        return -y / (1.0 + math.exp(z)) if z <= 0 else -y * math.exp(-z) / (1.0 + math.exp(-z))
    if loss == "hinge":
        return -y if 1.0 - y * y_hat > 0.0 else 0.0  # d/dŷ max(0, 1 − yŷ)
    if loss == "squared":
        return 2.0 * (y_hat - y)  # d/dŷ (ŷ − y)²
    raise ValueError(loss)


def nonzero(x_t):
    """README: examples carry only their non-zero features; a zero value changes nothing."""
    return [i for i in range(len(x_t)) if x_t[i] != 0.0]


def sign(v):
    return float(v > 0) - float(v < 0)


# ---------------------------------------------------------------------------------------------
# Reference implementations. Each returns (ŷ per example, ℓ per example, {state name: value}).
# ---------------------------------------------------------------------------------------------

def ref_ng(X, Y, loss, learning_rate=0.5):
    """NG, Ross et al. Alg. 1 (ALGORITHMS.md "NG")."""
    d = X.shape[1]
    eta = learning_rate
    w, s, N, t = np.zeros(d), np.zeros(d), 0.0, 0  # initially w_i = 0, s_i = 0, N = 0
    preds, losses = [], []
    for x, y in zip(X, Y):
        t += 1  # timestep t
        for i in nonzero(x):
            if abs(x[i]) > s[i]:  # 1. for each i with |x_i| > s_i
                w[i] = w[i] * s[i] ** 2 / x[i] ** 2  # 1. w_i ← w_i·s_i²/x_i²
                s[i] = abs(x[i])  # 1. s_i ← |x_i|
        y_hat = sum(w[i] * x[i] for i in nonzero(x))  # 2. ŷ = Σ w_i x_i
        N = N + sum(x[i] ** 2 / s[i] ** 2 for i in nonzero(x))  # 2. N ← N + Σ_i x_i²/s_i²
        g = loss_derivative(loss, y, y_hat)  # g = ∂ℓ/∂ŷ at ŷ
        for i in nonzero(x):
            w[i] = w[i] - eta * (t / N) * (1.0 / s[i] ** 2) * g * x[i]  # 3. w_i ← w_i − η_t (t/N)(1/s_i²) g x_i
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "s": s, "t": t, "N": N}


def ref_nag(X, Y, loss, learning_rate=0.5):
    """NAG, Ross et al. Alg. 2 (ALGORITHMS.md "NAG")."""
    d = X.shape[1]
    eta = learning_rate
    w, s, G, N, t = np.zeros(d), np.zeros(d), np.zeros(d), 0.0, 0  # all start at 0
    preds, losses = [], []
    for x, y in zip(X, Y):
        t += 1  # timestep t
        for i in nonzero(x):
            if abs(x[i]) > s[i]:  # 1. for each i with |x_i| > s_i
                w[i] = w[i] * s[i] / abs(x[i])  # 1. w_i ← w_i·s_i/|x_i|
                s[i] = abs(x[i])  # 1. s_i ← |x_i|
        y_hat = sum(w[i] * x[i] for i in nonzero(x))  # 2. ŷ = Σ w_i x_i
        N = N + sum(x[i] ** 2 / s[i] ** 2 for i in nonzero(x))  # 2. N ← N + Σ_i x_i²/s_i²
        g = loss_derivative(loss, y, y_hat)  # g = ∂ℓ/∂ŷ at ŷ
        for i in nonzero(x):
            G[i] = G[i] + (g * x[i]) ** 2  # 3. G_i ← G_i + (g x_i)²
            if g != 0.0:  # 3. (a zero gradient moves nothing; avoids 0/0 when G_i = 0)
                w[i] = w[i] - eta * math.sqrt(t / N) * g * x[i] / (s[i] * math.sqrt(G[i]))  # 3. w_i ← w_i − η√(t/N) g x_i/(s_i√G_i)
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "s": s, "G": G, "t": t, "N": N}


def ref_snag(X, Y, loss, learning_rate=0.5):
    """sNAG (Ross et al. Sec. 3): NAG with s_i = Σ x_i² and √(s_i/t_i) in place of s_i, t_i the
    trials since feature i first appeared (docs/design.md "Choices made")."""
    d = X.shape[1]
    eta = learning_rate
    w, s, G, N, t = np.zeros(d), np.zeros(d), np.zeros(d), 0.0, 0  # all start at 0
    t0 = np.zeros(d)  # t0_i = the trial feature i first appeared at (0: not yet)
    preds, losses = [], []
    for x, y in zip(X, Y):
        t += 1  # timestep t
        for i in nonzero(x):
            if t0[i] == 0:
                t0[i] = t  # first appearance
            s[i] = s[i] + x[i] ** 2  # sNAG: s_i = Σ x_i², including the current x_i²
        n = {i: t - t0[i] + 1 for i in nonzero(x)}  # t_i = trials since feature i appeared
        # (NAG's step 1 rescaling of w has no sNAG analogue: docs/design.md "Choices made")
        y_hat = sum(w[i] * x[i] for i in nonzero(x))  # 2. ŷ = Σ w_i x_i
        N = N + sum(x[i] ** 2 / math.sqrt(s[i] / n[i]) ** 2 for i in nonzero(x))  # 2. N ← N + Σ x_i²/(√(s_i/t_i))²
        g = loss_derivative(loss, y, y_hat)  # g = ∂ℓ/∂ŷ at ŷ
        for i in nonzero(x):
            G[i] = G[i] + (g * x[i]) ** 2  # 3. G_i ← G_i + (g x_i)²
            if g != 0.0:  # 3. (a zero gradient moves nothing)
                w[i] = w[i] - eta * math.sqrt(t / N) * g * x[i] / (math.sqrt(s[i] / n[i]) * math.sqrt(G[i]))  # 3. with √(s_i/t_i) for s_i
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "s": s, "G": G, "t0": t0, "t": t, "N": N}


def ref_omd_diagonal(X, Y, loss, learning_rate=1.0, lipschitz=1.0):
    """Scale-invariant OMD with regulariser (13) (ALGORITHMS.md "Diagonal"), d = the number of
    features seen so far."""
    n, dim = X.shape
    eta, L = learning_rate, lipschitz
    theta = np.zeros(dim)  # θ_1 = 0 (θ_t = −η Σ_{s<t} g_s x_s)
    b = np.zeros(dim)  # b_{t,i} = max_{s≤t} |x_{s,i}|
    Q = np.zeros(dim)  # Q_j = Σ_{s<t} (g_s x_{s,j}/b_{s,j})²
    w = np.zeros(dim)  # w_t = ∇f*_t(θ_t), stored as last computed
    preds, losses = [], []
    for x, y in zip(X, Y):
        for j in nonzero(x):
            b[j] = max(b[j], abs(x[j]))  # b_{t,j} includes x_t
        d = float(np.count_nonzero(b))  # d_t = features seen so far, x_t's included
        for j in nonzero(x):
            w[j] = theta[j] / (b[j] ** 2 * math.sqrt(d) * math.sqrt(L ** 2 + Q[j]))  # w_{t,j} = θ_j/(b_{t,j}²√d√(L² + Σ_{s<t}(g_s x_{s,j}/b_{s,j})²))
        y_hat = sum(w[j] * x[j] for j in nonzero(x))  # ŷ = w_tᵀx_t
        g = loss_derivative(loss, y, y_hat)  # g_t = ∂ℓ/∂ŷ
        for j in nonzero(x):
            theta[j] = theta[j] - eta * g * x[j]  # θ_{t+1} = θ_t − η g_t x_t
            Q[j] = Q[j] + (g * x[j] / b[j]) ** 2  # the sum now runs over s ≤ t, with b_{t,j}
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "theta": theta, "b": b, "Q": Q, "d": d}


def ref_omd_pnorm(X, Y, loss, learning_rate=1.0, lipschitz=1.0):
    """Scale-invariant OMD with regulariser (12) (ALGORITHMS.md "p-norm")."""
    n, d = X.shape
    eta, L = learning_rate, lipschitz
    theta, b, w = np.zeros(d), np.zeros(d), np.zeros(d)  # θ_1 = 0; b = running max |x|; w as last computed
    m = 0.0  # m_t = max_{s≤t} ‖x_s‖₀
    B = 0.0  # Σ_{s<t} (p_s − 1)(Σ_i (|g_s x_{s,i}|/b_{s,i})^{p_s})^{2/p_s}
    preds, losses = [], []
    for x, y in zip(X, Y):
        for i in nonzero(x):
            b[i] = max(b[i], abs(x[i]))  # b_{t,i} = max_{s≤t} |x_{s,i}|
        m = max(m, float(len(nonzero(x))))  # m_t = max_{s≤t} ‖x_s‖₀
        p = max(2.0, 2.0 * math.log(m))  # p_t = 2 ln m_t, guarded to p_t ≥ 2
        beta = math.sqrt(math.e * L ** 2 * (p - 1.0) + B)  # β_t = √(e L²(p_t−1) + Σ_{s<t} …)
        total = sum((abs(theta[i]) / b[i]) ** p for i in range(d) if b[i] > 0)  # Σ_i (|θ_i|/b_{t,i})^{p_t}; b = 0 terms are 0
        for j in nonzero(x):
            if theta[j] == 0.0:  # |θ_j|^{p−1} = 0 (and θ = 0 everywhere gives w = 0)
                w[j] = 0.0
            else:  # w_{t,j} = 1/(β_t(p_t−1)) (Σ)^{2/p_t−1} |θ_j|^{p_t−1}/b_{t,j}^{p_t} sign(θ_j)
                w[j] = (1.0 / (beta * (p - 1.0)) * total ** (2.0 / p - 1.0)
                        * abs(theta[j]) ** (p - 1.0) / b[j] ** p * sign(theta[j]))
        y_hat = sum(w[j] * x[j] for j in nonzero(x))  # ŷ = w_tᵀx_t
        g = loss_derivative(loss, y, y_hat)  # g_t = ∂ℓ/∂ŷ
        B = B + (p - 1.0) * sum((abs(g * x[i]) / b[i]) ** p for i in nonzero(x)) ** (2.0 / p)  # add the s = t term to β's sum
        for i in nonzero(x):
            theta[i] = theta[i] - eta * g * x[i]  # θ_{t+1} = θ_t − η g_t x_t
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "theta": theta, "b": b, "m": m, "B": B}


def ref_kotlowski1(X, Y, loss, alpha=1.5):
    """Kotłowski Alg. 1 (ALGORITHMS.md), d = the number of features seen so far."""
    n, dim = X.shape
    s2, h, w = np.zeros(dim), np.zeros(dim), np.zeros(dim)  # s_i² = 0, h_i = 0; w as last computed
    t = 0
    preds, losses = [], []
    for x, y in zip(X, Y):
        t += 1  # trial t
        for i in nonzero(x):
            s2[i] = s2[i] + x[i] ** 2  # 1. s_i² ← s_i² + x_{t,i}²
        d = float(np.count_nonzero(s2))  # d_t = features seen so far, x_t's included
        for i in nonzero(x):
            # (s_i² > 0 here since x_{t,i} ≠ 0) 2. w_i = h_i/(α t d s_i²)·exp((h_i² + x_{t,i}²)/(2α s_i²))
            w[i] = h[i] / (alpha * t * d * s2[i]) * math.exp(min((h[i] ** 2 + x[i] ** 2) / (2 * alpha * s2[i]), CAP))
        y_hat = sum(w[i] * x[i] for i in nonzero(x))  # 3. predict ŷ = Σ w_i x_{t,i}
        g = loss_derivative(loss, y, y_hat)  # g_t = ∂ℓ/∂ŷ
        for i in nonzero(x):
            h[i] = h[i] - g * x[i]  # 3. h_i ← h_i − g x_{t,i}
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "s2": s2, "h": h, "t": t, "d": d}


def ref_kotlowski2(X, Y, loss, alpha=1.5):
    """Kotłowski Alg. 2 on z = D⁻¹x. S† is recomputed from S = Σ z zᵀ with numpy.linalg.pinv
    (not by the rank-one update), and P = S S† is the projector onto range(S)."""
    n, d = X.shape
    D = np.zeros(d)  # D_i = first non-zero |x_i| seen (docs/design.md "Choices made")
    S = np.zeros((d, d))  # S = Σ z zᵀ
    h = np.zeros(d)  # h = −Σ g z
    nu = 0.0  # ν_0 = 0
    w = np.zeros(d)
    preds, losses = [], []
    for x, y in zip(X, Y):
        for i in nonzero(x):
            if D[i] == 0.0:
                D[i] = abs(x[i])  # D_i fixed at the first non-zero |x_i|
        z = np.array([x[i] / D[i] if x[i] != 0.0 else 0.0 for i in range(d)])  # z = D⁻¹x
        S = S + np.outer(z, z)  # 1. S ← S + z zᵀ
        S_pinv = np.linalg.pinv(S, rcond=1e-10)  # 1. S† of the updated S
        eta = (1.0 / alpha) * math.exp(min((h @ S_pinv @ h - nu) / (2 * alpha), CAP))  # 2. η = (1/α) exp((hᵀS†h − ν)/(2α))
        w_z = eta * S_pinv @ h  # 2. w = η S† h (weight on z)
        y_hat = float(w_z @ z)  # 2. ŷ = wᵀz (= wᵀx with w on raw x below)
        w = np.array([w_z[i] / D[i] if D[i] > 0 else 0.0 for i in range(d)])  # weight on raw x: D⁻¹ w_z
        g = loss_derivative(loss, y, y_hat)  # g_t = ∂ℓ/∂ŷ
        h = h - g * z  # 3. h ← h − g z
        nu = nu + g ** 2 * float(z @ S_pinv @ z)  # 3. ν ← ν + g² zᵀS†z (S† after step 1)
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    P = S @ np.linalg.pinv(S, rcond=1e-10)  # P = S S†, the projector onto range(S)
    return preds, losses, {"w": w, "h": h, "D": D, "nu": nu,
                           "S_pinv": np.linalg.pinv(S, rcond=1e-10), "P": P, "S": S}


def ref_scinol1(X, Y, loss, epsilon=1.0):
    """ScInOL1(ε) (ALGORITHMS.md, slides' algorithm box)."""
    n, d = X.shape
    S2, G, M = np.zeros(d), np.zeros(d), np.zeros(d)  # S_i² = G_i = M_i = 0
    beta = np.full(d, epsilon)  # β_i = ε
    w = np.zeros(d)
    t = 0
    preds, losses = [], []
    for x, y in zip(X, Y):
        t += 1  # t
        for i in nonzero(x):
            M[i] = max(M[i], abs(x[i]))  # 1. M_i ← max(M_i, |x_{t,i}|)
            beta[i] = min(beta[i], epsilon * (S2[i] + M[i] ** 2) / (x[i] ** 2 * t))  # 1. (x_{t,i} ≠ 0) β_i ← min(β_i, ε(S_i²+M_i²)/(x_{t,i}² t))
            theta = G[i] / math.sqrt(S2[i] + M[i] ** 2)  # 2. θ_i = G_i/√(S_i² + M_i²)
            w[i] = beta[i] * sign(theta) / (2 * math.sqrt(S2[i] + M[i] ** 2)) * (math.exp(min(abs(theta) / 2, CAP)) - 1)  # 2. w_i
        y_hat = sum(w[i] * x[i] for i in nonzero(x))  # 3. predict
        g = loss_derivative(loss, y, y_hat)  # g_t = ∂ℓ/∂ŷ
        for i in nonzero(x):
            G[i] = G[i] - g * x[i]  # 3. G_i ← G_i − g x_{t,i}
            S2[i] = S2[i] + (g * x[i]) ** 2  # 3. S_i² ← S_i² + (g x_{t,i})²
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "S2": S2, "G": G, "M": M, "beta": beta, "t": t}


def ref_scinol2(X, Y, loss, epsilon=1.0):
    """ScInOL2(ε) (ALGORITHMS.md, slides' algorithm box)."""
    n, d = X.shape
    S2, G, M = np.zeros(d), np.zeros(d), np.zeros(d)  # S_i² = G_i = M_i = 0
    eta = np.full(d, epsilon)  # η_i = ε
    w = np.zeros(d)
    preds, losses = [], []
    for x, y in zip(X, Y):
        for i in nonzero(x):
            M[i] = max(M[i], abs(x[i]))  # 1. M_i ← max(M_i, |x_{t,i}|)
            theta = G[i] / math.sqrt(S2[i] + M[i] ** 2)  # 2. θ_i = G_i/√(S_i² + M_i²)
            w[i] = sign(theta) * min(abs(theta), 1.0) / (2 * math.sqrt(S2[i] + M[i] ** 2)) * eta[i]  # 2. w_i
        y_hat = sum(w[i] * x[i] for i in nonzero(x))  # 3. predict
        g = loss_derivative(loss, y, y_hat)  # g_t = ∂ℓ/∂ŷ
        for i in nonzero(x):
            G[i] = G[i] - g * x[i]  # 3. G_i ← G_i − g x_{t,i}
            S2[i] = S2[i] + (g * x[i]) ** 2  # 3. S_i² ← S_i² + (g x_{t,i})²
            eta[i] = eta[i] - g * x[i] * w[i]  # 3. η_i ← η_i − g x_{t,i} w_i
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "S2": S2, "G": G, "M": M, "eta": eta}


def ref_sgd(X, Y, loss, learning_rate=0.1):
    """SGD with step size η/√t."""
    n, d = X.shape
    w, t = np.zeros(d), 0  # w_1 = 0
    preds, losses = [], []
    for x, y in zip(X, Y):
        t += 1  # t
        y_hat = float(w @ x)  # ŷ = wᵀx
        g = loss_derivative(loss, y, y_hat)  # g = ∂ℓ/∂ŷ
        w = w - learning_rate / math.sqrt(t) * g * x  # w ← w − (η/√t) g x
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "t": t}


def ref_adagrad(X, Y, loss, learning_rate=0.1):
    """Diagonal AdaGrad: G includes the current squared gradient."""
    n, d = X.shape
    w, G = np.zeros(d), np.zeros(d)  # w_1 = 0, G = 0
    preds, losses = [], []
    for x, y in zip(X, Y):
        y_hat = float(w @ x)  # ŷ = wᵀx
        g = loss_derivative(loss, y, y_hat)  # g = ∂ℓ/∂ŷ
        for i in nonzero(x):
            G[i] = G[i] + (g * x[i]) ** 2  # G_i ← G_i + (g x_i)²
            if g != 0.0:  # (a zero gradient moves nothing; avoids 0/0)
                w[i] = w[i] - learning_rate * g * x[i] / math.sqrt(G[i])  # w_i ← w_i − η g x_i/√G_i
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "G": G}


def ref_adam(X, Y, loss, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8):
    """Adam (Kingma & Ba 2015, Alg. 1) with bias correction; only coordinates with x_i ≠ 0 move."""
    n, d = X.shape
    w, m, v, t = np.zeros(d), np.zeros(d), np.zeros(d), 0  # m_0 = v_0 = 0, t = 0
    preds, losses = [], []
    for x, y in zip(X, Y):
        t += 1  # t ← t + 1
        y_hat = float(w @ x)  # ŷ = wᵀx
        g = loss_derivative(loss, y, y_hat)  # g = ∂ℓ/∂ŷ; gradient w.r.t. w_i is g x_i
        for i in nonzero(x):
            m[i] = beta1 * m[i] + (1 - beta1) * g * x[i]  # m_t = β1 m_{t−1} + (1−β1) g_t
            v[i] = beta2 * v[i] + (1 - beta2) * (g * x[i]) ** 2  # v_t = β2 v_{t−1} + (1−β2) g_t²
            m_hat = m[i] / (1 - beta1 ** t)  # m̂_t = m_t/(1 − β1^t)
            v_hat = v[i] / (1 - beta2 ** t)  # v̂_t = v_t/(1 − β2^t)
            w[i] = w[i] - learning_rate * m_hat / (math.sqrt(v_hat) + epsilon)  # θ_t = θ_{t−1} − α m̂_t/(√v̂_t + ε)
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "m": m, "v": v, "t": t}


def ref_cocob(X, Y, loss, alpha=100.0):
    """COCOB-Backprop, Orabona & Tommasi 2017, Alg. 2, with w_1 = 0 and L_0 = 1e-8.

    The paper's g_t is the *negative* subgradient; its θ is the sum of those. The library keeps
    θ as the sum of (positive) gradients, as the authors' TensorFlow code does: compared as −θ.
    """
    n, d = X.shape
    L = np.full(d, 1e-8)  # L_{0,i} = 1e-8
    G, Reward, theta = np.zeros(d), np.zeros(d), np.zeros(d)  # G_{0,i} = Reward_{0,i} = θ_{0,i} = 0
    w1 = np.zeros(d)  # w_1 = 0
    w = w1.copy()
    preds, losses = [], []
    for x, y in zip(X, Y):
        y_hat = float(w @ x)  # ŷ = w_tᵀx
        g = loss_derivative(loss, y, y_hat)  # ∂ℓ/∂ŷ
        for i in nonzero(x):
            g_ti = -g * x[i]  # line 4: negative stochastic subgradient g_{t,i}
            L[i] = max(L[i], abs(g_ti))  # line 6: L_{t,i} = max(L_{t−1,i}, |g_{t,i}|)
            G[i] = G[i] + abs(g_ti)  # line 7: G_{t,i} = G_{t−1,i} + |g_{t,i}|
            Reward[i] = max(Reward[i] + (w[i] - w1[i]) * g_ti, 0.0)  # line 8: Reward_{t,i}
            theta[i] = theta[i] + g_ti  # line 9: θ_{t,i} = θ_{t−1,i} + g_{t,i}
            w[i] = w1[i] + theta[i] / (L[i] * max(G[i] + L[i], alpha * L[i])) * (L[i] + Reward[i])  # line 10: w_{t+1,i}
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": w, "L": L, "G": G, "reward": Reward, "theta": -theta}


def ref_coin(X, Y, loss, epsilon=4.0, lipschitz=1.0):
    """Coin betting as Vowpal Wabbit's ``--coin`` runs it (ftrl.cc: inner_coin_betting_predict,
    coin_betting_predict, inner_coin_betting_update_after_prediction), in float64, unit weights."""
    n, d = X.shape
    alpha, beta = epsilon, lipschitz  # VW's ftrl_alpha (initial wealth), ftrl_beta
    W_XT, W_ZT, W_G2, W_MX, W_WE, W_MG = (np.zeros(d) for _ in range(6))  # VW's weight slots
    normalized_sum_norm_x, total_weight = 0.0, 0.0
    preds, losses = [], []
    for x, y in zip(X, Y):
        predict, normalized_squared_norm_x = 0.0, 0.0
        for i in nonzero(x):  # inner_coin_betting_predict
            w_mx = max(W_MX[i], abs(x[i]))
            w_xt = 0.0
            if W_MG[i] * w_mx > 0:
                w_xt = (alpha + W_WE[i]) / (W_MG[i] * w_mx * (W_MG[i] * w_mx + W_G2[i])) * W_ZT[i]
            predict += w_xt * x[i]
            normalized_squared_norm_x += (x[i] / w_mx) ** 2
        normalized_sum_norm_x += normalized_squared_norm_x  # coin_betting_predict (weight 1)
        total_weight += 1.0
        average_squared_norm_x = (normalized_sum_norm_x + 1e-6) / total_weight
        y_hat = predict / average_squared_norm_x  # ec.partial_prediction
        update = loss_derivative(loss, y, y_hat)  # d.update = ∂ℓ/∂ŷ × weight
        for i in nonzero(x):  # inner_coin_betting_update_after_prediction
            gradient = update * x[i]
            W_MX[i] = max(W_MX[i], abs(x[i]))
            if abs(update) > W_MG[i]:
                W_MG[i] = max(abs(update), beta)
            if W_MG[i] * W_MX[i] > 0:
                W_XT[i] = (alpha + W_WE[i]) / (W_MG[i] * W_MX[i] * (W_MG[i] * W_MX[i] + W_G2[i])) * W_ZT[i]
            else:
                W_XT[i] = 0.0
            W_ZT[i] += -gradient
            W_G2[i] += abs(gradient)
            W_WE[i] += -gradient * W_XT[i]
            W_XT[i] /= average_squared_norm_x
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    return preds, losses, {"w": W_XT, "theta": W_ZT, "G": W_G2, "M": W_MX, "wealth": W_WE,
                           "L": W_MG, "N": normalized_sum_norm_x, "T": total_weight}


MIX_RATES = (0.5, 2.0, 8.0)  # NAG's η in the mixture (unitless/learner/mixture.py)


def ref_mix(X, Y, loss):
    """The mixture: coin and NAG at MIX_RATES, each learning alone (their references above);
    part j weighted by π_j ∝ exp(−η L_j), L_j its loss before the example. Logistic: η = 1,
    ŷ = log(p / (1 − p)), p = Σ π_j σ(ŷ_j). Others: ŷ = Σ π_j ŷ_j, AdaHedge's η = ln P / Δ
    (∞ while Δ = 0: uniform over the parts of least L), Δ += Σ π_j ℓ_j + (1/η) ln Σ π_j e^{−η ℓ_j}
    (η = ∞: Σ π_j ℓ_j − min over the leaders of ℓ_j)."""
    runs = [ref_coin(X, Y, loss)] + [ref_nag(X, Y, loss, learning_rate=r) for r in MIX_RATES]
    P = len(runs)
    L, gap, preds, losses = np.zeros(P), 0.0, [], []
    for t, y in enumerate(Y):
        y_j = np.array([run[0][t] for run in runs])
        ell_j = np.array([run[1][t] for run in runs])
        eta = 1.0 if loss == "logistic" else (math.log(P) / gap if gap > 0 else math.inf)
        if math.isinf(eta):
            pi = (L == L.min()) / np.sum(L == L.min())
        else:
            pi = np.exp(-eta * (L - L.min()))
            pi /= pi.sum()
        if loss == "logistic":
            p = float(np.sum(pi / (1.0 + np.exp(-y_j))))  # p = Σ π_j σ(ŷ_j)
            y_hat = math.log(p / (1.0 - p))
        else:
            y_hat = float(np.sum(pi * y_j))
            mix = (float(np.min(ell_j[pi > 0])) if math.isinf(eta)
                   else -math.log(np.sum(pi * np.exp(-eta * ell_j))) / eta)
            gap += max(float(np.sum(pi * ell_j)) - mix, 0.0)
        L += ell_j
        preds.append(y_hat), losses.append(loss_value(loss, y, y_hat))
    coin, nags = runs[0][2], [run[2] for run in runs[1:]]
    for nag in nags:  # (the mixture keeps them once: coin's M is NAG's s, t and N the same)
        assert np.array_equal(nag["s"], coin["M"])
        assert (nag["t"], nag["N"]) == (nags[0]["t"], nags[0]["N"])
    state = {"w": coin["w"], "M": coin["M"], "coin_N": coin["N"], "coin_T": coin["T"],
             "nag_t": nags[0]["t"], "nag_N": nags[0]["N"], "gap": gap}
    state.update({f"coin_{k}": coin[k] for k in ("theta", "G", "wealth", "L")})
    for j, nag in enumerate(nags):
        state.update({f"nag{j + 1}_w": nag["w"], f"nag{j + 1}_G": nag["G"]})
    state.update({f"loss_{j}": L[j] for j in range(P)})
    return preds, losses, state


REFERENCES = {
    "ng": ref_ng, "nag": ref_nag, "snag": ref_snag,
    "omd_diagonal": ref_omd_diagonal, "omd_pnorm": ref_omd_pnorm,
    "kotlowski1": ref_kotlowski1, "kotlowski2": ref_kotlowski2,
    "scinol1": ref_scinol1, "scinol2": ref_scinol2,
    "sgd": ref_sgd, "adagrad": ref_adagrad, "adam": ref_adam, "cocob": ref_cocob,
    "coin": ref_coin, "mix": ref_mix,
}


# ---------------------------------------------------------------------------------------------
# The stream: 5 examples, 3 features of scales ~1, ~1e3, ~1e-3, with zero values (x_{1,2},
# x_{3,3}) and features exceeding their previous max (x_{3,1}: 1.5 → 3; x_{4,2}, x_{4,3}).
# ---------------------------------------------------------------------------------------------

X = np.array([
    [1.5, 0.0, 2e-3],
    [-0.5, 2000.0, 1e-3],
    [3.0, -1000.0, 0.0],
    [-1.0, 3000.0, -4e-3],
    [2.0, 500.0, 3e-3],
])
LABELS = {
    "logistic": np.array([1.0, -1.0, 1.0, 1.0, -1.0]),
    "hinge": np.array([1.0, -1.0, 1.0, 1.0, -1.0]),
    "squared": np.array([0.5, -1.2, 2.0, 0.3, -0.7]),
}
# Hyperparameters away from the defaults where that makes the trace exercise more of the formula
# (e.g. hinge examples with zero gradient, clipped θ in ScInOL2, a non-zero COCOB reward).
HYPER = {"ng": {"learning_rate": 0.7}, "nag": {"learning_rate": 0.9},
         "snag": {"learning_rate": 0.8}, "omd_diagonal": {"learning_rate": 2.0},
         "omd_pnorm": {"learning_rate": 1.5}, "kotlowski1": {"alpha": 1.5},
         "kotlowski2": {"alpha": 2.0}, "scinol1": {"epsilon": 1.0}, "scinol2": {"epsilon": 1.0},
         "sgd": {"learning_rate": 1e-7}, "adagrad": {"learning_rate": 0.002},
         "adam": {"learning_rate": 0.001}, "cocob": {"alpha": 100.0},
         "coin": {"epsilon": 4.0, "lipschitz": 1.0}, "mix": {}}


def assert_close(actual, expected, what):
    actual, expected = np.asarray(actual, dtype=float), np.asarray(expected, dtype=float)
    assert actual.shape == expected.shape, what
    # 1e-12 relative; entries that are 0 in exact arithmetic (off-range entries of the projector
    # P; Kotłowski Alg. 2's ŷ_2, ŷ_3 here, exactly 0 while the z_t are linearly independent) carry
    # rounding of order 1e-16 × the array's scale, hence the floor 1e-12 × max |expected|.
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=RTOL * scale, err_msg=what)


def run_library(algorithm, X, labels, loss, **hp):
    state = new_state(algorithm, X.shape[1], loss, **hp)
    result = learn(state, dense_batch(X, labels, bias=False))
    return state, result


def library_state(state, k=0):
    spec = ALGORITHMS[state.algorithm]
    V, M = state.dense_vectors(), state.dense_matrices()
    named = {name: V[j, k] for j, name in enumerate(spec.vectors)}
    named.update({name: state.S[k, j] for j, name in enumerate(spec.scalars)})
    named.update({name: M[j, k] for j, name in enumerate(spec.matrices)})
    return named


def test_every_algorithm_has_a_reference():
    assert set(REFERENCES) == set(ALGORITHMS)


CASES = [(a, loss) for a in sorted(ALGORITHMS) for loss in ("logistic", "hinge", "squared")]


@pytest.mark.parametrize("algorithm,loss", CASES)
def test_library_matches_the_reference_trace(algorithm, loss):
    hp = HYPER[algorithm]
    labels = LABELS[loss]
    state, result = run_library(algorithm, X, labels, loss, **hp)
    preds, losses, ref_state = REFERENCES[algorithm](X, labels, loss, **hp)

    assert result.scores.shape == (len(X), 1)
    assert_close(result.scores[:, 0], preds, f"{algorithm}/{loss}: predictions ŷ_t")
    assert_close(result.losses, losses, f"{algorithm}/{loss}: losses")
    lib = library_state(state)
    assert set(lib) == set(ref_state), "the reference must name every registry state array"
    for name, expected in ref_state.items():
        assert_close(lib[name], expected, f"{algorithm}/{loss}: final state {name}")
    # the trace is not trivial: at least one prediction after the first is non-zero
    assert np.any(np.abs(preds[1:]) > 0)


def test_mix_parts_learn_as_coin_and_nag_learn_apart():
    """The mixture runs its parts together over an example's features: on sparse examples with
    a feature twice in one example (a hash collision), values growing past a feature's scale,
    and importance weights 0 and 5, each part's state is the one coin or NAG reaches alone."""
    from unitless.learner import make_batch
    rng = np.random.default_rng(3)
    n, d = 60, 6
    rows = [rng.choice(d, size=rng.integers(1, 5)) for _ in range(n)]  # (repeats allowed)
    rows[7] = np.array([2, 2, 4])
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    values = rng.standard_normal(indptr[-1]) * 10.0 ** rng.uniform(-3, 3, indptr[-1])
    labels = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    weights = rng.choice([0.0, 1.0, 5.0], size=n)
    batch = make_batch(indptr, np.concatenate(rows), values, labels, weights)
    for loss in ("logistic", "squared"):
        mixed = new_state("mix", d, loss)
        learn(mixed, batch)
        mix = library_state(mixed)
        coin = new_state("coin", d, loss)
        learn(coin, batch)
        alone = library_state(coin)
        for name in ("theta", "G", "wealth", "L", "N", "T"):
            assert_close(mix[f"coin_{name}"], alone[name], f"{loss}: coin's {name}")
        assert_close(mix["w"], alone["w"], f"{loss}: coin's w")
        assert_close(mix["M"], alone["M"], f"{loss}: max |x|")
        for j, rate in enumerate(MIX_RATES):
            nag = new_state("nag", d, loss, learning_rate=rate)
            learn(nag, batch)
            alone = library_state(nag)
            for name in ("w", "G"):
                assert_close(mix[f"nag{j + 1}_{name}"], alone[name], f"{loss}: NAG {rate}'s {name}")
            assert_close(mix["M"], alone["s"], f"{loss}: NAG {rate}'s s")
            assert_close([mix["nag_t"], mix["nag_N"]], [alone["t"], alone["N"]], f"{loss}: t, N")


def test_the_traces_exercise_the_edge_cases():
    """Guard the stream: the cases below are reached somewhere in the traces above."""
    # hinge examples with zero gradient (margin ≥ 1) happen for NAG
    preds, _, _ = ref_nag(X, LABELS["hinge"], "hinge", **HYPER["nag"])
    assert any(1.0 - y * p <= 0 for y, p in zip(LABELS["hinge"], preds))
    # ScInOL2 clips |θ| at 1 on some coordinate (squared loss, same-sign gradients)
    _, _, st = ref_scinol2(X, LABELS["squared"], "squared")
    assert np.any(np.abs(st["G"]) / np.sqrt(st["S2"] + st["M"] ** 2) > 1.0)
    # COCOB's reward becomes positive
    _, _, st = ref_cocob(X, LABELS["logistic"], "logistic")
    assert np.any(st["reward"] > 0)
    # the p-norm exponent moves off 2 (m goes 2 → 3, p = 2 ln 3)
    _, _, st = ref_omd_pnorm(X, LABELS["logistic"], "logistic")
    assert st["m"] == 3.0 and 2.0 * math.log(st["m"]) > 2.0


def test_kotlowski2_on_z_predicts_like_alg2_on_raw_x():
    """Alg. 2 is invariant under the map x → D⁻¹x, so its raw-x version predicts the same."""
    labels = LABELS["logistic"]
    alpha = HYPER["kotlowski2"]["alpha"]
    preds_z, _, _ = ref_kotlowski2(X, labels, "logistic", alpha=alpha)
    S, h, nu, raw = np.zeros((3, 3)), np.zeros(3), 0.0, []
    for x, y in zip(X, labels):
        S = S + np.outer(x, x)  # 1. S ← S + x xᵀ
        Sp = np.linalg.pinv(S, rcond=1e-13)  # S†
        eta = math.exp((h @ Sp @ h - nu) / (2 * alpha)) / alpha  # 2. η
        y_hat = float(eta * (Sp @ h) @ x)  # 2. ŷ = η (S†h)ᵀx
        g = loss_derivative("logistic", y, y_hat)
        h, nu = h - g * x, nu + g * g * float(x @ Sp @ x)  # 3. h, ν
        raw.append(y_hat)
    np.testing.assert_allclose(preds_z, raw, rtol=1e-7, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# One-against-all: n_classes = 3, labels 1..3; learner k sees +1 when label == k+1, else −1.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ["nag", "kotlowski2"])
def test_one_against_all_is_k_independent_binary_learners(algorithm):
    labels = np.array([1.0, 3.0, 2.0, 3.0, 1.0])
    hp = HYPER[algorithm]
    state = new_state(algorithm, 3, "logistic", n_classes=3, **hp)
    result = learn(state, dense_batch(X, labels, bias=False))
    assert result.scores.shape == (len(X), 3)
    total = np.zeros(len(X))
    for k in range(3):
        y_k = np.where(labels == k + 1, 1.0, -1.0)  # learner k: +1 for class k+1, else −1
        preds, losses, ref_state = REFERENCES[algorithm](X, y_k, "logistic", **hp)
        assert_close(result.scores[:, k], preds, f"{algorithm} class {k + 1}: predictions")
        for name, expected in ref_state.items():
            assert_close(library_state(state, k)[name], expected, f"class {k + 1}: {name}")
        total += losses
    assert_close(result.losses, total, f"{algorithm}: summed one-against-all losses")


# ---------------------------------------------------------------------------------------------
# Fully hand-computed two-example traces (hinge loss, so g = −y while the margin is positive).
# Stream: x_1 = (2, −4), y_1 = +1; x_2 = (−4, 1), y_2 = +1.
# ---------------------------------------------------------------------------------------------

X_HAND = np.array([[2.0, -4.0], [-4.0, 1.0]])
Y_HAND = np.array([1.0, 1.0])
R2 = math.sqrt(2.0)


def test_nag_two_examples_by_hand():
    state, result = run_library("nag", X_HAND, Y_HAND, "hinge", learning_rate=0.5)
    # Example 1, t = 1:
    #   step 1: s = (2, 4) (w stays 0)
    #   step 2: ŷ_1 = 0 ; N = (2/2)² + (4/4)² = 2
    #   g = −y_1 = −1 (margin 1 − 0 > 0) ; g x = (−2, 4)
    #   step 3: G = (4, 16) ; η√(t/N) = 0.5·√(1/2) = √2/4
    #     w_1 = 0 − (√2/4)·(−2)/(2·√4) = √2/8
    #     w_2 = 0 − (√2/4)·4/(4·√16)  = −√2/16
    # Example 2, t = 2:
    #   step 1: |−4| > s_1 = 2: w_1 ← (√2/8)·2/4 = √2/16, s_1 = 4 ; |1| < s_2 = 4: unchanged
    #   step 2: ŷ_2 = (√2/16)(−4) + (−√2/16)(1) = −5√2/16 = −0.4419417382415922
    #           N = 2 + (4/4)² + (1/4)² = 49/16 = 3.0625
    #   g = −1 (margin 1 + 5√2/16 > 0) ; g x = (4, −1)
    #   step 3: G = (4 + 16, 16 + 1) = (20, 17) ; η√(t/N) = 0.5·√(32/49) = 2√2/7
    #     w_1 = √2/16 − (2√2/7)·4/(4√20)     = √2/16 − √2/(7√5)     ≈ 0.08838835 − 0.09035079
    #                                                                  = −0.0019624426422066854
    #     w_2 = −√2/16 − (2√2/7)·(−1)/(4√17) = −√2/16 + √2/(14√17)  ≈ −0.08838835 + 0.02449980
    #                                                                  = −0.06388854977081718
    # (the closed forms, evaluated in floating point, give the literals used below)
    assert R2 / 16 - R2 / (7 * math.sqrt(5)) == pytest.approx(-0.0019624426422066854, rel=1e-12)
    assert -R2 / 16 + R2 / (14 * math.sqrt(17)) == pytest.approx(-0.06388854977081718, rel=1e-12)
    assert_close(result.scores[:, 0], [0.0, -0.4419417382415922], "NAG ŷ")
    assert_close(result.losses, [1.0, 1.4419417382415922], "NAG hinge losses")
    V = state.dense_vectors()
    assert_close(V[0, 0], [-0.0019624426422066854, -0.06388854977081718], "NAG w")
    assert_close(V[1, 0], [4.0, 4.0], "NAG s")
    assert_close(V[2, 0], [20.0, 17.0], "NAG G")
    assert_close(state.S[0], [2.0, 3.0625], "NAG (t, N)")


def test_scinol2_two_examples_by_hand():
    state, result = run_library("scinol2", X_HAND, Y_HAND, "hinge", epsilon=1.0)
    # Example 1: M = (2, 4); G = 0 so θ = 0 and w = (0, 0); ŷ_1 = 0
    #   g = −1 (margin 1 > 0) ; g x = (−2, 4)
    #   G = 0 − g x = (2, −4) ; S² = (g x)² = (4, 16) ; η = 1 − g x·w = (1, 1)
    # Example 2: M = (max(2, 4), max(4, 1)) = (4, 4)
    #   √(S² + M²) = (√(4 + 16), √(16 + 16)) = (√20, √32)
    #   θ = (2/√20, −4/√32) ≈ (0.447, −0.707), both inside [−1, 1]
    #   w_1 = (2/√20)/(2√20)·1 = 2/40 = 0.05
    #   w_2 = −(4/√32)/(2√32)·1 = −4/64 = −0.0625
    #   ŷ_2 = 0.05·(−4) + (−0.0625)·1 = −0.2625
    #   g = −1 (margin 1.2625 > 0) ; g x = (4, −1)
    #   G = (2 − 4, −4 + 1) = (−2, −3) ; S² = (4 + 16, 16 + 1) = (20, 17)
    #   η = (1 − 4·0.05, 1 − (−1)(−0.0625)) = (0.8, 0.9375)
    assert_close(result.scores[:, 0], [0.0, -0.2625], "ScInOL2 ŷ")
    assert_close(result.losses, [1.0, 1.2625], "ScInOL2 hinge losses")
    V = state.dense_vectors()
    assert_close(V[0, 0], [0.05, -0.0625], "ScInOL2 w")
    assert_close(V[1, 0], [20.0, 17.0], "ScInOL2 S²")
    assert_close(V[2, 0], [-2.0, -3.0], "ScInOL2 G")
    assert_close(V[3, 0], [4.0, 4.0], "ScInOL2 M")
    assert_close(V[4, 0], [0.8, 0.9375], "ScInOL2 η")


@pytest.mark.parametrize("name,reference", [("nag", ref_nag), ("scinol2", ref_scinol2)])
def test_the_references_reproduce_the_hand_traces(name, reference):
    """The hand traces above also pin the two reference implementations."""
    hp = {"nag": {"learning_rate": 0.5}, "scinol2": {"epsilon": 1.0}}[name]
    state, result = run_library(name, X_HAND, Y_HAND, "hinge", **hp)
    preds, _, ref_state = reference(X_HAND, Y_HAND, "hinge", **hp)
    assert_close(result.scores[:, 0], preds, f"{name}: ŷ")
    for key, value in ref_state.items():
        assert_close(library_state(state)[key], value, f"{name}: {key}")
