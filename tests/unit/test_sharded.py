"""One model over feature shards (learner/sharded.py): one shard is the unsharded learner bit for
bit, several with delay 0 equal it to 1e-12, a delay lets parts miss at most τ gradients, and
every shard applies every example's gradient exactly once."""
import numpy as np
import pytest

from unitless.learner import dense_batch, learn, new_state
from unitless.learner.checks import stream
from unitless.learner.sharded import (SHARDABLE, learn_with_delay, merge, new_shards, shard_of,
                                      split_batch)


def sharded_batch(n=500, seed=4, K=1):
    X, y = stream(n=n, d=40, seed=seed)  # more features than a new state has room for
    rng = np.random.default_rng(seed)
    X[rng.random(X.shape) < 0.25] = 0.0  # examples without some shards' features
    if K > 1:
        y = rng.integers(1, K + 1, size=n).astype(float)
    return dense_batch(X, y, weights=rng.random(n) * 2, bias=False), X.shape[1]


def close(got, expected):
    """Equal to 1e-12 relative to the values' scale: a sum over shards rounds relative to its
    terms, not to the (possibly cancelling) total."""
    scale = np.abs(expected).max() if expected.size else 0.0
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * scale)


@pytest.mark.parametrize("algorithm", SHARDABLE)
def test_one_shard_is_the_unsharded_learner_bit_for_bit(algorithm):
    batch, dim = sharded_batch()
    alone = new_state(algorithm, dim)
    expected = learn(alone, batch)
    shards = new_shards(1, algorithm, dim)
    got = learn_with_delay(shards, batch)
    assert got.scores.tobytes() == expected.scores.tobytes()
    assert got.losses.tobytes() == expected.losses.tobytes()
    model = merge(shards)
    assert model.dense_vectors().tobytes() == alone.dense_vectors().tobytes()
    assert model.S.tobytes() == alone.S.tobytes()
    assert (model.examples_seen, model.cumulative_loss) == (alone.examples_seen,
                                                            alone.cumulative_loss)


@pytest.mark.parametrize("algorithm", SHARDABLE)
@pytest.mark.parametrize("K", [1, 3])
def test_four_shards_without_delay_equal_the_unsharded_learner(algorithm, K):
    batch, dim = sharded_batch(K=K)
    alone = new_state(algorithm, dim, n_classes=K)
    expected = learn(alone, batch)
    shards = new_shards(4, algorithm, dim, n_classes=K)
    assert all(len(p.indices) for p in split_batch(batch, 4))  # every shard holds features
    got = learn_with_delay(shards, batch, max_delay=0)
    close(got.scores, expected.scores)
    close(got.losses, expected.losses)
    model = merge(shards)
    for got_vector, vector in zip(model.dense_vectors(), alone.dense_vectors()):
        close(got_vector, vector)
    close(model.S, alone.S)
    assert model.examples_seen == alone.examples_seen == len(batch)


def test_a_delay_lets_a_part_miss_at_most_tau_gradients_and_each_is_applied_once():
    """ScInOL2 starts at w = 0: with τ = 7 the first 8 predictions come from the initial model,
    the 9th does not. G_i = −Σ_t g_t x_{t,i} on every shard: each gradient applied exactly
    once to every coordinate."""
    batch, dim = sharded_batch(n=300)
    tau = 7
    shards = new_shards(3, "scinol2", dim)
    result = learn_with_delay(shards, batch, max_delay=tau)
    assert not result.scores[:tau + 1].any() and result.scores[tau + 1, 0] != 0.0
    y, y_hat = batch.labels, result.scores[:, 0]
    g = -y / (1.0 + np.exp(y * y_hat)) * batch.weights  # logistic ∂ℓ/∂ŷ, weighted
    X = np.zeros((len(batch), dim))
    rows = np.repeat(np.arange(len(batch)), np.diff(batch.indptr))
    X[rows, batch.indices] = batch.values
    G = merge(shards).dense_vectors()[2, 0]
    np.testing.assert_allclose(G, -(g[:, None] * X).sum(axis=0), rtol=1e-12, atol=1e-15)
    assert all(s.examples_seen == len(batch) for s in shards)
    # the same stream with no delay predicts differently from the 2nd example on
    exact = learn_with_delay(new_shards(3, "scinol2", dim), batch, max_delay=0)
    assert exact.scores[1, 0] != 0.0


def test_counts_are_kept_alike_by_every_shard_and_sums_are_split_over_them():
    batch, dim = sharded_batch(n=200)
    shards = new_shards(4, "nag", dim)
    learn_with_delay(shards, batch, max_delay=5)
    assert [s.S[0, 0] for s in shards] == [len(batch)] * 4  # t
    parts = [s.S[0, 1] for s in shards]  # N_s
    assert all(p > 0 for p in parts)
    assert merge(shards).S[0, 1] == pytest.approx(sum(parts), rel=1e-15)


def test_features_spread_evenly_over_shards():
    hashed = np.random.default_rng(0).integers(0, 1 << 24, size=200_000)
    for n_shards in (2, 3, 8):
        counts = np.bincount(shard_of(hashed, n_shards), minlength=n_shards)
        assert len(counts) == n_shards
        assert np.abs(counts / len(hashed) - 1 / n_shards).max() < 0.01
    dense = np.bincount(shard_of(np.arange(22), 2), minlength=2)  # a dense model's columns
    assert dense.min() >= 7


def test_a_learner_that_cannot_be_split_is_a_clear_error():
    with pytest.raises(ValueError, match="kotlowski2 cannot be split over feature shards"):
        new_shards(2, "kotlowski2", 4)
    with pytest.raises(ValueError, match="at least one shard"):
        new_shards(0, "nag", 4)
    with pytest.raises(ValueError, match="delay bound"):
        batch, dim = sharded_batch(n=5)
        learn_with_delay(new_shards(2, "nag", dim), batch, max_delay=-1)


def test_a_delayed_update_uses_the_bet_its_prediction_was_made_with():
    """ScInOL2 with τ = 9 (blocks of 10) against a plain numpy transcription of the delayed
    protocol: each example's wealth update η_i −= g x_i w_{t,i} uses the w_{t,i} of its own
    prediction, not the one a later prediction left in the state."""
    rng = np.random.default_rng(2)
    n, d, tau = 60, 5, 9
    X = rng.normal(size=(n, d)) * [1e-3, 1.0, 1e3, 1.0, 1e2]
    X[rng.random(X.shape) < 0.3] = 0.0
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    shards = new_shards(2, "scinol2", d)
    got = learn_with_delay(shards, dense_batch(X, y, bias=False), max_delay=tau)

    S2, G, M, eta = np.zeros(d), np.zeros(d), np.zeros(d), np.ones(d)
    scores = []
    for a in range(0, n, tau + 1):
        bets = []
        for x in X[a:a + tau + 1]:
            on = x != 0
            M[on] = np.maximum(M[on], np.abs(x[on]))
            root = np.sqrt(S2 + M ** 2, where=on, out=np.ones(d))
            theta = G / root
            w = np.where(on, np.sign(theta) * np.minimum(np.abs(theta), 1.0) / (2 * root) * eta,
                         0.0)
            bets.append(w)
            scores.append(w @ x)
        for x, label, w, y_hat in zip(X[a:a + tau + 1], y[a:a + tau + 1], bets,
                                      scores[a:a + tau + 1]):
            gx = -label / (1.0 + np.exp(label * y_hat)) * x
            G, S2, eta = G - gx, S2 + gx ** 2, eta - gx * w
    close(got.scores[:, 0], np.array(scores))
    model = merge(shards).dense_vectors()[:, 0]
    for name, expected in (("S2", S2), ("G", G), ("eta", eta)):
        close(model[("w", "S2", "G", "M", "eta").index(name)], expected)
