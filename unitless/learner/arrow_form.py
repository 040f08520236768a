"""A learner state's Arrow form (state.py's docstring says what the table holds): written
(``to_arrow``), and read back exactly, everything read checked first (``from_arrow``)."""
import json
from typing import Any, NamedTuple, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from .losses import LOSS_CODES
from .names import FeatureNames
from .registry import Algorithm, get_algorithm
from .state import CHANGED_IN_VERSION_2, LearnerState, METADATA_KEY, SCHEMA_VERSION, new_state


def to_arrow(state: "LearnerState", extra_metadata: Optional[dict] = None) -> pa.Table:
    """The state as an Arrow table (see module docstring); ``state`` a LearnerState, or one
    model of many (``many.RowState``)."""
    if not isinstance(state, LearnerState):
        return state.many.tables([state.row], [state.feature_names], [extra_metadata])[0]
    return with_metadata(state_table(state), {**state.metadata(), **(extra_metadata or {})})


def state_table(state: LearnerState) -> pa.Table:
    """``to_arrow``'s table of a LearnerState without its metadata."""
    assert state.slot_index is not None
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


def model_table(spec: Algorithm, classes: np.ndarray, indices: np.ndarray, names: pa.Array,
                vectors: Sequence[np.ndarray], matrices: Sequence[pa.Array] = ()) -> pa.Table:
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
    count: int  # type: ignore[assignment]  # (the field shadows tuple.count)

    @classmethod
    def whole(cls, table: pa.Table) -> "TableRows":
        return cls(table, 0, table.num_rows)

    def slice(self) -> pa.Table:
        return self.table.slice(self.first, self.count)


def with_metadata(table: pa.Table, meta: dict[str, Any]) -> pa.Table:
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
