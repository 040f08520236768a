"""What the learner check suite's checks share: the data they learn, a run over it, and bit for
bit comparisons."""
from typing import Any, Optional

import numpy as np

from .examples import dense_batch
from .online import learn
from .state import LearnerState, new_state


def stream(n: int = 400, d: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Logistic data whose features differ in scale by orders of magnitude, with a bias column:
    (X [n, d + 1], y in ±1)."""
    rng = np.random.default_rng(seed)
    sigma = 2.0 ** rng.integers(-8, 9, size=d)
    X = rng.normal(size=(n, d)) * sigma
    w_star = rng.choice([-1.0, 1.0], size=d) / sigma
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ w_star)), 1.0, -1.0)
    return np.hstack([X, np.ones((n, 1))]), y


def run(algorithm: str, X: np.ndarray, y: np.ndarray, loss: str = "logistic",
        batch_size: Optional[int] = None, **hp: Any) -> tuple[np.ndarray, LearnerState]:
    """Learn the rows of X in order (in batches of ``batch_size``, default one batch); returns
    (the predictions made before each update [n], the final state)."""
    state = new_state(algorithm, X.shape[1], loss, **hp)
    batch = dense_batch(X, y, bias=False)
    size = batch_size or len(batch)
    scores = [learn(state, batch.slice(a, min(a + size, len(batch)))).scores
              for a in range(0, len(batch), size)]
    return np.vstack(scores)[:, 0], state


def same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.tobytes() == b.tobytes(), f"{what} differ"


def same_state(a: LearnerState, b: LearnerState, what: str = "state") -> None:
    for name, x, y in (("V", a.dense_vectors(), b.dense_vectors()),
                       ("M", a.dense_matrices(), b.dense_matrices()), ("S", a.S, b.S)):
        same_bits(x, y, f"{what}: {name}")
