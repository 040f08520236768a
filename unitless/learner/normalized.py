"""Ross, Mineiro, Langford, *Normalized Online Learning* (UAI 2013): NG, NAG, sNAG.

Every step function shares one signature (see ``kernel.py``): it receives the state arrays
V (vectors, [name, class, feature]), S (scalars, [class, name]), the class index k, one
example's non-zero features (idx, val), its label y, importance weight, loss code and
hyperparameters hp; it predicts ŷ, suffers the loss, updates the state and returns (ŷ, ℓ).

A learner that can be split over feature shards (``learner/sharded.py``) is written as two
halves, ``xxx_predict`` (what happens before the loss: ŷ from this example's features) and
``xxx_update`` (what happens after it, given g = ∂ℓ/∂ŷ unweighted and the importance weight),
and its step is the two around the loss, one function for all of them (``kernel.step``); the
update reads the scalars S but never writes them. Where the update needs a value the
prediction used that a later prediction may overwrite (a bet w_{t,i}), the predict half writes
it to ``memo[j]`` (one slot per feature of the example) and the update reads it from there:
with a delay, other examples' halves run in between. Such a learner says so in its registry
entry (``memo``), and its step gives both halves one memo; the others get ``NO_MEMO``.
"""
import math

import numpy as np
from numba import njit


@njit(cache=True)
def ng_predict(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
               val: np.ndarray, hp: np.ndarray, memo: np.ndarray) -> float:
    """NG, Ross et al. Alg. 1, steps 1-2. V = (w, s); S = (t, N); hp = (η,)."""
    w, s = V[0, k], V[1, k]
    S[k, 0] += 1.0
    for j in range(idx.shape[0]):  # 1. w_i ← w_i s_i²/x_i², s_i ← |x_i| where |x_i| > s_i
        i, x = idx[j], abs(val[j])
        if x > s[i]:
            w[i] = w[i] * s[i] * s[i] / (x * x)
            s[i] = x
    y_hat = 0.0
    n_add = 0.0
    for j in range(idx.shape[0]):  # 2. ŷ = Σ w_i x_i ; N ← N + Σ x_i²/s_i²
        i, x = idx[j], val[j]
        y_hat += w[i] * x
        n_add += (x / s[i]) ** 2
    S[k, 1] += n_add
    return y_hat


@njit(cache=True)
def ng_update(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
              val: np.ndarray, g: float, weight: float, hp: np.ndarray, memo: np.ndarray) -> None:
    """NG, Ross et al. Alg. 1, step 3."""
    w, s = V[0, k], V[1, k]
    eta = hp[0]
    t, N = S[k, 0], S[k, 1]
    g *= weight
    for j in range(idx.shape[0]):  # 3. w_i ← w_i − η (t/N) (1/s_i²) g x_i
        i, x = idx[j], val[j]
        w[i] -= eta * (t / N) * g * x / (s[i] * s[i])


@njit(cache=True)
def nag_predict(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                val: np.ndarray, hp: np.ndarray, memo: np.ndarray) -> float:
    """NAG, Ross et al. Alg. 2, steps 1-2. V = (w, s, G); S = (t, N); hp = (η,)."""
    w, s = V[0, k], V[1, k]
    S[k, 0] += 1.0
    for j in range(idx.shape[0]):  # 1. w_i ← w_i s_i/|x_i|, s_i ← |x_i| where |x_i| > s_i
        i, x = idx[j], abs(val[j])
        if x > s[i]:
            w[i] = w[i] * s[i] / x
            s[i] = x
    y_hat = 0.0
    n_add = 0.0
    for j in range(idx.shape[0]):  # 2. ŷ = Σ w_i x_i ; N ← N + Σ x_i²/s_i²
        i, x = idx[j], val[j]
        y_hat += w[i] * x
        n_add += (x / s[i]) ** 2
    S[k, 1] += n_add
    return y_hat


@njit(cache=True)
def nag_update(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
               val: np.ndarray, g: float, weight: float, hp: np.ndarray, memo: np.ndarray) -> None:
    """NAG, Ross et al. Alg. 2, step 3."""
    w, s, G = V[0, k], V[1, k], V[2, k]
    eta = hp[0]
    t, N = S[k, 0], S[k, 1]
    g *= weight
    if g != 0.0 and N > 0.0:  # (N = 0: no feature yet, nothing to update)
        rate = eta * math.sqrt(t / N)
        for j in range(idx.shape[0]):  # 3. G_i += (g x_i)² ; w_i −= η √(t/N) g x_i/(s_i √G_i)
            i = idx[j]
            gx = g * val[j]
            G[i] += gx * gx
            if G[i] > 0.0:  # (g x_i)² can underflow to 0 when the loss saturates
                w[i] -= rate * gx / (s[i] * math.sqrt(G[i]))


@njit(cache=True)
def snag_predict(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                 val: np.ndarray, hp: np.ndarray, memo: np.ndarray) -> float:
    """sNAG, Ross et al. Sec. 3: NAG with s_i = Σ x_i² and √(s_i/t_i) in place of s_i.

    V = (w, s, G, t0); S = (t, N); hp = (η,). t_i = t − t0_i + 1 counts the trials since feature i
    first appeared (t0_i), so √(s_i/t_i) is its RMS over them: with the paper's global t a feature
    first seen at trial 30,000 would get a normaliser √30,000 too small and a step as large
    (docs/design.md "Choices made"). The max-rescaling step 1 of NAG has no analogue (the normaliser
    moves with every example), so w is left as is.
    """
    w, s, t0 = V[0, k], V[1, k], V[3, k]
    S[k, 0] += 1.0
    t = S[k, 0]
    y_hat = 0.0
    n_add = 0.0
    for j in range(idx.shape[0]):  # s_i ← s_i + x_i² ; ŷ = Σ w_i x_i ; N ← N + Σ x_i² t_i/s_i
        i, x = idx[j], val[j]
        if t0[i] == 0.0:
            t0[i] = t
        s[i] += x * x
        y_hat += w[i] * x
        n_add += x * x * (t - t0[i] + 1.0) / s[i]
    S[k, 1] += n_add
    return y_hat


@njit(cache=True)
def snag_update(V: np.ndarray, M: np.ndarray, S: np.ndarray, k: int, idx: np.ndarray,
                val: np.ndarray, g: float, weight: float, hp: np.ndarray,
                memo: np.ndarray) -> None:
    """sNAG's update."""
    w, s, G, t0 = V[0, k], V[1, k], V[2, k], V[3, k]
    eta = hp[0]
    t, N = S[k, 0], S[k, 1]
    g *= weight
    if g != 0.0 and N > 0.0:  # (N = 0: no feature yet, nothing to update)
        rate = eta * math.sqrt(t / N)
        for j in range(idx.shape[0]):  # G_i += (g x_i)² ; w_i −= η √(t/N) g x_i/(√(s_i/t_i) √G_i)
            i = idx[j]
            gx = g * val[j]
            G[i] += gx * gx
            if G[i] > 0.0:
                w[i] -= rate * gx / (math.sqrt(s[i] / (t - t0[i] + 1.0)) * math.sqrt(G[i]))
