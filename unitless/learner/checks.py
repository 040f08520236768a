"""The learner check suite: generic checks every registered learner must pass.

Each check is a plain function ``check_xxx(algorithm)`` that raises AssertionError with a message
saying what broke; ``checks_for`` picks those that apply to a learner from its registry entry
(its ``invariance`` above all), so a learner added to ``ALGORITHMS`` is checked with no test
edited (``tests/unit/test_learner_checks.py`` runs every learner against ``checks_for``). To check a
learner by hand:

    >>> from unitless.learner.checks import yield_checks
    >>> for check in yield_checks("nag"):
    ...     check()

The checks are deterministic (fixed seeds) and small: the suite for every learner takes seconds
once the kernel is compiled.
"""
import functools
from typing import Callable, Iterator

import numpy as np

from .arrow_form import from_arrow, to_arrow
from .check_data import run, same_bits, same_state, stream
from .checks_many import (check_many_keys_equal_each_alone, check_one_model_serves_many_threads,
                          check_predict_next_writes_nothing)
from .examples import dense_batch, make_batch
from .kernel import run_batch
from .losses import LOSS_CODES
from .online import InvalidExampleError, learn, learn_or_refuse, learner_labels, predict_next
from .registry import get_algorithm
from .state import new_state

__all__ = ["checks_for", "yield_checks", "stream", "run"]


# --- helpers ---------------------------------------------------------------------------------

def _rescaling(seed=1, d=7):
    return 10.0 ** np.random.default_rng(seed).uniform(-6, 6, size=d)


# --- invariance, from the registry's ``invariance`` ------------------------------------------

def check_scale_invariance(algorithm: str) -> None:
    """Rescaling each feature by any positive factor a_i changes no prediction, and the weights
    become w_i / a_i (logistic, hinge and absolute loss)."""
    X, y = stream()
    scale = _rescaling(d=X.shape[1])
    for loss in ("logistic", "hinge", "absolute"):
        base, state = run(algorithm, X, y, loss)
        scaled, scaled_state = run(algorithm, X * scale, y, loss)
        assert np.abs(base).max() > 0, f"{loss}: every prediction is 0"
        np.testing.assert_allclose(scaled, base, rtol=1e-9, atol=1e-12 * np.abs(base).max(),
                                   err_msg=f"{loss} loss: predictions on rescaled features")
        w = state.weights[0]
        np.testing.assert_allclose(scaled_state.weights[0] * scale, w, rtol=1e-9,
                                   atol=1e-12 * np.abs(w).max(),
                                   err_msg=f"{loss} loss: weights on rescaled features × scale")


def check_linear_invariance(algorithm: str) -> None:
    """An invertible linear map of the features (x ↦ A x, cond(A) ~ 10..1e6) changes no
    prediction."""
    X, y = stream(n=300, d=5)
    rng = np.random.default_rng(2)
    d = X.shape[1]
    A = rng.normal(size=(d, d)) @ np.diag(10.0 ** rng.uniform(-2, 2, size=d))
    assert 10 < np.linalg.cond(A) < 1e6
    base, _ = run(algorithm, X, y)
    mapped, _ = run(algorithm, X @ A.T, y)
    np.testing.assert_allclose(mapped, base, rtol=1e-7, atol=1e-9 * np.abs(base).max(),
                               err_msg="predictions on linearly mapped features")


def check_not_scale_invariant(algorithm: str) -> None:
    """A learner registered as not invariant is not: rescaled features change its predictions
    (else its registry entry should say it is)."""
    X, y = stream()
    base, _ = run(algorithm, X, y)
    scaled, _ = run(algorithm, X * _rescaling(d=X.shape[1]), y)
    change = np.max(np.abs(scaled - base) / (np.abs(base) + 1e-12))
    assert change > 1e-2, (f"registered with invariance='none' but rescaling the features "
                           f"changes its predictions by at most {change:.2g} (relative)")


# --- every learner ---------------------------------------------------------------------------

def check_batch_sizes(algorithm: str) -> None:
    """Batches of 1, 7 or 4,096 examples give bit-identical predictions and state to one batch."""
    X, y = stream(n=300)
    whole, state = run(algorithm, X, y)
    for size in (1, 7, 4096):
        parts, other = run(algorithm, X, y, batch_size=size)
        same_bits(parts, whole, f"batches of {size}: predictions")
        same_state(state, other, f"batches of {size}: state")
        assert state.cumulative_loss == other.cumulative_loss, \
            f"batches of {size}: cumulative loss {other.cumulative_loss} != {state.cumulative_loss}"


def check_model_dimension(algorithm: str) -> None:
    """The same features at the same indices in a space of 7 or of 4,096 coordinates (--bits 3 or
    12 without collisions) give the same predictions: no learner may read the number of
    coordinates it could have (docs/design.md "Choices made")."""
    X, y = stream(n=200)
    small, _ = run(algorithm, X, y)
    wide = np.zeros((X.shape[0], 4096))
    wide[:, [5, 17, 64, 900, 2048, 3000, 4095]] = X  # in the same order
    large, _ = run(algorithm, wide, y)
    np.testing.assert_allclose(large, small, rtol=1e-12, atol=1e-15 * np.abs(small).max(),
                               err_msg="predictions in 4,096 coordinates vs in 7")


def check_shuffled_feature_order(algorithm: str) -> None:
    """Each example's features in any order give the same predictions and weights (to rounding:
    the order of summation changes)."""
    X, y = stream(n=300)
    base, state = run(algorithm, X, y)
    rng = np.random.default_rng(5)
    n, d = X.shape
    cols = np.argsort(rng.random((n, d)), axis=1)  # a random order of the features per example
    batch = make_batch(np.arange(0, n * d + 1, d), cols.ravel(),
                       np.take_along_axis(X, cols, axis=1).ravel(), y)
    shuffled = new_state(algorithm, d, "logistic")
    scores = learn(shuffled, batch).scores[:, 0]
    np.testing.assert_allclose(scores, base, rtol=1e-7, atol=1e-9 * np.abs(base).max(),
                               err_msg="predictions with each example's features shuffled")
    w = state.weights[0]
    np.testing.assert_allclose(shuffled.weights[0], w, rtol=1e-7, atol=1e-9 * np.abs(w).max(),
                               err_msg="weights with each example's features shuffled")


def check_one_against_all(algorithm: str) -> None:
    """With n_classes=3 every prediction and the state stay finite, and learner k predicts
    exactly what a binary learner given +1 for class k + 1 and −1 otherwise predicts."""
    X, y = stream(n=200)
    labels = np.random.default_rng(6).integers(1, 4, size=len(y)).astype(float)
    labels[y > 0] = 1.0  # class 1 is learnable, 2 and 3 are noise
    state = new_state(algorithm, X.shape[1], "logistic", n_classes=3)
    result = learn(state, dense_batch(X, labels, bias=False))
    assert np.isfinite(result.scores).all(), "a one-against-all prediction is not finite"
    assert np.isfinite(result.losses).all(), "a one-against-all loss is not finite"
    assert all(np.isfinite(a).all() for a in (state.V, state.M, state.S)), \
        "the one-against-all state is not finite"
    for k in range(3):
        scores, binary = run(algorithm, X, np.where(labels == k + 1, 1.0, -1.0))
        same_bits(result.scores[:, k].copy(), scores, f"class {k + 1}: one-against-all vs "
                                                        f"binary predictions")
        same_bits(state.dense_vectors()[:, k].copy(), binary.dense_vectors()[:, 0].copy(),
                   f"class {k + 1}: one-against-all vs binary state vectors")


def check_arrow_round_trip(algorithm: str) -> None:
    """to_arrow/from_arrow restores the state bit for bit, and learning goes on identically."""
    X, y = stream(n=200)
    _, state = run(algorithm, X[:100], y[:100])
    restored = from_arrow(to_arrow(state))
    same_state(state, restored, "restored from Arrow")
    assert (restored.examples_seen, restored.cumulative_loss) == (100, state.cumulative_loss), \
        "examples seen or cumulative loss not restored"
    batch = dense_batch(X[100:], y[100:], bias=False)
    same_bits(learn(state, batch).scores, learn(restored, batch).scores,
               "predictions after the round trip")


def check_arrow_rows(algorithm: str) -> None:
    """The Arrow table has exactly the (class, feature) rows that left their initial state, all
    among the features examples carried (sparse examples over 40 of 300 features, 3 classes)."""
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
    changed = ((state.dense_vectors() != init.dense_vectors()).any(axis=0)
               | (state.dense_matrices() != 0).any(axis=(0, 3)))
    rows = sorted(zip(table.column("class").to_pylist(), table.column("index").to_pylist()))
    assert sorted(zip(*(a.tolist() for a in np.nonzero(changed)))) == rows, \
        "the Arrow rows are not the (class, feature) pairs whose state changed"
    assert set(table.column("index").to_pylist()) <= set(used.tolist()), \
        "an Arrow row for a feature no example carried"
    same_state(from_arrow(table), state, "restored from the sparse table")


def check_slots_equal_dense_layout(algorithm: str) -> None:
    """Keeping state only for the features examples carried (slots, in order of first
    appearance) gives bit for bit the predictions, losses and state of the compiled loop run on
    state laid out over all ``dim`` features and fed the feature indices themselves: sparse
    examples over 40 of 512 features that appear over time, in any order within an example,
    binary and with 3 one-against-all classes, in batches of 1 to 50."""
    rng = np.random.default_rng(8)
    dim, n = 512, 400
    used = rng.choice(dim, size=40, replace=False)
    scale = 10.0 ** rng.integers(-3, 4, size=40)
    for n_classes in (1, 3):
        state = new_state(algorithm, dim, "logistic", n_classes=n_classes)
        V = np.empty((state.V.shape[0], n_classes, dim))
        V[...] = state.initial()[:, None, None]
        M, S = np.zeros(state.M.shape[:2] + (dim, dim)), state.S.copy()
        start = 0
        while start < n:
            size = int(rng.integers(1, 51))
            rows = [rng.permutation(min(40, 3 + (start + r) // 8))[:rng.integers(1, 7)]
                    for r in range(size)]  # features 0..k of ``used``, k growing over time
            cols = np.concatenate(rows)
            labels = (rng.integers(1, 4, size) if n_classes > 1
                      else rng.choice([-1.0, 1.0], size)).astype(float)
            batch = make_batch(np.concatenate([[0], np.cumsum([len(r) for r in rows])]),
                               used[cols], rng.normal(size=len(cols)) * scale[cols], labels)
            result = learn(state, batch)
            scores, losses = np.empty((size, n_classes)), np.empty(size)
            run_batch(state.spec.code, V, M, S, state.hp_array(), LOSS_CODES["logistic"], 0.5,
                      batch.indptr, batch.indices, batch.values, learner_labels(state, labels),
                      batch.weights, np.zeros(size, dtype=np.bool_), scores, losses)
            same_bits(result.scores, scores, f"{n_classes} classes: predictions")
            same_bits(result.losses, losses, f"{n_classes} classes: losses")
            start += size
        same_bits(state.dense_vectors(), V, f"{n_classes} classes: state vectors")
        same_bits(state.dense_matrices(), M, f"{n_classes} classes: state matrices")
        same_bits(state.S, S, f"{n_classes} classes: scalars")
        assert state.n_slots == len(np.unique(used)) and state.capacity < dim, \
            f"{state.n_slots} slots, room for {state.capacity}: not kept per feature carried"


def _set(array, position, value):
    array[position] = value


# case -> (how to corrupt example 3 of (X, y), what the error message must say)
BAD_EXAMPLES = {
    "nan feature": (lambda X, y: _set(X, (3, 1), np.nan), "not finite"),
    "inf feature": (lambda X, y: _set(X, (3, 0), np.inf), "not finite"),
    "nan label": (lambda X, y: _set(y, 3, np.nan), "label nan"),
    "label outside the loss's domain": (lambda X, y: _set(y, 3, 2.0), "label 2.0"),
}


def check_bad_examples_refused(algorithm: str) -> None:
    """A batch with a bad example (NaN or infinite feature, NaN label, a label outside the loss's
    domain) raises InvalidExampleError naming its position, and the state is left untouched."""
    X, y = stream(n=20)
    for case, (corrupt, expected) in BAD_EXAMPLES.items():
        state = new_state(algorithm, X.shape[1], "logistic")
        learn(state, dense_batch(X[:10], y[:10], bias=False))
        before = to_arrow(state)
        Xb, yb = X[10:].copy(), y[10:].copy()
        corrupt(Xb, yb)
        try:
            learn(state, dense_batch(Xb, yb, bias=False))
        except InvalidExampleError as err:
            assert expected in str(err), f"{case}: message {str(err)!r} lacks {expected!r}"
            assert err.position == 3, f"{case}: position {err.position}, not 3"
            assert "example 3 of the batch" in str(err), f"{case}: message {str(err)!r}"
        else:
            raise AssertionError(f"{case}: the batch was learned, not refused")
        after = to_arrow(state)
        assert after.equals(before) and after.schema.metadata == before.schema.metadata, \
            f"{case}: the refused batch changed the state"
        assert state.examples_seen == 10, f"{case}: examples_seen {state.examples_seen}"


def check_explicit_zeros(algorithm: str) -> None:
    """An explicit zero value is an absent feature: the same predictions as without it."""
    X, y = stream(n=50, d=3)
    dense = dense_batch(X, y, bias=False)
    # the same examples with an explicit zero for a never-seen feature 4 in every row
    n = len(y)
    indptr = np.arange(0, 5 * n + 1, 5)
    indices = np.hstack([np.tile([0, 1, 2, 3], (n, 1)), np.full((n, 1), 4)]).ravel()
    values = np.hstack([X, np.zeros((n, 1))]).ravel()
    a, b = new_state(algorithm, 5), new_state(algorithm, 5)
    same_bits(learn(a, dense).scores, learn(b, make_batch(indptr, indices, values, y)).scores,
               "predictions with explicit zeros")


def check_an_example_without_features(algorithm: str) -> None:
    """An example without a feature (none, or only zeros, with no bias), a fresh model's first
    or later, is predicted 0 and learned without an error (NAG's step divided by its N, still 0:
    ZeroDivisionError stopped the run)."""
    X, y = stream(n=20, d=3)
    empty = make_batch(np.zeros(2, dtype=np.int64), np.zeros(0, dtype=np.int64),
                       np.zeros(0), np.array([1.0]))
    fresh = new_state(algorithm, 4)
    assert predict_next(fresh, empty)[0, 0] == 0.0, "a fresh model's score of nothing"
    assert learn(fresh, empty).scores[0, 0] == 0.0, "a fresh model learning nothing"
    learn(fresh, dense_batch(X, y, bias=False))
    assert learn(fresh, empty).scores[0, 0] == 0.0, "a trained model's score of nothing"
    assert all(np.isfinite(a).all() for a in (fresh.V, fresh.M, fresh.S)), \
        "the state is not finite after examples without features"


def check_saturated_gradient(algorithm: str) -> None:
    """A saturated loss whose squared gradient underflows (yŷ = 400: g x ≈ 1e-174 squares to 0)
    leaves the state finite: an update dividing by Σg² must be skipped, not divide by zero."""
    spec = get_algorithm(algorithm)
    state = new_state(algorithm, 2, "logistic")
    slot = state.map_features([0])[0]
    state.V[0, 0, slot] = 400.0  # w
    if spec.scale:
        state.V[spec.vectors.index(spec.scale), 0, slot] = 1.0  # feature 0 seen at scale 1
    learn(state, dense_batch([[1.0]], [1]))
    assert all(np.isfinite(a).all() for a in (state.V, state.M, state.S)), \
        "the state is not finite after a saturated example"


def check_non_finite_outcome_refused(algorithm: str) -> None:
    """With squared loss, labels of 1e90 and a feature value of 1e99, an example whose
    prediction, loss or resulting state is not finite is refused by learn_or_refuse exactly when
    plain learning overflows, and leaves no trace: the state is that of learning the others."""
    X, y = stream(n=120, d=4)
    y = y.copy()
    y[[30, 31, 77]] = [1e90, -1e90, 1e95]
    X = X.copy()
    X[50, 1] = 1e99  # a feature value at the bound, whose square still fits in float64
    plain = new_state(algorithm, X.shape[1], "squared")
    with np.errstate(all="ignore"):
        outcome = learn(plain, dense_batch(X, y, bias=False))
    overflows = not all(np.isfinite(a).all() for a in (outcome.scores, outcome.losses, plain.V,
                                                      plain.S, plain.M))
    state = new_state(algorithm, X.shape[1], "squared")
    with np.errstate(all="ignore"):
        rows, result, refused = learn_or_refuse(state, dense_batch(X, y, bias=False))
    assert bool(refused) == overflows, \
        f"refused {refused} but plain learning {'overflows' if overflows else 'stays finite'}"
    assert all("finite" in reason for _, reason in refused), f"reasons: {refused}"
    kept = np.setdiff1d(np.arange(len(y)), [r for r, _ in refused])
    assert rows.tolist() == kept.tolist(), "the rows learned are not the rows not refused"
    clean = new_state(algorithm, X.shape[1], "squared")
    with np.errstate(all="ignore"):
        expected = learn(clean, dense_batch(X[kept], y[kept], bias=False))
    same_bits(result.scores, expected.scores, "predictions vs learning the kept rows alone")
    same_state(state, clean, "state vs learning the kept rows alone")
    assert (state.examples_seen, state.cumulative_loss) == (clean.examples_seen,
                                                            clean.cumulative_loss), \
        "examples seen or cumulative loss vs learning the kept rows alone"
    assert np.isfinite(state.V).all() and np.isfinite(state.S).all(), "the state is not finite"


# --- which checks apply ----------------------------------------------------------------------

INVARIANCE_CHECKS: dict[str, tuple[Callable[[str], None], ...]] = {
    "diagonal": (check_scale_invariance,),
    "linear": (check_scale_invariance, check_linear_invariance),
    "none": (check_not_scale_invariant,),
}

GENERIC_CHECKS: tuple[Callable[[str], None], ...] = (
    check_slots_equal_dense_layout, check_batch_sizes, check_model_dimension, check_shuffled_feature_order, check_one_against_all,
    check_arrow_round_trip, check_arrow_rows, check_bad_examples_refused, check_explicit_zeros,
    check_an_example_without_features, check_saturated_gradient, check_non_finite_outcome_refused,
    check_many_keys_equal_each_alone, check_predict_next_writes_nothing,
    check_one_model_serves_many_threads,
)


def checks_for(algorithm: str) -> list[Callable[[str], None]]:
    """The checks (functions of the algorithm's name) that apply to a registered learner."""
    spec = get_algorithm(algorithm)
    try:
        invariance = INVARIANCE_CHECKS[spec.invariance]
    except KeyError:
        raise ValueError(f"{algorithm}: unknown invariance {spec.invariance!r}; one of "
                         f"{', '.join(INVARIANCE_CHECKS)}") from None
    return list(invariance) + list(GENERIC_CHECKS)


def yield_checks(algorithm: str) -> Iterator[Callable[[], None]]:
    """The checks that apply to the learner, each bound to it: call ``check()``."""
    for check in checks_for(algorithm):
        bound = functools.partial(check, algorithm)
        functools.update_wrapper(bound, check)
        yield bound
