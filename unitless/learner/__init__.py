"""Scale-invariant online learners, free of Beam and I/O.

    >>> import numpy as np
    >>> from unitless.learner import new_state, dense_batch, learn
    >>> X = np.array([[1.0, 2000.0], [-1.0, 1000.0], [2.0, -3000.0]])
    >>> state = new_state("scinol2", dim=3, loss="logistic", bias_index=2)
    >>> result = learn(state, dense_batch(X, [1, -1, 1]))
    >>> result.scores.shape, state.examples_seen
    ((3, 1), 3)

``unitless.learner.checks`` holds the check suite every registered learner passes
(``for check in yield_checks("nag"): check()``); ``registry.py`` says how to add a learner.
"""
from .examples import Batch, bias_index, dense_batch, dense_dim, hash_feature, hashed_batch, make_batch
from .losses import LOSS_CODES, loss_values
from .online import (BatchResult, InvalidExampleError, check_batch, check_examples,
                     example_losses, learn, learn_or_refuse, learner_labels, mistakes, predict,
                     predict_next, predicted_class, probability)
from .arrow_form import from_arrow, read_metadata, to_arrow
from .registry import ALGORITHMS, get_algorithm
from .state import LearnerState, new_state

__all__ = [
    "ALGORITHMS", "Batch", "BatchResult", "InvalidExampleError", "LOSS_CODES", "LearnerState",
    "bias_index", "check_batch", "check_examples", "dense_batch", "dense_dim", "example_losses",
    "from_arrow", "get_algorithm", "hash_feature", "hashed_batch", "learn", "learn_or_refuse",
    "learner_labels", "loss_values", "make_batch", "mistakes", "new_state", "predict",
    "predict_next", "predicted_class", "probability", "read_metadata", "to_arrow",
]
