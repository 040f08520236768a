"""Learner state: a few named flat numpy arrays and scalars, and its Arrow form.

The Arrow table has one row per (class, feature) whose state differs from the initial state,
columns ``class``, ``index``, ``name`` and one per state vector (matrices: one list column per
matrix holding that feature's row), and the schema metadata key ``unitless`` holding JSON with
the algorithm, loss, hyperparameters, dimension, scalars, examples seen and cumulative loss.
"""
import json
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Tuple, Union

import numpy as np
import pyarrow as pa

from . import slots
from .names import FeatureNames
from .losses import LOSS_CODES, LIPSCHITZ
from .registry import MAX_MATRIX_DIM, check_hyperparameter, get_algorithm

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
    slot_index: np.ndarray = None  # int64 [capacity]: the feature index of each slot
    n_slots: int = 0               # slots taken: one per feature some example has carried
    table: np.ndarray = None       # feature index -> slot (slots.py), with its hash shift
    shift: int = 0

    def __post_init__(self):
        if self.slot_index is None:
            capacity = self.V.shape[2]
            self.slot_index = np.zeros(capacity, dtype=np.int64)
            self.table, self.shift = slots.new_table(capacity)

    @property
    def spec(self):
        return get_algorithm(self.algorithm)

    @property
    def capacity(self):
        return self.slot_index.shape[0]

    @property
    def nbytes(self):
        """Bytes of the state's arrays."""
        return sum(a.nbytes for a in (self.V, self.M, self.S, self.slot_index, self.table))

    def initial(self):
        """The value every coordinate of each vector starts at: [len(vectors)]."""
        return np.array([v for _, v in initial_values(self.spec, self.hyperparameters)])

    def name_features(self, names):
        """Take the names (index -> name) of features not named yet: a feature keeps the first
        name it was given."""
        self.feature_names = self.feature_names.merged(names)

    def map_features(self, indices):
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

    def find_features(self, indices):
        """The slots of these feature indices, -1 for a feature without one; nothing changes."""
        indices = np.ascontiguousarray(indices, dtype=np.int64)
        out = np.empty(indices.shape[0], dtype=np.int64)
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

    def hp_array(self):
        return np.array([self.hyperparameters[h] for h in self.spec.hyperparameters],
                        dtype=np.float64)

    def dense_vectors(self):
        """The vectors over all ``dim`` features: [len(vectors), K, dim] (small models: tests)."""
        out = np.empty(self.V.shape[:2] + (self.dim,))
        out[...] = self.initial()[:, None, None]
        out[:, :, self.slot_index[:self.n_slots]] = self.V[:, :, :self.n_slots]
        return out

    def dense_matrices(self):
        """The matrices over all ``dim`` features: [len(matrices), K, dim, dim]."""
        n, on = self.n_slots, self.slot_index[:self.n_slots]
        out = np.zeros(self.M.shape[:2] + (self.dim, self.dim))
        out[np.ix_(range(out.shape[0]), range(out.shape[1]), on, on)] = self.M[:, :, :n, :n]
        return out

    @property
    def weights(self):
        """The weight vector w over all ``dim`` features, shape [K, dim]."""
        return self.dense_vectors()[0]

    def copy(self):
        return LearnerState(self.algorithm, self.loss, self.dim, self.n_classes,
                            dict(self.hyperparameters), self.V.copy(), self.M.copy(),
                            self.S.copy(), self.bias_index, self.examples_seen,
                            self.cumulative_loss, self.feature_names,  # (never changed in place)
                            self.slot_index.copy(), self.n_slots, self.table.copy(), self.shift)

    def metadata(self):
        return model_metadata(self, self.S, self.examples_seen, self.cumulative_loss)


def model_metadata(settings, S, examples_seen, cumulative_loss):
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


def initial_values(spec, hp):
    """(vector name, the value every coordinate of it starts at) for each state vector."""
    for name in spec.vectors:
        init = spec.initial.get(name, 0.0)
        yield name, hp[init] if isinstance(init, str) else float(init)


def to_arrow(state: "LearnerState", extra_metadata: Optional[dict] = None) -> pa.Table:
    """The state as an Arrow table (see module docstring); ``state`` a LearnerState, or one
    model of many (``many.RowState``)."""
    if not isinstance(state, LearnerState):
        return state.many.tables([state.row], [state.feature_names], [extra_metadata])[0]
    return with_metadata(state_table(state), {**state.metadata(), **(extra_metadata or {})})


def state_table(state):
    """``to_arrow``'s table of a LearnerState without its metadata."""
    order = np.argsort(state.slot_index[:state.n_slots], kind="stable")  # slots by index
    active = state.slot_index[order]  # only features some example carried can have changed
    V = state.V[:, :, order]
    changed = (V != state.initial()[:, None, None]).any(axis=0)  # [K, active]
    if state.M.shape[0]:
        changed |= (state.M[:, :, order] != 0).any(axis=(0, 3))
    cls, j = np.nonzero(changed)
    idx = active[j]
    matrices = []
    for m in range(len(state.spec.matrices)):
        rows = np.zeros((len(idx), state.dim))  # each row over all dim features
        rows[:, active] = state.M[m][cls, order[j]][:, order]
        matrices.append(pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)),
                                                          state.dim))
    return model_table(state.spec, cls, idx, state.feature_names.lookup(idx),
                       [V[v][cls, j] for v in range(V.shape[0])], matrices)


def model_table(spec, classes, indices, names, vectors, matrices=()):
    """The Arrow form's columns of the entries (class, feature index) of a learner ``spec``:
    their names (a string array) and their values, an array per vector and per matrix."""
    columns = {"class": pa.array(classes.astype(np.int32)),
               "index": pa.array(indices.astype(np.int64)), "name": names}
    columns.update(zip(spec.vectors, map(pa.array, vectors)))
    columns.update(zip(spec.matrices, matrices))
    return pa.table(columns)


class TableRows(NamedTuple):
    """Rows ``first`` to ``first + count`` of ``table``: one model's Arrow form among other
    models' rows of one table (``ManyStates.checkpoints``), hashed and written from that table
    without a table of its own."""
    table: pa.Table
    first: int
    count: int

    @classmethod
    def whole(cls, table):
        return cls(table, 0, table.num_rows)

    def slice(self):
        return self.table.slice(self.first, self.count)


def with_metadata(table, meta):
    """The table holding metadata ``meta`` (a dict) as the Arrow form does."""
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})


def read_metadata(table_or_schema: Union[pa.Table, pa.Schema]) -> dict:
    schema = getattr(table_or_schema, "schema", table_or_schema)
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise ValueError("not a unitless model: the Arrow schema has no 'unitless' metadata")
    return json.loads(raw)


def from_arrow(table: pa.Table) -> "LearnerState":
    """Rebuild the exact state written by ``to_arrow``.

    Everything read is checked before it is used: a table that ``to_arrow`` could not have
    written (unknown algorithm or loss, a dimension, class or feature index out of range, a
    missing column or one of the wrong type or width, a negative example count, a NaN or
    infinite state value, ...) raises ValueError with a one-line reason.
    """
    meta = read_metadata(table)
    if not isinstance(meta, dict):
        raise ValueError("model metadata is not a JSON object")
    version = meta.get("schema_version")
    if version not in (1, SCHEMA_VERSION):
        raise ValueError(f"model schema version {version!r} is not supported "
                         f"(this unitless reads versions 1 and {SCHEMA_VERSION})")
    algorithm, loss = _meta_str(meta, "algorithm"), _meta_str(meta, "loss")
    if version == 1 and algorithm in CHANGED_IN_VERSION_2:
        raise ValueError(f"this {algorithm} model was written by an earlier unitless (schema "
                         "version 1) whose rules for it have changed; train it again")
    spec = get_algorithm(algorithm)
    if loss not in LOSS_CODES:
        raise ValueError(f"unknown loss {loss!r}; choose one of: {', '.join(LOSS_CODES)}")
    dim = _meta_int(meta, "dim", 1, MAX_DIM)
    n_classes = _meta_int(meta, "n_classes", 1, MAX_CLASSES)
    bias_index = _meta_int(meta, "bias_index", -1, dim - 1)
    examples_seen = _meta_int(meta, "examples_seen", 0, None)
    cumulative_loss = _finite_number(meta.get("cumulative_loss"), "cumulative_loss")
    hp = _meta_hyperparameters(meta, spec, loss)
    scalars = _meta_scalars(meta, spec, n_classes)
    cls, idx, names, vectors, matrices = _state_columns(table, spec, dim, n_classes)
    try:
        state = new_state(algorithm, dim, loss, n_classes, bias_index, **hp)
    except MemoryError:
        raise ValueError(f"a {algorithm} model of dimension {dim} with {n_classes} classes is "
                         "too large to load") from None
    state.hyperparameters = hp
    rows = [flat.reshape(len(idx), dim) for flat in matrices]
    # every feature with a row, or with a non-zero entry in a matrix row, gets a slot
    features = np.unique(idx)
    if rows:
        in_matrices = np.any([(r != 0).any(axis=0) for r in rows], axis=0)
        features = np.union1d(features, np.flatnonzero(in_matrices))
    feature_slots = state.map_features(features)
    slot = feature_slots[np.searchsorted(features, idx)]
    for j, values in enumerate(vectors):
        state.V[j][cls, slot] = values
    for j, matrix_rows in enumerate(rows):
        state.M[j][cls[:, None], slot[:, None], feature_slots[None, :]] = matrix_rows[:, features]
    for j, values in enumerate(scalars):
        state.S[:, j] = values
    state.examples_seen = examples_seen
    state.cumulative_loss = cumulative_loss
    named = names.is_valid().to_numpy(zero_copy_only=False)
    state.feature_names = FeatureNames.from_arrays(idx[named], names.filter(pa.array(named)))
    return state


# Features are hashed with CRC-32, so no model is wider than 2^32; K one-against-all learners
# each keep a full state, so a few million classes is already far beyond any real model.
MAX_DIM = 1 << 32
MAX_CLASSES = 1 << 24


def _meta_str(meta, name):
    value = meta.get(name)
    if not isinstance(value, str):
        raise ValueError(f"model metadata {name!r} is {value!r}, not a string")
    return value


def _meta_int(meta, name, low, high):
    """meta[name], which must be an integer in low..high (high None: no upper bound)."""
    value = meta.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"model metadata {name!r} is {value!r}, not an integer")
    if value < low or (high is not None and value > high):
        upper = "" if high is None else f"..{high}"
        raise ValueError(f"model metadata {name!r} is {value}, outside {low}{upper}")
    return value


def _finite_number(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"model {what} is {value!r}, not a number")
    if not np.isfinite(value):
        raise ValueError(f"model {what} is {value!r}, not finite")
    return float(value)


def _meta_hyperparameters(meta, spec, loss):
    """The algorithm's hyperparameters, every one present and finite (plus an optional
    quantile_tau); nothing else."""
    hp = meta.get("hyperparameters")
    if not isinstance(hp, dict):
        raise ValueError(f"model metadata 'hyperparameters' is {hp!r}, not an object")
    missing = set(spec.hyperparameters) - set(hp)
    extra = set(hp) - set(spec.hyperparameters) - {"quantile_tau"}
    if missing or extra:
        raise ValueError(f"{spec.name} takes hyperparameters {sorted(spec.hyperparameters)}; "
                         f"the model has {sorted(hp)}")
    return {name: _finite_number(value, f"hyperparameter {name!r}") for name, value in hp.items()}


def _meta_scalars(meta, spec, n_classes):
    """One list of n_classes finite values per scalar of the algorithm, in its order."""
    scalars = meta.get("scalars")
    if not isinstance(scalars, dict):
        raise ValueError(f"model metadata 'scalars' is {scalars!r}, not an object")
    out = []
    for name in spec.scalars:
        values = scalars.get(name)
        if not isinstance(values, list) or len(values) != n_classes:
            raise ValueError(f"model scalar {name!r} is not a list of {n_classes} values")
        out.append([_finite_number(v, f"scalar {name!r}") for v in values])
    return out


def _state_columns(table, spec, dim, n_classes):
    """(class, index, names, vector values, flat matrix values) of the table's rows, checked:
    every required column present once, of its type, without nulls (but names), every class in
    0..K-1, every index in 0..dim-1, no (class, index) twice, every value finite, every matrix
    row dim wide."""
    names = table.column_names  # (a new list on each call: once here)
    cls = _index_column(table, names, "class", n_classes)
    idx = _index_column(table, names, "index", dim)
    if len(np.unique(cls * dim + idx)) != len(idx):
        raise ValueError("model table lists a (class, index) row twice")
    name_column = _column(table, names, "name", nulls=True)
    if not (pa.types.is_string(name_column.type) or pa.types.is_large_string(name_column.type)):
        raise ValueError(f"model column 'name' is {name_column.type}, not string")
    feature_names = name_column.cast(pa.string()).combine_chunks()  # (a table's column)
    vectors = []
    for name in spec.vectors:
        column = _column(table, names, name)
        if column.type != pa.float64():
            raise ValueError(f"model column {name!r} is {column.type}, not double")
        vectors.append(_finite_values(column.to_numpy(), name))
    matrices = []
    for name in spec.matrices:
        column = _column(table, names, name)
        expected = pa.list_(pa.float64(), dim)
        if column.type != expected:
            raise ValueError(f"model column {name!r} is {column.type}, not {expected}")
        flat = column.combine_chunks().flatten()
        if flat.null_count or len(flat) != len(idx) * dim:
            raise ValueError(f"model column {name!r} has null values")
        matrices.append(_finite_values(flat.to_numpy(), name))
    return cls, idx, feature_names, vectors, matrices


def _column(table, names, name, nulls=False):
    """The column ``name`` of the table (whose ``names`` these are), which must be there once."""
    count = names.count(name)
    if count != 1:
        raise ValueError(f"model table has {'no' if count == 0 else count} {name!r} column"
                         f"{'s' if count > 1 else ''}")
    column = table.column(name)
    if column.null_count and not nulls:
        raise ValueError(f"model column {name!r} has null values")
    return column


def _index_column(table, names, name, size):
    """An integer column's values as int64, each in 0..size-1."""
    column = _column(table, names, name)
    if not pa.types.is_integer(column.type):
        raise ValueError(f"model column {name!r} is {column.type}, not an integer")
    values = column.to_numpy()
    if len(values) and (values.min() < 0 or values.max() >= size):
        bad = values[(values < 0) | (values >= size)][0]
        raise ValueError(f"model column {name!r} holds {bad}, outside 0..{size - 1}")
    return values.astype(np.int64)


def _finite_values(values, name):
    if not np.isfinite(values).all():
        bad = values[~np.isfinite(values)][0]
        raise ValueError(f"model column {name!r} holds {bad}, not finite")
    return values
