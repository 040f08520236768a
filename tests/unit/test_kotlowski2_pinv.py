"""Kotłowski Alg. 2 keeps S† by rank-one updates; it must track numpy.linalg.pinv(Σ x xᵀ)."""
import numpy as np

from unitless.learner import dense_batch, learn, new_state


def test_rank_one_pseudo_inverse_updates_agree_with_numpy_pinv():
    rng = np.random.default_rng(3)
    d = 6
    basis = np.linalg.qr(rng.normal(size=(d, d)))[0] * [1, 3, 10, 30, 100, 0.1]
    rows = []
    # rank-deficient stretches: a line, a plane, a 4-dimensional subspace, then full rank
    for rank, n in ((1, 5), (2, 30), (4, 60), (d, 700), (3, 200)):
        rows.append(rng.normal(size=(n, rank)) @ basis[:rank])
    X = np.vstack(rows)
    y = np.where(rng.random(len(X)) < 0.5, 1.0, -1.0)
    state = new_state("kotlowski2", d, "logistic")
    S = np.zeros((d, d))
    D = np.zeros(d)  # the learner works on z = x / D, D_i = first non-zero |x_i|
    for t in range(len(X)):
        learn(state, dense_batch(X[t:t + 1], y[t:t + 1], bias=False))
        D = np.where((D == 0) & (X[t] != 0), np.abs(X[t]), D)
        z = np.divide(X[t], D, out=np.zeros(d), where=D > 0)
        S += np.outer(z, z)
        expected = np.linalg.pinv(S, rcond=1e-10, hermitian=True)
        singular = np.linalg.svd(S, compute_uv=False)
        cond = singular[0] / singular[singular > 1e-10 * singular[0]][-1]
        # agreement to within what the conditioning of S allows in double precision
        tolerance = 1e-12 * cond * np.abs(expected).max()
        M = state.dense_matrices()
        np.testing.assert_allclose(M[0, 0], expected, atol=tolerance, rtol=0,
                                   err_msg=f"after example {t}")
        rank = np.linalg.matrix_rank(S)
        projector = S @ expected
        np.testing.assert_allclose(M[1, 0], projector, atol=1e-9)
        assert round(np.trace(M[1, 0])) == rank
