"""Learner states trained on a few made-up examples, for the tests of checkpoint files."""
import numpy as np

from unitless.learner import dense_batch, learn, new_state


def trained_state(algorithm="nag", n=60, dim=6, seed=0):
    """A ``dim``-weight logistic state of ``algorithm`` after ``n`` examples whose features'
    scales span 10^-2..10^2."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dim - 1)) * 10.0 ** rng.integers(-2, 3, size=dim - 1)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    state = new_state(algorithm, dim, "logistic")
    learn(state, dense_batch(X, y))
    return state
