"""Parse raw records (CSV, libsvm/svmlight, VW text, JSON lines, Parquet rows) into ExampleBlocks.

Every format goes through one record model: a label, an optional importance weight, id and model
key, and named features. Feature names are hashed into 2^bits (``unitless.learner.hash_feature``)
with a constant/bias feature unless it is turned off. Numeric columns give name -> value; string
values of categorical columns (and JSON strings) give the one-hot feature "column=value".
A record that cannot be parsed becomes a DeadLetter carrying the raw text and the reason.
"""
import csv
import io
import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from ..learner import bias_index, hash_feature
from .records import DeadLetter, ExampleBlock, string_array

FORMATS = ("csv", "libsvm", "vw", "jsonl", "parquet")
DEFAULT_KEY = ""


@dataclass
class RecordSpec:
    """How to read examples: which fields carry the label, id, model key and weight."""
    label: str = "label"
    id: str = None
    model_key: str = None
    weight: str = None
    bits: int = 18
    bias: bool = True
    categorical: tuple = ()
    delimiter: str = ","
    require_label: bool = True  # scoring reads examples that may have no label (NaN)
    columns: list = field(default=None)  # CSV header, set by the reader

    @property
    def special(self):
        return {c for c in (self.label, self.id, self.model_key, self.weight) if c}


class BadRecord(ValueError):
    pass


class _Builder:
    """Accumulates parsed records of one source into an ExampleBlock."""

    def __init__(self, spec, source):
        self.spec, self.source = spec, source
        self.positions, self.ids, self.keys, self.labels, self.weights = [], [], [], [], []
        self.indptr, self.indices, self.values, self.raw = [0], [], [], []
        self.names, self._index = {}, {}
        self.dead = []
        self.bias = bias_index(spec.bits) if spec.bias else None

    def index(self, name):
        i = self._index.get(name)
        if i is None:
            i = self._index[name] = hash_feature(name, self.spec.bits)
            self.names.setdefault(i, name)
        return i

    def add(self, position, raw, label, features, weight=1.0, id=None, key=DEFAULT_KEY):
        merged = {}
        for name, value in features:
            i = self.index(name)
            merged[i] = merged.get(i, 0.0) + value
        if self.bias is not None:
            merged[self.bias] = merged.get(self.bias, 0.0) + 1.0
        for i, v in merged.items():
            if v != 0.0:
                self.indices.append(i)
                self.values.append(v)
        self.indptr.append(len(self.indices))
        self.positions.append(position)
        self.ids.append(id)
        self.keys.append(DEFAULT_KEY if key is None else str(key))
        self.labels.append(label)
        self.weights.append(weight)
        self.raw.append(raw)

    def reject(self, position, raw, reason):
        self.dead.append(DeadLetter(self.source, int(position), raw, reason))

    def block(self):
        if self.bias is not None:
            self.names.setdefault(self.bias, "constant")
        return ExampleBlock(
            self.source, np.asarray(self.positions, dtype=np.int64), string_array(self.ids),
            string_array(self.keys),
            np.asarray(self.labels, dtype=np.float64), np.asarray(self.weights, dtype=np.float64),
            np.asarray(self.indptr, dtype=np.int64), np.asarray(self.indices, dtype=np.int64),
            np.asarray(self.values, dtype=np.float64), self.names, self.raw)


def _number(text, what):
    try:
        return float(text)
    except (TypeError, ValueError):
        raise BadRecord(f"{what} {text!r} is not a number") from None


def _mapping_record(b, spec, row, strings_are_numbers):
    """Fields of one mapping (a JSON object, a CSV row, a Parquet row) -> builder.add args."""
    if spec.label not in row or row[spec.label] in (None, ""):
        if spec.require_label:
            raise BadRecord(f"missing label field {spec.label!r}")
        label = float("nan")
    else:
        label = _number(row[spec.label], "label")
    weight = 1.0
    if spec.weight and row.get(spec.weight) not in (None, ""):
        weight = _number(row[spec.weight], "importance weight")
    features = []
    for name, value in row.items():
        if name in spec.special or value is None or value == "":
            continue
        if isinstance(value, bool):
            features.append((name, float(value)))
        elif isinstance(value, (int, float)):
            features.append((name, float(value)))
        elif isinstance(value, str):
            if name in spec.categorical or not strings_are_numbers:
                features.append((f"{name}={value}", 1.0))
            else:
                features.append((name, _number(value, f"feature {name!r}")))
        else:
            raise BadRecord(f"feature {name!r} has unsupported value {value!r}")
    key = row.get(spec.model_key) if spec.model_key else DEFAULT_KEY
    id_ = row.get(spec.id) if spec.id else None
    return label, features, weight, None if id_ is None else str(id_), key


def _parse_each(b, items, parse_one):
    for position, raw in items:
        try:
            b.add(position, raw, *parse_one(raw))
        except BadRecord as err:
            b.reject(position, raw, str(err))


def parse_jsonl(spec, source, items):
    """items: (line number, line text) pairs."""
    lines = [raw for _, raw in items]
    table = _json_table(lines)
    if table is not None:
        table = numeric_table(spec, table)
    if table is not None:
        return block_from_table(spec, source, table, np.array([p for p, _ in items], np.int64),
                                lines), []
    b = _Builder(spec, source)

    def one(line):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise BadRecord(f"invalid JSON: {err.msg} at column {err.colno}") from None
        if not isinstance(row, dict):
            raise BadRecord("a JSON line must hold an object")
        if isinstance(row.get("features"), dict):
            row = {**{k: v for k, v in row.items() if k != "features"}, **row["features"]}
        return _mapping_record(b, spec, row, strings_are_numbers=False)

    _parse_each(b, items, one)
    return b.block(), b.dead


def _json_table(lines):
    """The lines parsed whole by Arrow's JSON reader, one row per line; None when any line needs
    the careful per-line path (not an object, invalid, or spread over several lines)."""
    data = "\n".join(lines).encode()
    try:
        table = pajson.read_json(pa.BufferReader(data), read_options=pajson.ReadOptions(
            use_threads=False, block_size=len(data) + 1))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return table if table.num_rows == len(lines) else None


def parse_libsvm(spec, source, items):
    """label [qid:n] index:value ...; indices are feature names (hashed like any other)."""
    b = _Builder(spec, source)

    def one(line):
        parts = line.split("#", 1)[0].split()
        if not parts:
            raise BadRecord("empty record")
        label = _number(parts[0], "label")
        features = []
        for token in parts[1:]:
            name, sep, value = token.partition(":")
            if not sep or not name:
                raise BadRecord(f"feature {token!r} is not index:value")
            if name == "qid":
                continue
            features.append((name, _number(value, f"feature {name!r}")))
        return label, features

    _parse_each(b, items, one)
    return b.block(), b.dead


def parse_vw(spec, source, items):
    """VW text: label [importance] ['tag]|namespace feature[:value] ... |namespace ..."""
    b = _Builder(spec, source)

    def one(line):
        head, bar, rest = line.partition("|")
        if not bar:
            raise BadRecord("no '|' feature section")
        tokens = head.split()
        if not tokens:
            raise BadRecord("missing label")
        label = _number(tokens[0], "label")
        weight, tag = 1.0, None
        for token in tokens[1:]:
            if token.startswith("'"):
                tag = token[1:]
            elif weight == 1.0 and tag is None:
                weight = _number(token, "importance weight")
            else:
                tag = token
        features = []
        for section in ("|" + rest).split("|")[1:]:
            if not section or section[0].isspace():
                namespace, names = "", section.split()
            else:
                namespace, *names = section.split()
                namespace = namespace.split(":")[0]
            for token in names:
                name, sep, value = token.partition(":")
                full = f"{namespace}^{name}" if namespace else name
                features.append((full, _number(value, f"feature {full!r}") if sep else 1.0))
        return label, features, weight, tag

    _parse_each(b, items, one)
    return b.block(), b.dead


def parse_csv(spec, source, items):
    """items: (line number, line text) of data lines; spec.columns is the header."""
    lines = [raw for _, raw in items]
    table = csv_table(spec, "\n".join(lines).encode())
    if table is not None and table.num_rows == len(lines):
        return block_from_table(spec, source, table, np.array([p for p, _ in items], np.int64),
                                lines), []
    b = _Builder(spec, source)
    n_columns = len(spec.columns)

    def one(line):
        fields = next(csv.reader([line], delimiter=spec.delimiter))
        if len(fields) != n_columns:
            raise BadRecord(f"expected {n_columns} fields, got {len(fields)}")
        return _mapping_record(b, spec, dict(zip(spec.columns, fields)), strings_are_numbers=True)

    _parse_each(b, items, one)
    return b.block(), b.dead


def csv_table(spec, data):
    """Data lines (bytes, no header) parsed whole by Arrow's CSV reader into the numeric table
    ``block_from_table`` takes, one row per line; None when any record (a blank line too) needs
    the careful per-line path."""
    if spec.categorical:
        return None
    strings = {c: pa.string() for c in (spec.id, spec.model_key) if c}
    types = {c: strings.get(c, pa.float64()) for c in spec.columns}
    try:
        table = pacsv.read_csv(
            pa.BufferReader(data),
            read_options=pacsv.ReadOptions(column_names=spec.columns, use_threads=True),
            parse_options=pacsv.ParseOptions(delimiter=spec.delimiter, ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                                null_values=[""]))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if spec.label in spec.columns and table.column(spec.label).null_count:
        return None
    if spec.weight and table.column(spec.weight).null_count:
        return None
    return table


def block_from_table(spec, source, table, positions, raw):
    """Numeric columns of an Arrow table -> ExampleBlock, vectorised (no per-row Python)."""
    n = table.num_rows
    names = [c for c in table.column_names if c not in spec.special]
    bits_index = {}
    for c in names:
        i = hash_feature(c, spec.bits)
        if i in bits_index:
            raise ValueError(f"columns {bits_index[i]!r} and {c!r} hash to the same feature index "
                             f"in 2^{spec.bits}; raise --bits")
        bits_index[i] = c
    columns = names
    cols_idx = list(bits_index)
    if spec.bias:
        cols_idx.append(bias_index(spec.bits))
        if cols_idx[-1] in bits_index:
            raise ValueError(f"column {bits_index[cols_idx[-1]]!r} hashes to the bias index; "
                             "raise --bits or use --no-bias")
    X = np.empty((n, len(cols_idx)))
    for j, c in enumerate(columns):
        X[:, j] = table.column(c).to_numpy(zero_copy_only=False)
    if spec.bias:
        X[:, -1] = 1.0
    for j, c in enumerate(columns):
        col = table.column(c)
        if col.null_count:
            X[col.is_null().to_numpy(zero_copy_only=False), j] = 0.0
    present = X != 0.0
    if present.all():  # dense: every row holds every column
        indptr = np.arange(0, X.size + 1, X.shape[1], dtype=np.int64)
        indices, values = np.tile(np.asarray(cols_idx, dtype=np.int64), n), X.reshape(-1)
    else:
        rows, cols = np.nonzero(present)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        indices, values = np.asarray(cols_idx, dtype=np.int64)[cols], X[rows, cols]
    labels = (table.column(spec.label).to_numpy(zero_copy_only=False).astype(np.float64)
              if spec.label in table.column_names else np.full(n, np.nan))
    weights = (table.column(spec.weight).to_numpy(zero_copy_only=False).astype(np.float64)
               if spec.weight else np.ones(n))
    present = set(table.column_names)
    keys = (pc.fill_null(_strings(table.column(spec.model_key)), DEFAULT_KEY)
            if spec.model_key in present else pa.repeat(pa.scalar(DEFAULT_KEY), n))
    ids = _strings(table.column(spec.id)) if spec.id in present else pa.nulls(n, pa.string())
    feature_names = dict(zip(cols_idx, columns + (["constant"] if spec.bias else [])))
    return ExampleBlock(source, positions, ids, keys, labels, weights, indptr, indices, values,
                        feature_names, raw)


def _strings(column):
    return column.cast(pa.string()).combine_chunks()


def numeric_table(spec, table):
    """The table with every field but id and model key as float64, when each is a number (or
    null, an absent feature) and labels and weights are present; else None."""
    numeric = all(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                  or pa.types.is_null(t) for name, t in zip(table.column_names, table.schema.types)
                  if name not in (spec.id, spec.model_key))
    if not numeric or spec.categorical or spec.label not in table.column_names:
        return None
    if table.column(spec.label).null_count or (spec.weight and (
            spec.weight not in table.column_names or table.column(spec.weight).null_count)):
        return None
    if any(not (pa.types.is_string(table.schema.field(c).type)
                or pa.types.is_integer(table.schema.field(c).type))
           for c in (spec.id, spec.model_key) if c and c in table.column_names):
        return None
    return table.cast(_float_schema(spec, table.schema))


def parse_table(spec, source, table, first_row):
    """A Parquet record batch -> (block, dead letters); rows that are not numeric go one by one."""
    positions = np.arange(first_row, first_row + table.num_rows, dtype=np.int64)
    numeric = numeric_table(spec, table)
    if numeric is not None:
        return block_from_table(spec, source, numeric, positions, None), []
    b = _Builder(spec, source)
    rows = table.to_pylist()
    _parse_each(b, zip(positions.tolist(), rows),
                lambda row: _mapping_record(b, spec, row, strings_are_numbers=False))
    for d in b.dead:
        d.raw = json.dumps(d.raw, default=str)
    b.raw = [json.dumps(r, default=str) for r in b.raw]
    return b.block(), b.dead


def _float_schema(spec, schema):
    return pa.schema([pa.field(f.name, f.type if f.name in (spec.id, spec.model_key)
                               else pa.float64()) for f in schema])


PARSERS = {"csv": parse_csv, "libsvm": parse_libsvm, "vw": parse_vw, "jsonl": parse_jsonl}
