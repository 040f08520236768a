"""Learner state: a few named flat numpy arrays and scalars (its Arrow form: arrow_form.py).

The Arrow table has one row per (class, feature) whose state differs from the initial state,
columns ``class``, ``index``, ``name`` and one per state vector (matrices: one list column per
matrix holding that feature's row), and the schema metadata key ``unitless`` holding JSON with
the algorithm, loss, hyperparameters, dimension, scalars, examples seen and cumulative loss.
"""
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional, Tuple

import numpy as np
import numpy.typing as npt

from . import slots
from .names import FeatureNames
from .losses import LOSS_CODES, LIPSCHITZ
from .registry import MAX_MATRIX_DIM, Algorithm, check_hyperparameter, get_algorithm

SCHEMA_VERSION = 2
METADATA_KEY = b"unitless"
# Version 2 changed these learners' state and rules (kotlowski1 and omd_diagonal count d as the
# features seen, sNAG keeps each feature's first trial, kotlowski2 keeps S to recompute S†
# from); version-1 checkpoints of every other learner hold exactly what version 2 would, and
# load.
CHANGED_IN_VERSION_2 = {"kotlowski1", "kotlowski2", "omd_diagonal", "snag"}


@dataclass
class LearnerState:
    """A learner's state, kept only for the features examples have carried.

    Feature i's state is column ``slot`` of every vector (and row and column ``slot`` of every
    matrix), where ``slot_index[slot] == i`` (``slots.py``); slots n_slots.. hold the initial
    values. ``map_features`` gives a batch's features their slots, growing the arrays as it
    goes (learning); ``serving_view`` gives serving a state of its own, this one unchanged;
    ``dense_vectors``/``dense_matrices`` lay the state out over all ``dim`` features.
    """
    algorithm: str
    loss: str
    dim: int
    n_classes: int               # 1: binary or regression; K > 1: one-against-all, labels 1..K
    hyperparameters: dict
    V: np.ndarray                # vectors  [len(vectors), K, capacity], by slot
    M: np.ndarray                # matrices [len(matrices), K, capacity, capacity], by slot
    S: np.ndarray                # scalars  [K, len(scalars)]
    bias_index: int = -1         # feature index of the constant feature, -1 if none
    examples_seen: int = 0
    cumulative_loss: float = 0.0
    feature_names: FeatureNames = field(default_factory=FeatureNames)  # where known
    slot_index: Optional[np.ndarray] = None  # int64 [capacity]: the feature index of each slot
    n_slots: int = 0               # slots taken: one per feature some example has carried
    table: Optional[np.ndarray] = None       # feature index -> slot (slots.py), with its hash shift
    shift: int = 0

    def __post_init__(self):
        if self.slot_index is None:
            capacity = self.V.shape[2]
            self.slot_index = np.zeros(capacity, dtype=np.int64)
            self.table, self.shift = slots.new_table(capacity)

    @property
    def spec(self) -> Algorithm:
        return get_algorithm(self.algorithm)

    @property
    def capacity(self) -> int:
        assert self.slot_index is not None
        return self.slot_index.shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes of the state's arrays."""
        assert self.slot_index is not None and self.table is not None
        return sum(a.nbytes for a in (self.V, self.M, self.S, self.slot_index, self.table))

    def initial(self) -> np.ndarray:
        """The value every coordinate of each vector starts at: [len(vectors)]."""
        return np.array([v for _, v in initial_values(self.spec, self.hyperparameters)])

    def name_features(self, names: Mapping[int, str]) -> None:
        """Take the names (index -> name) of features not named yet: a feature keeps the first
        name it was given."""
        self.feature_names = self.feature_names.merged(names)

    def map_features(self, indices: npt.ArrayLike) -> np.ndarray:
        """The slots of these feature indices (int64, same shape), giving new features slots.

        Learners whose step reads every feature's state (``Algorithm.scans_all``) keep their
        slots in index order, so that their sums run in the order they would over all ``dim``
        features: new features move the others along.
        """
        indices = np.ascontiguousarray(indices, dtype=np.int64)
        out = np.empty(indices.shape[0], dtype=np.int64)
        before = self.n_slots
        done = 0
        while True:
            assert self.slot_index is not None and self.table is not None
            mapped, self.n_slots = slots.assign(self.table, self.shift, self.slot_index,
                                                self.n_slots, indices[done:], out[done:])
            done += mapped
            if done == indices.shape[0]:
                break
            self._grow(2 * self.capacity)
        if self.spec.scans_all and self.n_slots > before:
            out = self._sort_slots()[out]
        return out

    def serving_view(self, indices: np.ndarray) -> Tuple["LearnerState", np.ndarray]:
        """A state of the caller's own to run the step on, holding what it reads of this one for
        examples with these feature indices, and their slots in it: (view, slots). Nothing of
        this state is written, so one model can serve many threads at once.

        A feature this model has no slot for is at its initial values in the view, which is the
        state a slot given to it here would hold. A learner whose step reads only the example's
        features and the scalars (``Algorithm.shared``) gets a view of the batch's features
        alone; one that reads every feature (a sum or a matrix over all of them) gets a copy
        of the whole model, the batch's new features taking their places in index order as
        ``map_features`` gives them here: its sums then run over the same values in the same
        order, and its predictions are bit for bit those of the model itself.
        """
        if not self.spec.shared:
            view = self.copy()
            return view, view.map_features(indices)
        view = self._empty_like()
        slots = view.map_features(indices)  # (the view's own table: the batch's features)
        found = self.find_features(view.slot_index[:view.n_slots])
        known = np.flatnonzero(found >= 0)
        view.V[:, :, known] = self.V[:, :, found[known]]
        return view, slots

    def _empty_like(self):
        """A state of the same learner and scalars, no feature given a slot yet."""
        room = INITIAL_CAPACITY
        view = LearnerState(self.algorithm, self.loss, self.dim, self.n_classes,
                            dict(self.hyperparameters), V=np.empty(self.V.shape[:2] + (room,)),
                            M=np.zeros(self.M.shape[:2] + (room, room)), S=self.S.copy(),
                            bias_index=self.bias_index)
        view.V[...] = self.initial()[:, None, None]
        return view

    def find_features(self, indices: np.ndarray) -> np.ndarray:
        """The slots of these feature indices, -1 for a feature without one; nothing changes."""
        indices = np.ascontiguousarray(indices, dtype=np.int64)
        out = np.empty(indices.shape[0], dtype=np.int64)
        assert self.table is not None
        slots.find(self.table, self.shift, indices, out)
        return out

    def _grow(self, capacity):
        """Room for ``capacity`` slots; the new ones hold the initial values."""
        n_vectors, K, old = self.V.shape
        V = np.empty((n_vectors, K, capacity))
        V[:, :, :old] = self.V
        V[:, :, old:] = self.initial()[:, None, None]
        M = np.zeros((self.M.shape[0], K, capacity, capacity))
        M[:, :, :old, :old] = self.M
        slot_index = np.zeros(capacity, dtype=np.int64)
        slot_index[:old] = self.slot_index
        self.V, self.M, self.slot_index = V, M, slot_index
        self._rebuild_table()

    def _sort_slots(self):
        """Renumber the slots in index order; returns the new slot of each old one."""
        n = self.n_slots
        order = np.argsort(self.slot_index[:n], kind="stable")
        self.V[:, :, :n] = self.V[:, :, order]
        if self.M.shape[0]:
            self.M[:, :, :n, :n] = self.M[:, :, order][:, :, :, order]
        self.slot_index[:n] = self.slot_index[order]
        self._rebuild_table()
        new_slot = np.empty(n, dtype=np.int64)
        new_slot[order] = np.arange(n)
        return new_slot

    def _rebuild_table(self):
        self.table, self.shift = slots.new_table(self.capacity)
        slots.rebuild(self.table, self.shift, self.slot_index, self.n_slots)

    def hp_array(self) -> np.ndarray:
        return np.array([self.hyperparameters[h] for h in self.spec.hyperparameters],
                        dtype=np.float64)

    def dense_vectors(self) -> np.ndarray:
        """The vectors over all ``dim`` features: [len(vectors), K, dim] (small models: tests)."""
        assert self.slot_index is not None
        out = np.empty(self.V.shape[:2] + (self.dim,))
        out[...] = self.initial()[:, None, None]
        out[:, :, self.slot_index[:self.n_slots]] = self.V[:, :, :self.n_slots]
        return out

    def dense_matrices(self) -> np.ndarray:
        """The matrices over all ``dim`` features: [len(matrices), K, dim, dim]."""
        assert self.slot_index is not None
        n, on = self.n_slots, self.slot_index[:self.n_slots]
        out: np.ndarray = np.zeros(self.M.shape[:2] + (self.dim, self.dim))
        out[np.ix_(np.arange(out.shape[0]), np.arange(out.shape[1]), on, on)] = \
            self.M[:, :, :n, :n]
        return out

    @property
    def weights(self) -> np.ndarray:
        """The weight vector w over all ``dim`` features, shape [K, dim]."""
        return self.dense_vectors()[0]

    def copy(self) -> "LearnerState":
        assert self.slot_index is not None and self.table is not None
        return LearnerState(self.algorithm, self.loss, self.dim, self.n_classes,
                            dict(self.hyperparameters), self.V.copy(), self.M.copy(),
                            self.S.copy(), self.bias_index, self.examples_seen,
                            self.cumulative_loss, self.feature_names,  # (never changed in place)
                            self.slot_index.copy(), self.n_slots, self.table.copy(), self.shift)

    def metadata(self) -> dict[str, Any]:
        return model_metadata(self, self.S, self.examples_seen, self.cumulative_loss)


def model_metadata(settings: LearnerState, S: np.ndarray, examples_seen: int,
                   cumulative_loss: float) -> dict[str, Any]:
    """The Arrow form's metadata of a model of ``settings`` (a LearnerState: its algorithm,
    loss, ...) with scalars S [K, scalars] and these counters."""
    return {
        "schema_version": SCHEMA_VERSION,
        "algorithm": settings.algorithm,
        "loss": settings.loss,
        "hyperparameters": settings.hyperparameters,
        "dim": settings.dim,
        "n_classes": settings.n_classes,
        "bias_index": settings.bias_index,
        "scalars": {name: S[:, j].tolist() for j, name in enumerate(settings.spec.scalars)},
        "examples_seen": examples_seen,
        "cumulative_loss": cumulative_loss,
        "progressive_loss": cumulative_loss / max(examples_seen, 1),
    }


# Slots a new learner has room for; the arrays double when they fill.
INITIAL_CAPACITY = 16


def new_state(algorithm: str, dim: int, loss: str = "logistic", n_classes: int = 1,
              bias_index: int = -1, **hyperparameters: float) -> "LearnerState":
    """A fresh learner. Unknown hyperparameters are an error; missing ones take defaults."""
    spec = get_algorithm(algorithm)
    if loss not in LOSS_CODES:
        raise ValueError(f"unknown loss {loss!r}; choose one of: {', '.join(LOSS_CODES)}")
    if n_classes > 1 and loss not in ("logistic", "hinge"):
        raise ValueError(f"multiclass (one-against-all) needs a classification loss, not {loss!r}")
    extra = set(hyperparameters) - set(spec.hyperparameters) - {"quantile_tau"}
    if extra:
        raise ValueError(f"{algorithm} has no hyperparameter {sorted(extra)}; "
                         f"it takes {sorted(spec.hyperparameters)}")
    hp = {}
    for name, default in spec.hyperparameters.items():
        value = hyperparameters.get(name)
        if value is None:
            value = LIPSCHITZ[loss] if default is None else default
        hp[name] = check_hyperparameter(name, value)
    if loss == "quantile":
        hp["quantile_tau"] = check_hyperparameter("quantile_tau",
                                                  hyperparameters.get("quantile_tau") or 0.5)
    if spec.matrices and dim > MAX_MATRIX_DIM:
        raise ValueError(f"{algorithm} keeps d×d matrices; dim {dim} exceeds {MAX_MATRIX_DIM}")
    K = max(int(n_classes), 1)
    state = LearnerState(
        algorithm, loss, int(dim), K, hp,
        V=np.zeros((len(spec.vectors), K, INITIAL_CAPACITY)),
        M=np.zeros((len(spec.matrices), K, INITIAL_CAPACITY, INITIAL_CAPACITY)),
        S=np.zeros((K, len(spec.scalars))),
        bias_index=int(bias_index))
    state.V[...] = state.initial()[:, None, None]
    return state


def initial_values(spec: Algorithm, hp: Mapping[str, float]) -> Iterator[tuple[str, float]]:
    """(vector name, the value every coordinate of it starts at) for each state vector."""
    for name in spec.vectors:
        init = spec.initial.get(name, 0.0)
        yield name, hp[init] if isinstance(init, str) else float(init)
