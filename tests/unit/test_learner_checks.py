"""The learner check suite (unitless/learner/checks.py) run against every registered learner, and
the few checks that are about one learner or the public API rather than every learner."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from unitless.learner import (ALGORITHMS, InvalidExampleError, dense_batch, learn,
                              learn_or_refuse, new_state)
from unitless.learner.checks import checks_for, run, stream

CHECKS = [(algorithm, check) for algorithm in ALGORITHMS for check in checks_for(algorithm)]


@pytest.mark.parametrize("algorithm, check", CHECKS,
                         ids=[f"{a}-{c.__name__}" for a, c in CHECKS])
def test_learner(algorithm, check):
    check(algorithm)


def test_every_learner_gets_the_checks_its_registry_entry_calls_for():
    names = {a: [c.__name__ for c in checks_for(a)] for a in ALGORITHMS}
    for algorithm, spec in ALGORITHMS.items():
        assert ("check_scale_invariance" in names[algorithm]) == (spec.invariance != "none")
        assert ("check_linear_invariance" in names[algorithm]) == (spec.invariance == "linear")
        assert ("check_not_scale_invariant" in names[algorithm]) == (spec.invariance == "none")
        assert "check_batch_sizes" in names[algorithm]
    assert names["kotlowski2"][:2] == ["check_scale_invariance", "check_linear_invariance"]


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


def test_multiclass_labels_must_be_classes():
    state = new_state("nag", 3, "logistic", n_classes=3)
    with pytest.raises(InvalidExampleError, match="not a class in 1..3"):
        learn(state, dense_batch(np.ones((2, 2)), [1, 4]))


def test_unknown_algorithm_and_hyperparameter_are_clear_errors():
    with pytest.raises(ValueError, match="unknown algorithm 'nagg'"):
        new_state("nagg", 3)
    with pytest.raises(ValueError, match="has no hyperparameter"):
        new_state("scinol2", 3, learning_rate=0.1)


def test_values_beyond_the_bound_are_refused_before_learning():
    state = new_state("nag", 3, "squared")
    X = np.array([[1.0, 2.0], [1e101, 1.0], [1.0, 1.0]])
    rows, _, refused = learn_or_refuse(state, dense_batch(X, [1.0, 2.0, 1e101]))
    assert rows.tolist() == [0] and [r for r, _ in refused] == [1, 2]
    assert "|x| ≤ 1e+100" in refused[0][1] and "|y| ≤ 1e+100" in refused[1][1]


def test_a_failing_check_says_what_broke():
    # a learner registered as invariant that is not: check_scale_invariance fails, naming the loss
    from unitless.learner import checks
    with pytest.raises(AssertionError, match="logistic loss: predictions on rescaled features"):
        checks.check_scale_invariance("adagrad")
    with pytest.raises(AssertionError, match="invariance='none'"):
        checks.check_not_scale_invariant("nag")


LEARNER_DIR = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "unitless",
                           "learner")
PROBE = textwrap.dedent("""
    import numpy as np
    from unitless.learner import dense_batch, learn, new_state
    import unitless.learner.kernel as kernel
    assert kernel.__file__.startswith({root!r}), kernel.__file__
    state = new_state("sgd", 3, "squared")
    print(learn(state, dense_batch([[1.0, 2.0]], [1.0])).losses[0])
""")


def test_an_edited_step_module_is_recompiled_not_taken_from_the_stale_cache(tmp_path):
    # numba keys a function's disk cache on its own file, but the compiled loop in kernel.py
    # holds every step function: kernel.py keys the package's caches on all their sources, so an
    # edit to a step module is seen by the next process. (On a copy of the package whose
    # registry holds sgd alone, so that compiling takes a second.)
    package = tmp_path / "unitless"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copytree(LEARNER_DIR, package / "learner",
                    ignore=shutil.ignore_patterns("__pycache__"))
    registry = package / "learner" / "registry.py"
    registry.write_text(registry.read_text() + "\nALGORITHMS = {'sgd': ALGORITHMS['sgd']}\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    for name in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT"):  # the cache beside the copied sources
        env.pop(name, None)

    def probe():
        out = subprocess.run([sys.executable, "-c", PROBE.format(root=str(tmp_path))], env=env,
                             cwd=tmp_path, capture_output=True, text=True, check=True)
        assert "Warning" not in out.stderr, out.stderr  # the experimental-feature one included
        return float(out.stdout)

    assert probe() == 1.0  # ŷ = 0: squared loss (1 − 0)²
    cache = package / "learner" / "__pycache__"
    assert list(cache.glob("kernel.run_batch*.nbi")), "the compiled loop was not cached on disk"
    assert probe() == 1.0  # from the cache
    baselines = package / "learner" / "baselines.py"
    source = baselines.read_text()
    found = "return _dot(V[0, k], idx, val)"  # (sgd_predict's, the first)
    edited = source.replace(found, "return 3.0 + " + found[len("return "):], 1)
    assert edited != source
    baselines.write_text(edited)
    assert probe() == 4.0  # ŷ = 3 from the edited sgd_predict, not the cached loop's old one


@pytest.mark.parametrize("name,value,message", [
    ("learning_rate", -1.0, "--learning-rate is -1; it must be > 0"),
    ("learning_rate", float("nan"), "--learning-rate is nan"),
    ("beta1", 1.0, "--beta1 is 1; it must be in (0, 1)"),
    ("epsilon", 0.0, "--epsilon is 0; it must be > 0"),
])
def test_hyperparameters_out_of_range_are_refused_where_learners_are_made(name, value, message):
    algorithm = "adam" if name in ("beta1", "epsilon") else "nag"
    with pytest.raises(ValueError, match=re.escape(message)):
        new_state(algorithm, 4, "logistic", **{name: value})


def test_each_learner_says_what_its_hyperparameters_mean():
    from unitless.learner.registry import meaning
    assert "numerical guard" in meaning(ALGORITHMS["adam"], "epsilon")
    assert "initial wealth" in meaning(ALGORITHMS["scinol2"], "epsilon")
    assert meaning(ALGORITHMS["cocob"], "alpha") != meaning(ALGORITHMS["kotlowski1"], "alpha")


def test_a_loss_that_would_make_the_cumulative_loss_infinite_is_refused():
    # each loss finite, their sum not: a checkpoint holding it could not be read back
    # (from_arrow refuses a cumulative loss that is not finite), so the example is refused,
    # by one model learning alone and by many learning together alike
    from unitless.learner.many import ManyStates
    from unitless.learner.arrow_form import from_arrow, to_arrow
    batch = dense_batch(np.array([[1e95], [1.0]]), np.array([0.0, 1.0]), bias=False)
    for together in (False, True):
        state = new_state("sgd", 1, "squared")
        state.V[0, 0, state.map_features([0])[0]] = 1e55  # ŷ = 1e150: a loss of 1e300
        state.cumulative_loss = np.finfo(np.float64).max
        if together:
            many = ManyStates(new_state("sgd", 1, "squared"))
            many.adopt("k", state)
            kept, result, refused, _ = many.learn(np.zeros(2, np.int64), batch)
            state = many.state_of(0)
        else:
            kept, result, refused = learn_or_refuse(state, batch)
        assert refused == [(0, "the model's cumulative loss with it is not finite")]
        assert kept.tolist() == [1] and np.isfinite(result.losses).all()
        assert state.examples_seen == 1
        from_arrow(to_arrow(state))  # (readable)
