"""Generic checks run against every learner: scale invariance, batching, bad input, Arrow."""
import numpy as np
import pytest

from unitless.learner import (ALGORITHMS, InvalidExampleError, dense_batch, from_arrow, learn,
                              learn_or_refuse, make_batch, new_state, to_arrow)

INVARIANT = sorted(a for a, spec in ALGORITHMS.items() if spec.invariance != "none")
NOT_INVARIANT = ["sgd", "adagrad", "adam"]


def stream(n=400, d=6, seed=0):
    """Logistic data whose features differ in scale by orders of magnitude, with a bias column."""
    rng = np.random.default_rng(seed)
    sigma = 2.0 ** rng.integers(-8, 9, size=d)
    X = rng.normal(size=(n, d)) * sigma
    w_star = rng.choice([-1.0, 1.0], size=d) / sigma
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ w_star)), 1.0, -1.0)
    return np.hstack([X, np.ones((n, 1))]), y


def run(algorithm, X, y, loss="logistic", batch_size=None, **hp):
    state = new_state(algorithm, X.shape[1], loss, **hp)
    batch = dense_batch(X, y, bias=False)
    size = batch_size or len(batch)
    scores = [learn(state, batch.slice(a, min(a + size, len(batch)))).scores
              for a in range(0, len(batch), size)]
    return np.vstack(scores)[:, 0], state


@pytest.mark.parametrize("algorithm", INVARIANT)
@pytest.mark.parametrize("loss", ["logistic", "hinge", "absolute"])
def test_predictions_do_not_change_when_features_are_rescaled(algorithm, loss):
    X, y = stream()
    scale = 10.0 ** np.random.default_rng(1).uniform(-6, 6, size=X.shape[1])
    base, state = run(algorithm, X, y, loss)
    scaled, scaled_state = run(algorithm, X * scale, y, loss)
    assert np.abs(base).max() > 0
    np.testing.assert_allclose(scaled, base, rtol=1e-9, atol=1e-12 * np.abs(base).max())
    # and the weights become w_i / a_i
    np.testing.assert_allclose(scaled_state.weights[0] * scale, state.weights[0], rtol=1e-9,
                               atol=1e-12 * np.abs(state.weights[0] * 1).max())


def test_kotlowski2_predictions_do_not_change_under_an_invertible_linear_map():
    X, y = stream(n=300, d=5)
    rng = np.random.default_rng(2)
    d = X.shape[1]
    A = rng.normal(size=(d, d)) @ np.diag(10.0 ** rng.uniform(-2, 2, size=d))
    assert 10 < np.linalg.cond(A) < 1e6
    base, _ = run("kotlowski2", X, y)
    mapped, _ = run("kotlowski2", X @ A.T, y)
    np.testing.assert_allclose(mapped, base, rtol=1e-7, atol=1e-9 * np.abs(base).max())


@pytest.mark.parametrize("algorithm", NOT_INVARIANT)
def test_baselines_are_not_scale_invariant(algorithm):
    X, y = stream()
    scale = 10.0 ** np.random.default_rng(1).uniform(-6, 6, size=X.shape[1])
    base, _ = run(algorithm, X, y)
    scaled, _ = run(algorithm, X * scale, y)
    assert np.max(np.abs(scaled - base) / (np.abs(base) + 1e-12)) > 1e-2


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_batches_of_any_size_give_bit_identical_predictions_and_state(algorithm):
    X, y = stream(n=300)
    whole, state = run(algorithm, X, y)
    for size in (1, 7, 4096):
        parts, other = run(algorithm, X, y, batch_size=size)
        assert parts.tobytes() == whole.tobytes()
        for a, b in ((state.V, other.V), (state.M, other.M), (state.S, other.S)):
            assert a.tobytes() == b.tobytes()
        assert state.cumulative_loss == other.cumulative_loss


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_predictions_do_not_depend_on_the_model_dimension(algorithm):
    # the same features at the same indices in a space of 7 or of 4,096 (--bits 3 or 12 without
    # collisions): no learner may read the number of coordinates it could have (README "Choices
    # made": Kotłowski Alg. 1 and OMD count the features seen)
    X, y = stream(n=200)
    small, _ = run(algorithm, X, y)
    wide = np.zeros((X.shape[0], 4096))
    wide[:, [5, 17, 64, 900, 2048, 3000, 4095]] = X  # in the same order
    large, _ = run(algorithm, wide, y)
    np.testing.assert_allclose(large, small, rtol=1e-12, atol=1e-15 * np.abs(small).max())


def test_snag_takes_a_late_feature_as_calmly_as_an_early_one():
    # a feature that first appears at trial 5,001 gets the step it would get at trial 1:
    # the same stream with the feature's first 5,000 values zeroed gives, from trial 5,001 on,
    # predictions close to a fresh model's on the late part alone
    X, y = stream(n=6000, d=3, seed=3)
    late = X.copy()
    late[:5000, 0] = 0.0
    scores, _ = run("snag", late, y)
    fresh, _ = run("snag", X[5000:], y[5000:])
    early_scale = np.abs(scores[4000:5000]).max()
    # with the global t of the paper the feature's normaliser is √5000 too small: |ŷ| jumps
    assert np.abs(scores[5000:5100]).max() < 3 * max(early_scale, np.abs(fresh[:100]).max())


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_state_round_trips_through_arrow_exactly(algorithm):
    X, y = stream(n=200)
    _, state = run(algorithm, X[:100], y[:100])
    restored = from_arrow(to_arrow(state))
    for a, b in ((state.V, restored.V), (state.M, restored.M), (state.S, restored.S)):
        assert a.tobytes() == b.tobytes()
    assert (restored.examples_seen, restored.cumulative_loss) == (100, state.cumulative_loss)
    # and learning goes on identically
    batch = dense_batch(X[100:], y[100:], bias=False)
    assert (learn(state, batch).scores.tobytes() == learn(restored, batch).scores.tobytes())


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_arrow_rows_are_exactly_the_features_that_left_their_initial_state(algorithm):
    # sparse examples over 40 of 300 features, 3 classes: the table lists (class, feature) rows
    # from the features examples carried; a scan of the whole state must find the same rows
    rng = np.random.default_rng(4)
    used = rng.choice(300, size=40, replace=False)
    scale = np.zeros(300)
    scale[used] = 10.0 ** rng.integers(-3, 4, size=40)
    state = new_state(algorithm, 300, "logistic", n_classes=3)
    for _ in range(3):
        indices = rng.choice(used, size=(50, 5))
        indices.sort(axis=1)
        indices = np.unique(indices, axis=0)  # rows with distinct sorted indices
        keep = np.array([len(set(r)) == 5 for r in indices])
        indices = indices[keep]
        n = len(indices)
        values = rng.normal(size=(n, 5)) * scale[indices]
        learn(state, make_batch(np.arange(0, 5 * n + 1, 5), indices.reshape(-1),
                                values.reshape(-1), rng.integers(1, 4, size=n).astype(float)))
    table = to_arrow(state)
    init = new_state(algorithm, 300, "logistic", n_classes=3)
    changed = (state.V != init.V).any(axis=0) | (state.M != init.M).any(axis=(0, 3))
    assert sorted(zip(*np.nonzero(changed))) == sorted(
        zip(table.column("class").to_pylist(), table.column("index").to_pylist()))
    assert set(table.column("index").to_pylist()) <= set(used.tolist())
    restored = from_arrow(table)
    assert restored.V.tobytes() == state.V.tobytes() and restored.M.tobytes() == state.M.tobytes()


BAD = {
    "nan feature": (lambda X, y: X.__setitem__((3, 1), np.nan), "not finite"),
    "inf feature": (lambda X, y: X.__setitem__((3, 0), np.inf), "not finite"),
    "nan label": (lambda X, y: y.__setitem__(3, np.nan), "label nan"),
    "label outside the loss's domain": (lambda X, y: y.__setitem__(3, 2.0), "label 2.0"),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("algorithm", ["nag", "scinol2", "kotlowski2", "adam"])
def test_bad_example_raises_naming_its_position_and_leaves_state_untouched(algorithm, case):
    X, y = stream(n=20)
    state = new_state(algorithm, X.shape[1], "logistic")
    learn(state, dense_batch(X[:10], y[:10], bias=False))
    before = to_arrow(state)
    Xb, yb = X[10:].copy(), y[10:].copy()
    corrupt, expected = BAD[case]
    corrupt(Xb, yb)
    with pytest.raises(InvalidExampleError, match=expected) as err:
        learn(state, dense_batch(Xb, yb, bias=False))
    assert err.value.position == 3
    assert "example 3 of the batch" in str(err.value)
    after = to_arrow(state)
    assert after.equals(before) and after.schema.metadata == before.schema.metadata
    assert state.examples_seen == 10


def test_multiclass_labels_must_be_classes():
    state = new_state("nag", 3, "logistic", n_classes=3)
    with pytest.raises(InvalidExampleError, match="not a class in 1..3"):
        learn(state, dense_batch(np.ones((2, 2)), [1, 4]))


def test_unknown_algorithm_and_hyperparameter_are_clear_errors():
    with pytest.raises(ValueError, match="unknown algorithm 'nagg'"):
        new_state("nagg", 3)
    with pytest.raises(ValueError, match="has no hyperparameter"):
        new_state("scinol2", 3, learning_rate=0.1)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_explicit_zero_values_are_absent_features(algorithm):
    from unitless.learner import make_batch
    X, y = stream(n=50, d=3)
    dense = dense_batch(X, y, bias=False)
    # the same examples with an explicit zero for a never-seen feature 4 in every row
    n = len(y)
    indptr = np.arange(0, 5 * n + 1, 5)
    indices = np.hstack([np.tile([0, 1, 2, 3], (n, 1)), np.full((n, 1), 4)]).ravel()
    values = np.hstack([X, np.zeros((n, 1))]).ravel()
    a, b = new_state(algorithm, 5), new_state(algorithm, 5)
    assert (learn(a, dense).scores.tobytes() == learn(b, make_batch(indptr, indices, values, y))
            .scores.tobytes())


@pytest.mark.parametrize("algorithm", ["nag", "snag", "adagrad"])
def test_a_saturated_loss_whose_squared_gradient_underflows_does_not_crash(algorithm):
    # g x = 1e-170 squares to 0 in float64: the update must be skipped, not divide by zero
    state = new_state(algorithm, 2, "logistic")
    state.V[0, 0, 0] = 400.0  # yŷ = 400: g ≈ -e^-400 ≈ -1.9e-174
    if algorithm != "adagrad":
        state.V[1, 0, 0] = 1.0  # s
    learn(state, dense_batch([[1.0]], [1]))
    assert np.isfinite(state.V).all()


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_an_example_with_a_non_finite_outcome_is_refused_and_leaves_no_trace(algorithm):
    # squared loss with labels of 1e90 and a feature value of 1e99: a loss, a squared gradient
    # or a later prediction overflows (which one depends on the learner); any example that
    # makes something non-finite is refused and the state restored to before it
    X, y = stream(n=120, d=4)
    y = y.copy()
    y[[30, 31, 77]] = [1e90, -1e90, 1e95]
    X = X.copy()
    X[50, 1] = 1e99  # a feature value at the bound, whose square still fits in float64
    plain = new_state(algorithm, X.shape[1], "squared")
    outcome = learn(plain, dense_batch(X, y, bias=False))
    overflows = not all(np.isfinite(a).all() for a in (outcome.scores, outcome.losses, plain.V,
                                                      plain.S, plain.M))
    state = new_state(algorithm, X.shape[1], "squared")
    rows, result, refused = learn_or_refuse(state, dense_batch(X, y, bias=False))
    assert bool(refused) == overflows  # refused exactly when plain learning overflows
    assert all("finite" in reason for _, reason in refused)
    kept = np.setdiff1d(np.arange(len(y)), [r for r, _ in refused])
    assert rows.tolist() == kept.tolist()
    clean = new_state(algorithm, X.shape[1], "squared")
    expected = learn(clean, dense_batch(X[kept], y[kept], bias=False))
    assert result.scores.tobytes() == expected.scores.tobytes()
    for a, b in ((state.V, clean.V), (state.M, clean.M), (state.S, clean.S)):
        assert a.tobytes() == b.tobytes()
    assert (state.examples_seen, state.cumulative_loss) == (clean.examples_seen,
                                                            clean.cumulative_loss)
    assert np.isfinite(state.V).all() and np.isfinite(state.S).all()


def test_values_beyond_the_bound_are_refused_before_learning():
    state = new_state("nag", 3, "squared")
    X = np.array([[1.0, 2.0], [1e101, 1.0], [1.0, 1.0]])
    rows, _, refused = learn_or_refuse(state, dense_batch(X, [1.0, 2.0, 1e101]))
    assert rows.tolist() == [0] and [r for r, _ in refused] == [1, 2]
    assert "|x| ≤ 1e+100" in refused[0][1] and "|y| ≤ 1e+100" in refused[1][1]
