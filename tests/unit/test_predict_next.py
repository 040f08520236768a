"""One prediction that does not change the model (``predict_next``): what the model would
predict for an example were it the next one it learns, for every learner, bit for bit, from a
checkpoint as from the running model; the model as it was after every prediction."""
import numpy as np
import pytest

from unitless.learner import (ALGORITHMS, dense_batch, from_arrow, learn, learn_or_refuse,
                              new_state, predict, predict_next, to_arrow)

N = 150


def scaled_stream(decades, seed=0, n=N + 10, d=5):
    """Features of scales spread over ``decades`` (10^-3 up), a label from a linear rule."""
    rng = np.random.default_rng(seed)
    scales = np.logspace(-3, decades - 3, d)
    X = rng.normal(size=(n, d)) * scales
    y = np.where(X @ (1.0 / scales) + rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def learned_first(algorithm, loss, X, y, n_classes=1):
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
    X, y = scaled_stream(7 if loss != "squared" else 1)
    state, labels = learned_first(algorithm, loss, X, y, n_classes)
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


@pytest.mark.parametrize("algorithm, loss, n_classes", CASES)
def test_served_examples_mixed_in_change_nothing_and_predict_as_their_twins(algorithm, loss,
                                                                          n_classes):
    """A batch where a third of the examples have no label (served), some with a feature no
    labeled example has: the labeled ones are learned as a batch of them alone, bit for bit,
    and each served one gets the prediction its labeled twin placed right after it gets."""
    X, y = scaled_stream(7 if loss != "squared" else 1, seed=5)
    labels = y if n_classes == 1 else np.where(y > 0, 1.0, 2.0)
    served = np.random.default_rng(1).random(len(X)) < 1 / 3
    X = np.column_stack([X, np.where(served & (np.arange(len(X)) % 2 == 0), 3.0, 0.0)])
    mixed = new_state(algorithm, X.shape[1] + 1, loss, n_classes)
    rows, result, refused = learn_or_refuse(mixed, dense_batch(X, np.where(served, np.nan,
                                                                           labels)), served)
    alone = new_state(algorithm, X.shape[1] + 1, loss, n_classes)
    labeled = np.flatnonzero(~served)
    kept, learned, refused_alone = learn_or_refuse(alone, dense_batch(X[labeled],
                                                                      labels[labeled]))
    # (what diverges is refused alike: examples of the labeled run alone, none served)
    assert [(int(labeled[r]), why) for r, why in refused_alone] == refused
    assert rows.tolist() == sorted(set(range(len(X))) - {r for r, _ in refused})
    is_served = served[rows]
    assert np.isnan(result.losses[is_served]).all()
    assert np.array_equal(result.scores[~is_served], learned.scores)
    assert np.array_equal(result.losses[~is_served], learned.losses)
    assert to_arrow(mixed).equals(to_arrow(alone), check_metadata=True)
    assert np.array_equal(mixed.dense_vectors(), alone.dense_vectors())
    assert np.array_equal(mixed.S, alone.S)
    assert (mixed.examples_seen, mixed.cumulative_loss) == (alone.examples_seen,
                                                            alone.cumulative_loss)
    learned_rows = labeled[kept]
    for at, j in enumerate(rows[is_served][:12]):
        twin = new_state(algorithm, X.shape[1] + 1, loss, n_classes)
        then_twin = np.append(learned_rows[learned_rows < j], j)
        twin_scores = learn(twin, dense_batch(X[then_twin], labels[then_twin])).scores
        assert np.array_equal(result.scores[is_served][at], twin_scores[-1]), (algorithm, j)


def test_a_served_example_the_learner_refuses_is_refused_with_its_reason():
    """A served example is checked as a learned one is (its features, its weight): a value
    that is not finite is refused, not served, and the rest go on."""
    X = np.ones((4, 2))
    X[2, 0] = np.inf
    state = new_state("nag", 3, "logistic")
    served = np.array([False, True, True, True])
    rows, result, refused = learn_or_refuse(state, dense_batch(X, [1.0, np.nan, np.nan, np.nan]),
                                            served)
    assert rows.tolist() == [0, 1, 3] and [r for r, _ in refused] == [2]
    assert "not finite" in refused[0][1] and state.examples_seen == 1
