"""Parse raw records (CSV, libsvm/svmlight, VW text, JSON lines, Parquet rows) into ExampleBlocks.

Every format goes through one record model: a label, an optional importance weight, id and model
key, and named features. Feature names are hashed into 2^bits (``unitless.learner.hash_feature``)
with a constant/bias feature unless it is turned off. Numeric columns give name -> value; string
values of categorical columns (and JSON strings) give the one-hot feature "column=value".

Every record is untrusted. Whatever goes wrong with one record makes it a DeadLetter carrying
the record exactly as read (bytes) and a short reason; nothing in a record can stop the reader.
Chunks are parsed whole by Arrow where they can be (the fast path); a chunk Arrow refuses, or
that is not plainly one record per line, goes through the format's careful per-record parser.
"""
import csv
import datetime
import json
import math
import re
from dataclasses import dataclass, field

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from ..learner import bias_index, hash_feature
from ..learner.names import FeatureNames
from .records import (DeadLetter, ExampleBlock, arrow_buffer, empty_as_null, quoted,
                      string_array)
from .sparse_text import joined, read_block

DEFAULT_KEY = ""
BOM = b"\xef\xbb\xbf"
# a JSON record is an object of scalars, with at most one nested "features" object of scalars
MAX_JSON_NESTING = 2
# Arrow's JSON reader takes a chunk only when its records have no fields but those of the
# chunk's first lines (at most JSON_SAMPLE_LINES lines and JSON_SAMPLE_BYTES bytes), at most
# MAX_JSON_COLUMNS of them: its time and memory grow with rows × distinct fields, so one
# hostile line of many distinct fields would cost a whole chunk's rows that many columns
JSON_SAMPLE_LINES = 64
JSON_SAMPLE_BYTES = 64 << 10
MAX_JSON_COLUMNS = 256
JSON_BLOCK_BYTES = 1 << 20  # what one of Arrow's threads parses at a time


_TRUTH = {"true": 1.0, "false": -1.0}


def _as_number(text):
    """float(text), or None when it is not a finite number."""
    try:
        number = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if np.isfinite(number) else None


def _label_text(value):
    """A label value as text, stripped of surrounding spaces (booleans as true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return (value if isinstance(value, str) else str(value)).strip()


@dataclass(frozen=True)
class LabelMap:
    """How label values become the learner's labels, for every format alike.

    ``positive``: a binary task; a label equal to it (as text, stripped of surrounding spaces,
    or as a number when both are numbers: 2 and 2.0) is +1, any other label -1. ``classes``:
    names of the classes; the i-th name (0-based) is class i + 1, any other label is refused.
    Neither: labels are numbers as written (or true/false, +1/-1)."""
    positive: str = None
    classes: tuple = ()

    def __post_init__(self):
        if self.positive is not None and self.classes:
            raise ValueError("--positive-label is for a binary task; --classes names the "
                             "classes of a multiclass one: pass one of them")
        if self.positive is not None and not self.positive.strip():
            raise ValueError("--positive-label cannot be empty")
        if len(set(self.classes)) != len(self.classes):
            raise ValueError(f"--classes names a class twice: {','.join(self.classes)}")

    @property
    def active(self):
        return self.positive is not None or bool(self.classes)

    def value(self, raw):
        """The learner's label for one record's label value; BadRecord when it has none."""
        if not self.active:
            if isinstance(raw, str) and raw.strip().lower() in _TRUTH:
                return _TRUTH[raw.strip().lower()]
            label = _number(raw, "label")
            if label != label:  # NaN is how a block marks an example without a label
                raise BadRecord(f"label {quoted(raw)} is not a number")
            return label
        if not isinstance(raw, (str, bool, int, float)):
            raise BadRecord(f"label {quoted(raw)} is not a number or text")
        try:
            text = _label_text(raw)
        except ValueError:  # an integer too long for str()
            raise BadRecord(f"label {quoted(raw)} is out of range") from None
        if not text:
            raise BadRecord("missing label")
        if self.positive is not None:
            positive = self.positive.strip()
            if text == positive:
                return 1.0
            number, wanted = _as_number(text), _as_number(positive)
            return 1.0 if number is not None and number == wanted else -1.0
        names = self.classes
        if text in names:
            return float(names.index(text) + 1)
        number = _as_number(text)
        if number is not None:
            for i, name in enumerate(names):
                if _as_number(name) == number:
                    return float(i + 1)
        raise BadRecord(f"label {quoted(text)} is not one of the classes {', '.join(names)}")

    def arrow(self, column):
        """A label column mapped to float64 as ``value`` maps each value (nulls stay null),
        vectorised over the column's distinct values; None when some value needs the
        per-record path (which refuses it, with its reason)."""
        if pa.types.is_boolean(column.type):
            return None
        if not pa.types.is_string(column.type):
            column = pc.cast(column, pa.string())
        text = pc.utf8_trim_whitespace(column)
        distinct = pc.unique(text)
        try:
            mapped = pa.array([None if v is None else self.value(v)
                               for v in distinct.to_pylist()], pa.float64())
        except BadRecord:
            return None
        return pc.take(mapped, pc.index_in(text, value_set=distinct))


NO_MAP = LabelMap()


def check_column_names(columns, where, fix="name every column with --columns (and leave out "
                                           "those that are no feature with --ignore-columns)"):
    """Refuse a list of column names (a CSV header, --columns, a Parquet schema; ``where``
    names it, ``fix`` says what to do) that gives a name twice or a column none: a column is
    found by its name, and a feature's index is its name's hash."""
    seen = {}
    for number, name in enumerate(columns, 1):
        if not name.strip():
            raise ValueError(f"{where} gives column {number} no name; {fix}")
        if name in seen:
            raise ValueError(f"{where} names column {name!r} twice (columns {seen[name]} and "
                             f"{number}); {fix}")
        seen[name] = number


@dataclass
class RecordSpec:
    """How to read examples: which fields carry the label, id, model key and weight."""
    label: str = "label"
    id: str = None
    model_key: str = None
    weight: str = None
    # the record's own time (--time-column): a number of ``time_unit``s since the epoch, or
    # ISO 8601 text (UTC without an offset); a Kafka record's timestamp otherwise
    time: str = None
    time_unit: float = 1.0  # units a second: 1 (s), 1000 (ms), 1e6 (µs)
    bits: int = 18
    bias: bool = True
    categorical: tuple = ()
    delimiter: str = ","
    # a record whose label is absent or null is refused (a dead letter), or else read with the
    # label NaN: an example to serve (training) or score, not to learn
    require_label: bool = True
    header_needs_label: bool = True  # a CSV header without the label column is refused
    columns: list = field(default=None)  # CSV column names: given, or the reader sets them
    header: bool = True  # CSV: the first line names the columns (else it is data)
    ignore: tuple = ()  # columns dropped: neither features nor anything else
    labels: LabelMap = NO_MAP  # how label values become labels (--positive-label, --classes)

    def label_value(self, raw):
        """The learner's label for a record's label value (BadRecord when there is none)."""
        return (self.labels or NO_MAP).value(raw)

    def mapped_label_column(self, table):
        """The table with its label column mapped to float64 by ``labels`` (as is without a
        mapping or a label column); None when a label needs the per-record path."""
        if not (self.labels and self.labels.active) or self.label not in table.column_names:
            return table
        mapped = self.labels.arrow(table.column(self.label))
        if mapped is None:
            return None
        return table.set_column(table.column_names.index(self.label), self.label, mapped)

    @property
    def special(self):
        """Fields that are not features."""
        return {c for c in (self.label, self.id, self.model_key, self.weight, self.time,
                            *self.ignore) if c}


class BadRecord(ValueError):
    pass


class HashCollision(ValueError):
    """Two columns hash to one feature index: a configuration error (raise --bits)."""


def record_text(raw):
    """A record's text: bytes must be valid UTF-8, text passes through, and a null (a Kafka
    message without a value) has none."""
    if raw is None:
        raise BadRecord("the record has no value (null)")
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadRecord(f"not valid UTF-8 at byte {err.start}") from None


def count_byte(data, byte):
    """How many times ``byte`` (an int) occurs in ``data`` (numpy: ~5x bytes.count)."""
    return int(np.count_nonzero(np.frombuffer(data, np.uint8) == byte))


def _or_none(make, *args):
    """make(*args), or None when it raises anything: a chunk's fast path that fails leaves the
    chunk to the per-record parser, which finds and explains the records at fault."""
    try:
        return make(*args)
    except Exception:
        return None


def _joined(lines):
    """(the lines joined by newlines, the lines as bytes) or, when one is a null, None. Text
    lines are encoded."""
    try:
        return b"\n".join(lines), lines
    except TypeError:  # text, or a null
        pass
    try:
        lines = [line.encode() if isinstance(line, str) else bytes(line) for line in lines]
    except (TypeError, UnicodeEncodeError):
        return None
    return b"\n".join(lines), lines


class _Builder:
    """Accumulates parsed records of one source into an ExampleBlock."""

    def __init__(self, spec, source):
        self.spec, self.source = spec, source
        self.positions, self.ids, self.keys, self.labels, self.weights = [], [], [], [], []
        self.times = []
        self.indptr, self.indices, self.values, self.raw = [0], [], [], []
        self.names, self._index = {}, {}
        self.dead = []
        self.bias = bias_index(spec.bits) if spec.bias else None

    def index(self, name):
        i = self._index.get(name)
        if i is None:
            try:
                i = hash_feature(name, self.spec.bits)
            except UnicodeEncodeError:  # a lone surrogate, from a JSON \\ud800 escape
                raise BadRecord(f"feature name {quoted(name)} is not valid Unicode") from None
            self._index[name] = i
        return i

    def add(self, position, raw, label, features, weight=1.0, id=None, key=DEFAULT_KEY,
            time=None):
        """Add one parsed record, whole or (raising BadRecord) not at all."""
        if self.spec.time and time is None:
            raise BadRecord(f"missing time field {quoted(self.spec.time)}")
        key = DEFAULT_KEY if key is None else _text(key, "model key")
        id = None if id is None or id == "" else _text(id, "id")  # (empty: no id, as in Arrow's)
        merged, named = {}, []
        for name, value in features:
            i = self.index(name)
            if i not in self.names:
                named.append((i, name))
            merged[i] = merged.get(i, 0.0) + value
        # nothing below can fail: the record goes in whole
        for i, name in named:
            self.names.setdefault(i, name)
        if self.bias is not None:
            merged[self.bias] = merged.get(self.bias, 0.0) + 1.0
        # a row's features in index order, as block_from_table has them: a record is learned
        # alike whichever path parsed it
        for i in sorted(merged):
            v = merged[i]
            if v != 0.0:
                self.indices.append(i)
                self.values.append(v)
        self.indptr.append(len(self.indices))
        self.positions.append(position)
        self.ids.append(id)
        self.keys.append(key)
        self.labels.append(label)
        self.weights.append(weight)
        self.times.append(time)
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
            np.asarray(self.values, dtype=np.float64), FeatureNames.of(self.names), self.raw,
            np.asarray(self.times, dtype=np.float64) if self.spec.time else None)


def empty_block(spec, source):
    return _Builder(spec, source).block()


def _number(value, what, name=None):
    """float(value); a BadRecord naming ``what`` (and the feature ``name``) when it is none."""
    try:
        return float(value)
    except OverflowError:  # an integer past float's range (JSON allows any number of digits)
        problem = "is out of range"
    except (TypeError, ValueError):
        problem = "is not a number"
    what = what if name is None else f"{what} {quoted(name)}"
    raise BadRecord(f"{what} {quoted(value)} {problem}")


def _text(value, what):
    """An id or model key as the text its record wrote, which Arrow can hold (no lone
    surrogates): text as it is, a number or boolean as JSON writes it (true, 3, 3.0: 3.0 is
    not 3), anything else (a Parquet date) as Python does. Ids and model keys are compared as
    this text, whichever path read them (Arrow's casts an integer column to the same text, and
    takes no other numbers: ``numeric_table``)."""
    if type(value) is str and value.isascii():
        return value
    if isinstance(value, (bool, np.bool_)):
        text = "true" if value else "false"
    elif isinstance(value, (int, float, np.integer, np.floating)):
        text = json.dumps(value.item() if isinstance(value, np.generic) else value)
    else:
        text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRecord(f"{what} {quoted(text)} is not valid Unicode") from None
    return text


def record_time(value, spec):
    """A --time-column value -> seconds since the epoch: a number of ``spec.time_unit``s (or
    its text), or ISO 8601 text (a date and time; UTC when it has no offset)."""
    if isinstance(value, datetime.datetime):  # (a Parquet timestamp)
        seconds = (value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
                   ).timestamp()
    elif isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        seconds = float(value) / spec.time_unit
    elif isinstance(value, str):
        try:
            seconds = float(value) / spec.time_unit
        except ValueError:
            try:
                when = datetime.datetime.fromisoformat(value.strip())
            except ValueError:
                raise BadRecord(f"time {quoted(value)} is neither a number nor ISO 8601 "
                                "text") from None
            seconds = (when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)
                       ).timestamp()
    else:
        raise BadRecord(f"time {quoted(value)} is neither a number nor ISO 8601 text")
    if not math.isfinite(seconds):
        raise BadRecord(f"time {quoted(value)} is not finite")
    return seconds


def _mapping_record(b, spec, row, strings_are_numbers):
    """Fields of one mapping (a JSON object, a CSV row, a Parquet row) -> builder.add args."""
    if spec.label not in row or row[spec.label] in (None, ""):
        if spec.require_label:
            raise BadRecord(f"missing label field {quoted(spec.label)}")
        label = float("nan")
    else:
        try:
            label = spec.label_value(row[spec.label])
        except BadRecord as err:
            if str(err) != "missing label":
                raise
            if spec.require_label:
                raise BadRecord(f"missing label field {quoted(spec.label)}") from None
            label = float("nan")
    weight = 1.0
    if spec.weight and row.get(spec.weight) not in (None, ""):
        weight = _number(row[spec.weight], "importance weight")
    features = []
    for name, value in row.items():
        if name in spec.special or value is None or value == "":
            continue
        if isinstance(value, (bool, int, float, np.number)):
            features.append((name, _number(value, "feature", name)))
        elif isinstance(value, str):
            if name in spec.categorical or not strings_are_numbers:
                features.append((f"{name}={value}", 1.0))
            else:
                features.append((name, _number(value, "feature", name)))
        else:
            raise BadRecord(f"feature {quoted(name)} has unsupported value {quoted(value)}")
    key = row.get(spec.model_key) if spec.model_key else DEFAULT_KEY
    id_ = row.get(spec.id) if spec.id else None
    time = None
    if spec.time and row.get(spec.time) not in (None, ""):
        time = record_time(row[spec.time], spec)
    return label, features, weight, id_, key, time


def _one_line(text):
    """The text of a line-based record (VW, libsvm), which holds no line break but at its end
    (a Kafka message may hold several lines)."""
    if "\n" not in text and "\r" not in text:
        return text
    line = text.rstrip("\r\n")
    if "\n" in line or "\r" in line:
        at = min(i for i in (line.find("\n"), line.find("\r")) if i >= 0)
        raise BadRecord(f"a record is one line; this one breaks at character {at}")
    return line


def _parse_each(b, items, parse_one, text=True):
    """Each (position, raw record): parse_one(its text, or with text=False the raw record
    itself) gives the builder's add() arguments. Any failure makes that record a dead letter:
    one record cannot stop the reader."""
    for position, raw in items:
        try:
            b.add(position, raw, *parse_one(record_text(raw) if text else raw))
        except BadRecord as err:
            b.reject(position, raw, str(err))
        except Exception as err:
            b.reject(position, raw, f"cannot parse: {type(err).__name__}: {err}")


def parse_jsonl(spec, source, items):
    """items: (position, raw record: bytes, or text) pairs."""
    block = _json_block(spec, source, items)
    if block is not None:
        return block, []
    b = _Builder(spec, source)
    _parse_each(b, items, lambda line: _mapping_record(b, spec, _json_object(line),
                                                       strings_are_numbers=False))
    return b.block(), b.dead


def _json_object(line):
    """One JSON line -> the fields of its object (a nested "features" object merged in)."""
    if _nested_too_deep(line):
        raise BadRecord(f"JSON nested deeper than {MAX_JSON_NESTING} levels (a record is an "
                        'object of scalars, with at most a nested "features" object)')
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise BadRecord(f"invalid JSON: {err.msg} at column {err.colno}") from None
    except ValueError as err:  # e.g. an integer longer than Python's int digit limit
        raise BadRecord(f"invalid JSON: {err}") from None
    if not isinstance(row, dict):
        raise BadRecord("a JSON line must hold an object")
    return _merged_features(row)


def _merged_features(row):
    """A record's fields with a nested "features" mapping merged in."""
    if isinstance(row.get("features"), dict):
        row = {**{k: v for k, v in row.items() if k != "features"}, **row["features"]}
    return row


def parse_records(spec, source, items):
    """items: (position, record) pairs of the user's own records: dicts (or any mapping, or a
    ``beam.Row`` / named tuple) whose fields are read as a JSON line's are: label, id, model key
    and weight from the fields the spec names, a nested "features" mapping merged in, numbers
    as values, strings as categories. A dead letter carries the record as JSON."""
    b = _Builder(spec, source)
    for position, record in items:
        try:
            row = record._asdict() if hasattr(record, "_asdict") else dict(record)
            b.add(position, _record_json(row), *_mapping_record(
                b, spec, _merged_features(row), strings_are_numbers=False))
        except BadRecord as err:
            b.reject(position, _record_json(record), str(err))
        except Exception as err:
            b.reject(position, _record_json(record), f"cannot parse: {type(err).__name__}: {err}")
    return b.block(), b.dead


def _record_json(record):
    """A user's record as JSON text (what a dead letter keeps of it)."""
    try:
        return json.dumps(record, default=repr)
    except Exception:  # not a JSON-able object at all
        return repr(record)


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def _nested_too_deep(text):
    """True when objects and arrays nest deeper than MAX_JSON_NESTING in a JSON text (read
    before json.loads, which recurses once per level)."""
    if text.count("{") + text.count("[") <= MAX_JSON_NESTING:
        return False
    depth = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub('""', text)):
        depth += 1 if bracket.group() in "[{" else -1
        if depth > MAX_JSON_NESTING:
            return True
    return False


def _json_block(spec, source, items):
    """The chunk parsed whole by Arrow, or None when it needs the per-line path."""
    lines = [raw for _, raw in items]
    table = _json_table(lines, keep=(spec.id, spec.model_key))
    table = table if table is None else _or_none(numeric_table, spec, table)
    if table is None:
        return None
    try:
        return block_from_table(spec, source, table, np.array([p for p, _ in items], np.int64),
                                lines)
    except HashCollision:
        # JSON field names are data, not configuration: the per-line path hashes them like
        # any other feature names (names that collide share an index)
        return None


def _json_table(lines, keep=()):
    """The lines parsed whole by Arrow's JSON reader, one row per line; None when any line needs
    the careful per-line path: not one flat object alone on its line, not valid UTF-8, a field
    that the chunk's first lines do not have, or anything else Arrow refuses. Fields other than
    those named in ``keep`` that hold numbers are read as float64."""
    joined = _joined(lines) if lines else None
    if joined is None:
        return None
    data, lines = joined
    if not _one_flat_object_per_line(data, lines):
        return None
    return _or_none(_read_json, data, lines, keep)


def _one_flat_object_per_line(data, lines):
    """True when the buffer (lines joined by newlines) is valid UTF-8 and each line starts with
    '{', ends with '}' and holds no other '{' or '[': then no object spans lines, Arrow's row i
    is line i, and Arrow's reader (which crashes on JSON nested ~20k deep) sees no nesting.
    One compiled pass counts the buffer's bytes (no temporary the size of the buffer: a poll's
    buffer is megabytes), then one look at each line's first and last byte."""
    n = len(lines)
    array = np.frombuffer(data, np.uint8)
    newlines, brackets, high = _byte_counts(array)
    if brackets != n or newlines != n - 1:
        return False
    lengths = np.fromiter(map(len, lines), np.int64, n)
    last = np.cumsum(lengths + 1) - 2
    if (lengths < 2).any() or not ((array[last - lengths + 1] == ord("{")).all()
                                   and (array[last] == ord("}")).all()):
        return False
    if high:  # (ASCII is UTF-8)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _byte_counts(array):
    """(newlines, '{' and '[', whether any byte is past ASCII) in a byte array."""
    newlines = brackets = 0
    high = np.uint8(0)
    for i in range(array.shape[0]):
        b = array[i]
        newlines += b == 10
        brackets += (b | 0x20) == 0x7b  # '[' is 0x5b, '{' 0x7b: OR-ing in 0x20 makes both 0x7b
        high |= b
    return newlines, brackets, high >= 0x80


def _read_json(data, lines, keep):
    """Arrow reads the first lines, then the whole buffer with the fields found there (as
    float64 where they hold numbers, but those in ``keep``); None when those fields are too
    many, or a line has others."""
    cut = min(JSON_SAMPLE_LINES, len(lines))
    while cut > 1 and sum(map(len, lines[:cut])) > JSON_SAMPLE_BYTES:
        cut //= 2
    sample = pajson.read_json(pa.BufferReader(arrow_buffer(b"\n".join(lines[:cut]))),
                              read_options=pajson.ReadOptions(use_threads=False))
    if sample.num_columns > MAX_JSON_COLUMNS:
        return None
    schema = pa.schema([pa.field(f.name, pa.float64()) if f.name not in keep and (
        pa.types.is_integer(f.type) or pa.types.is_null(f.type)) else f for f in sample.schema])
    # Arrow's threads parse blocks of lines (2 cores: half the time of one block)
    block = max(JSON_BLOCK_BYTES, 2 * max(map(len, lines)) + 2)  # (whole lines in each)
    table = pajson.read_json(
        pa.BufferReader(arrow_buffer(data)),
        read_options=pajson.ReadOptions(use_threads=True, block_size=block),
        parse_options=pajson.ParseOptions(explicit_schema=schema,
                                          unexpected_field_behavior="error"))
    return table if table.num_rows == len(lines) else None


# a libsvm feature index: a positive integer (leading zeros dropped: 007 is feature 7)
_LIBSVM_INDEX = re.compile(r"0*([1-9][0-9]*)")


def parse_libsvm(spec, source, items):
    """label [qid:n] index:value ...; indices are positive integers, hashed by their decimal
    name like any other feature name; qid is ignored."""
    return _compiled_first("libsvm", spec, source, items, _libsvm_lines)


def _libsvm_lines(spec, source, items):
    """parse_libsvm, a line at a time."""
    b = _Builder(spec, source)

    def one(line):
        parts = _one_line(line).split("#", 1)[0].split()
        if not parts:
            raise BadRecord("empty record")
        label = spec.label_value(parts[0])
        features = []
        for token in parts[1:]:
            name, sep, value = token.partition(":")
            if not sep or not name:
                raise BadRecord(f"feature {quoted(token)} is not index:value")
            if name == "qid":
                continue
            index = _LIBSVM_INDEX.fullmatch(name)
            if index is None:
                raise BadRecord(f"feature index {quoted(name)} is not a positive integer")
            features.append((index.group(1), _number(value, "feature", index.group(1))))
        return label, features

    _parse_each(b, items, one)
    return b.block(), b.dead


def parse_vw(spec, source, items):
    """VW text: label [importance] ['tag]|namespace feature[:value] ... |namespace ..."""
    return _compiled_first("vw", spec, source, items, _vw_lines)


def _vw_lines(spec, source, items):
    """parse_vw, a line at a time."""
    b = _Builder(spec, source)

    def one(line):
        head, bar, rest = _one_line(line).partition("|")
        if not bar:
            raise BadRecord("no '|' feature section")
        tokens = head.split()
        if not tokens or tokens[0].startswith("'"):  # VW's unlabeled example: no label, a tag
            if spec.require_label:
                raise BadRecord("missing label")
            label, tokens = float("nan"), [None, *tokens]
        else:
            label = spec.label_value(tokens[0])
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
                features.append((full, _number(value, "feature", full) if sep else 1.0))
        return label, features, weight, tag

    _parse_each(b, items, one)
    return b.block(), b.dead


def parse_csv(spec, source, items):
    """items: (position, raw record: bytes, or text) of data lines; spec.columns is the
    header."""
    if spec.columns is None:
        raise ValueError("CSV records need their column names (RecordSpec.columns): a file's "
                         "header line gives them, else pass --columns")
    lines = [raw for _, raw in items]
    table = _csv_lines_table(spec, lines)
    if table is not None:
        return block_from_table(spec, source, table, np.array([p for p, _ in items], np.int64),
                                lines), []
    b = _Builder(spec, source)
    n_columns = len(spec.columns)

    def one(line):
        fields = [f.strip() for f in _csv_fields(line, spec.delimiter)]
        if len(fields) != n_columns:
            raise BadRecord(f"expected {n_columns} fields, got {len(fields)}")
        return _mapping_record(b, spec, dict(zip(spec.columns, fields)), strings_are_numbers=True)

    _parse_each(b, items, one)
    return b.block(), b.dead


def _csv_lines_table(spec, lines):
    """csv_table of the lines joined, when Arrow's row i is surely line i (no line holds a line
    break or a carriage return, which Arrow takes for one, and no BOM that Arrow would skip)."""
    joined = _joined(lines) if lines else None
    if joined is None:
        return None
    data, lines = joined
    if b"\r" in data or data.startswith(BOM) or count_byte(data, ord("\n")) != len(lines) - 1:
        return None
    table = csv_table(spec, data)
    return table if table is not None and table.num_rows == len(lines) else None


def _csv_fields(line, delimiter):
    """The fields of one CSV line, of any size (the line is in memory already), as written
    (the caller strips them). A delimiter of several characters (e.g. ', ') splits the line
    wherever it occurs: quotes are then characters like any other."""
    if len(delimiter) != 1 or ('"' not in line and "\r" not in line and "\n" not in line):
        return line.split(delimiter)  # what csv.reader gives for such a line, faster
    if len(line) > csv.field_size_limit():
        csv.field_size_limit(len(line))  # process-wide, and only ever raised
    try:
        return next(csv.reader([line], delimiter=delimiter), [])
    except csv.Error as err:
        raise BadRecord(f"CSV: {err}") from None


def csv_table(spec, data):
    """Data lines (bytes, no header) parsed whole by Arrow's CSV reader into the numeric table
    ``block_from_table`` takes, one row per line; None when any record (a blank line too) needs
    the careful per-line path, or Arrow fails in any way."""
    if spec.categorical:
        return None
    return _or_none(_read_csv, spec, data)


def _arrow_delimiter(delimiter, data):
    """(the one-character delimiter Arrow can split the data at as the per-line path splits it
    at ``delimiter``, whether Arrow may read quotes) or None. A delimiter of several characters
    (', ') works when it is one character with whitespace around it and that character occurs
    in the data only within the delimiter: splitting at the character and stripping the values
    then gives what splitting at the delimiter and stripping gives (quotes stay characters)."""
    if len(delimiter) == 1:
        return delimiter, True
    char = delimiter.strip()
    if len(char) != 1 or len(char.encode()) != 1:
        return None
    if data.count(char.encode()) != data.count(delimiter.encode()):
        return None
    return char, False


def _read_csv(spec, data):
    delimiter = _arrow_delimiter(spec.delimiter, data)
    if delimiter is None:
        return None
    delimiter, quoting = delimiter
    strings = [c for c in (spec.id, spec.model_key) if c and c in spec.columns]
    types = {c: pa.string() if c in strings else pa.float64() for c in spec.columns}
    if spec.labels and spec.labels.active and spec.label in types:
        types[spec.label] = pa.string()  # mapped below
    convert = pacsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                   null_values=[""])
    if spec.ignore:
        convert.include_columns = [c for c in spec.columns if c not in spec.ignore]
    table = pacsv.read_csv(
        pa.BufferReader(arrow_buffer(data)),
        read_options=pacsv.ReadOptions(column_names=spec.columns, use_threads=True),
        parse_options=pacsv.ParseOptions(delimiter=delimiter, quote_char='"' if quoting else False,
                                         ignore_empty_lines=False),
        convert_options=convert)
    # values are stripped of surrounding whitespace, as on the per-line path (Arrow strips
    # numbers itself)
    for c in strings:
        i = table.column_names.index(c)
        table = table.set_column(i, c, pc.utf8_trim_whitespace(table.column(i)))
    if spec.label in spec.columns and not _labels_fit(spec, table.column(spec.label)):
        return None
    if spec.weight and table.column(spec.weight).null_count:
        return None
    if spec.time and not _times_fit(spec, table):
        return None
    return spec.mapped_label_column(table)


def _labels_fit(spec, column):
    """True when a fast path may take the label column as it is: no nulls unless records may
    lack labels, and no NaN value (NaN marks an absent label; a written one is refused by the
    per-record path)."""
    if column.null_count and spec.require_label:
        return False
    return not (pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py())


def _times_fit(spec, table):
    """True when a fast path may take the --time-column as it is: a finite number in each row
    (text times, nulls and the rest go record by record, which explains the bad ones)."""
    if spec.time not in table.column_names:
        return False
    column = table.column(spec.time)
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)) or column.null_count:
        return False
    return pc.all(pc.is_finite(pc.cast(column, pa.float64()))).as_py() is not False


def block_from_table(spec, source, table, positions, raw):
    """Numeric columns of an Arrow table -> ExampleBlock, vectorised (no per-row Python).
    Raises HashCollision when two columns hash to one feature index."""
    n = table.num_rows
    names = [c for c in table.column_names if c not in spec.special]
    bits_index = {}
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
    # each row's features in index order, as _Builder has them: a record is learned alike
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


def numeric_table(spec, table):
    """The table with every field but id and model key as float64, when each is a number (or
    null, an absent feature) and labels and weights are present; else None. With a label
    mapping (RecordSpec.labels) the label column may hold text: it is mapped to numbers."""
    if (spec.labels and spec.labels.active and spec.label in table.column_names
            and _labels_fit(spec, table.column(spec.label))):
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
    if (labeled and not _labels_fit(spec, table.column(spec.label))) or (spec.weight and (
            spec.weight not in table.column_names or table.column(spec.weight).null_count)):
        return None
    if spec.time and not _times_fit(spec, table):
        return None
    if any(not (pa.types.is_string(table.schema.field(c).type)
                or pa.types.is_integer(table.schema.field(c).type))
           for c in (spec.id, spec.model_key) if c and c in table.column_names):
        return None
    return table.cast(_float_schema(spec, table.schema))


def parse_table(spec, source, table, first_row):
    """A Parquet record batch -> (block, dead letters); rows that are not numeric go one by one."""
    positions = np.arange(first_row, first_row + table.num_rows, dtype=np.int64)
    numeric = _or_none(numeric_table, spec, table)
    if numeric is not None:
        return block_from_table(spec, source, numeric, positions, None), []
    b = _Builder(spec, source)
    rows = table.to_pylist()
    _parse_each(b, zip(positions.tolist(), rows),
                lambda row: _mapping_record(b, spec, row, strings_are_numbers=False), text=False)
    for d in b.dead:
        d.raw = json.dumps(d.raw, default=str)
    b.raw = [json.dumps(r, default=str) for r in b.raw]
    return b.block(), b.dead


def _float_schema(spec, schema):
    return pa.schema([pa.field(f.name, f.type if f.name in (spec.id, spec.model_key)
                               else pa.float64()) for f in schema])


def _compiled_first(fmt, spec, source, items, line_by_line):
    """(block, dead letters) of (position, record) items: read by the compiled reader when
    all are bytes and it reads them all, else by ``line_by_line``."""
    lines = joined([raw for _, raw in items])
    if lines is not None:
        positions = np.fromiter((p for p, _ in items), np.int64, len(items))
        block = read_block(fmt, spec, source, *lines, positions)
        if block is not None:
            return block, []
    return line_by_line(spec, source, items)
