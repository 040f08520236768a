"""One prediction that does not change the model (``predict_next``): what the model would
predict for an example were it the next one it learns, for every learner, bit for bit, from a
checkpoint as from the running model; the model as it was after every prediction."""
import numpy as np
import pytest

from unitless.learner import (ALGORITHMS, dense_batch, from_arrow, learn, new_state, predict,
                              predict_next, to_arrow)

N = 150


def stream(decades, seed=0, n=N + 10, d=5):
    """Features of scales spread over ``decades`` (10^-3 up), a label from a linear rule."""
    rng = np.random.default_rng(seed)
    scales = np.logspace(-3, decades - 3, d)
    X = rng.normal(size=(n, d)) * scales
    y = np.where(X @ (1.0 / scales) + rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def trained(algorithm, loss, X, y, n_classes=1):
    labels = y if n_classes == 1 else np.where(y > 0, 1.0, 2.0)
    state = new_state(algorithm, X.shape[1] + 1, loss, n_classes)
    learn(state, dense_batch(X[:N], labels[:N]))
    return state, labels


def copy(state):
    """The model as a checkpoint holds it."""
    return from_arrow(to_arrow(state))


CASES = [(a, "logistic", 1) for a in ALGORITHMS] + [(a, "squared", 1) for a in ALGORITHMS] + [
    ("nag", "logistic", 3), ("scinol2", "hinge", 3)]


@pytest.mark.parametrize("algorithm, loss, n_classes", CASES)
def test_a_checkpoint_predicts_the_next_example_as_training_does(algorithm, loss, n_classes):
    # (squared loss on features of scales 10^7 apart makes the learners that are not invariant
    # diverge: their state would not be finite, nor a checkpoint of it)
    X, y = stream(7 if loss != "squared" else 1)
    state, labels = trained(algorithm, loss, X, y, n_classes)
    checkpoint = copy(state)
    unlabeled = dense_batch(X[N:], np.full(len(X) - N, np.nan))
    served = predict_next(checkpoint, unlabeled)
    for j in range(len(X) - N):  # each as the next example the model learns
        alone = copy(state)
        expected = learn(alone, dense_batch(X[N + j:N + j + 1], labels[N + j:N + j + 1])).scores
        assert np.array_equal(served[j], expected[0]), (algorithm, j)
    # the model is as it was: it learns the rest as the model that served nothing
    after = learn(checkpoint, dense_batch(X[N:], labels[N:])).scores
    assert np.array_equal(after, learn(copy(state), dense_batch(X[N:], labels[N:])).scores)


def test_nag_predicts_a_feature_at_a_new_scale_as_it_would_learn_it():
    """NAG rescales a weight when its feature arrives larger than ever before, then predicts:
    the stored weights times the new value are not its prediction (the blow-up scale-invariant
    learners exist to prevent)."""
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.uniform(-4000, 4000, 500), rng.normal(size=500)])
    y = np.where(X[:, 0] / 4000 + X[:, 1] > 0, 1.0, -1.0)
    state = new_state("nag", 3, "logistic")
    learn(state, dense_batch(X, y))
    far = dense_batch(np.array([[5e6, 0.5]]), np.array([np.nan]))
    served = predict_next(copy(state), far)[0, 0]
    assert served == learn(copy(state), dense_batch(np.array([[5e6, 0.5]]), [1.0])).scores[0, 0]
    assert abs(predict(copy(state), far)[0, 0]) > 100 * abs(served)
