"""Arrow tables to blocks, vectorised: the fast path of CSV and JSON chunks, and Parquet's
record batches (rows that are not plainly numbers go one at a time)."""
import json
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..learner import bias_index, hash_feature
from ..learner.names import FeatureNames
from .records import DeadLetter, ExampleBlock, empty_as_null
from .rows import Builder, mapping_record, or_none, parse_each
from .spec import DEFAULT_KEY, HashCollision, RecordSpec


def labels_fit(spec: RecordSpec, column: pa.ChunkedArray) -> bool:
    """True when a fast path may take the label column as it is: no nulls unless records may
    lack labels, and no NaN value (NaN marks an absent label; a written one is refused by the
    per-record path)."""
    if column.null_count and spec.require_label:
        return False
    return not (pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py())


def times_fit(spec: RecordSpec, table: pa.Table) -> bool:
    """True when a fast path may take the --time-column as it is: a finite number in each row
    (text times, nulls and the rest go record by record, which explains the bad ones)."""
    if spec.time not in table.column_names:
        return False
    column = table.column(spec.time)
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)) or column.null_count:
        return False
    return pc.all(pc.is_finite(pc.cast(column, pa.float64()))).as_py() is not False


def block_from_table(spec: RecordSpec, source: str, table: pa.Table, positions: np.ndarray,
                     raw: object) -> ExampleBlock:
    """Numeric columns of an Arrow table -> ExampleBlock, vectorised (no per-row Python).
    Raises HashCollision when two columns hash to one feature index."""
    n = table.num_rows
    names = [c for c in table.column_names if c not in spec.special]
    bits_index: dict[int, str] = {}
    for c in names:
        i = hash_feature(c, spec.bits)
        if i in bits_index:
            raise HashCollision(f"columns {bits_index[i]!r} and {c!r} hash to the same feature "
                                f"index in 2^{spec.bits}; raise --bits")
        bits_index[i] = c
    bias = [(bias_index(spec.bits), None)] if spec.bias else []
    if bias and bias[0][0] in bits_index:
        raise HashCollision(f"column {bits_index[bias[0][0]]!r} hashes to the bias index; "
                            "raise --bits or use --no-bias")
    # each row's features in index order, as Builder has them: a record is learned alike
    # whichever path parsed it
    features = sorted([*bits_index.items(), *bias])  # (index, column; None: the bias)
    cols_idx = np.array([i for i, _ in features], dtype=np.int64)
    X = np.empty((n, len(features)))
    for j, (_, c) in enumerate(features):
        if c is None:
            X[:, j] = 1.0
            continue
        col = table.column(c)
        X[:, j] = col.to_numpy(zero_copy_only=False)
        if col.null_count:
            X[col.is_null().to_numpy(zero_copy_only=False), j] = 0.0
    feature_names = FeatureNames.of({i: "constant" if c is None else c for i, c in features})
    present = X != 0.0
    if present.all():  # dense: every row holds every column
        indptr = np.arange(0, X.size + 1, X.shape[1], dtype=np.int64)
        indices, values = np.tile(cols_idx, n), X.reshape(-1)
    else:
        rows, cols = np.nonzero(present)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        indices, values = cols_idx[cols], X[rows, cols]
    labels = (table.column(spec.label).to_numpy(zero_copy_only=False).astype(np.float64)
              if spec.label in table.column_names else np.full(n, np.nan))
    weights = (table.column(spec.weight).to_numpy(zero_copy_only=False).astype(np.float64)
               if spec.weight else np.ones(n))
    present = set(table.column_names)
    keys = (pc.fill_null(_strings(table.column(spec.model_key)), DEFAULT_KEY)
            if spec.model_key in present else pa.repeat(pa.scalar(DEFAULT_KEY), n))
    ids = (empty_as_null(_strings(table.column(spec.id))) if spec.id in present
           else pa.nulls(n, pa.string()))
    times = (table.column(spec.time).to_numpy(zero_copy_only=False).astype(np.float64)
             / spec.time_unit if spec.time else None)
    return ExampleBlock(source, positions, ids, keys, labels, weights, indptr, indices, values,
                        feature_names, raw, times)


def _strings(column):
    return column.cast(pa.string()).combine_chunks()


def numeric_table(spec: RecordSpec, table: pa.Table) -> Optional[pa.Table]:
    """The table with every field but id and model key as float64, when each is a number (or
    null, an absent feature) and labels and weights are present; else None. With a label
    mapping (RecordSpec.labels) the label column may hold text: it is mapped to numbers."""
    if (spec.labels and spec.labels.active and spec.label in table.column_names
            and labels_fit(spec, table.column(spec.label))):
        table = spec.mapped_label_column(table)
        if table is None:
            return None
    numeric = all(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                  or pa.types.is_null(t) for name, t in zip(table.column_names, table.schema.types)
                  if name not in (spec.id, spec.model_key))
    # (no label column: examples to serve, where records may come without one)
    labeled = spec.label in table.column_names
    if not numeric or spec.categorical or (not labeled and spec.require_label):
        return None
    if (labeled and not labels_fit(spec, table.column(spec.label))) or (spec.weight and (
            spec.weight not in table.column_names or table.column(spec.weight).null_count)):
        return None
    if spec.time and not times_fit(spec, table):
        return None
    if any(not (pa.types.is_string(table.schema.field(c).type)
                or pa.types.is_integer(table.schema.field(c).type))
           for c in (spec.id, spec.model_key) if c and c in table.column_names):
        return None
    return table.cast(_float_schema(spec, table.schema))


def parse_table(spec: RecordSpec, source: str, table: pa.Table, first_row: int
                ) -> tuple[ExampleBlock, list[DeadLetter]]:
    """A Parquet record batch -> (block, dead letters); rows that are not numeric go one by one."""
    positions = np.arange(first_row, first_row + table.num_rows, dtype=np.int64)
    numeric = or_none(numeric_table, spec, table)
    if numeric is not None:
        return block_from_table(spec, source, numeric, positions, None), []
    b = Builder(spec, source)
    rows = table.to_pylist()
    parse_each(b, zip(positions.tolist(), rows),
                lambda row: mapping_record(b, spec, row, strings_are_numbers=False), text=False)
    for d in b.dead:
        d.raw = json.dumps(d.raw, default=str)
    b.raw = [json.dumps(r, default=str) for r in b.raw]
    return b.block(), b.dead


def _float_schema(spec, schema):
    return pa.schema([pa.field(f.name, f.type if f.name in (spec.id, spec.model_key)
                               else pa.float64()) for f in schema])
