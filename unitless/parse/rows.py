"""Records parsed one at a time into a block (``Builder``), and what every format's careful
per-record path shares: text and numbers checked, a mapping's fields as a record, one bad
record a dead letter that cannot stop the reader."""
import datetime
import json
import math
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar

import numpy as np

from ..learner import bias_index, hash_feature
from ..learner.names import FeatureNames
from .line_spans import joined
from .records import DeadLetter, ExampleBlock, quoted, string_array
from .sparse_text import read_block
from .spec import DEFAULT_KEY, BadRecord, RecordSpec, as_float


BOM = b"\xef\xbb\xbf"
_T = TypeVar("_T")


def record_text(raw: bytes | str | None) -> str:
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


def count_byte(data: bytes, byte: int) -> int:
    """How many times ``byte`` (an int) occurs in ``data`` (numpy: ~5x bytes.count)."""
    return int(np.count_nonzero(np.frombuffer(data, np.uint8) == byte))


def or_none(make: Callable[..., _T], *args: Any) -> Optional[_T]:
    """make(*args), or None when it raises anything: a chunk's fast path that fails leaves the
    chunk to the per-record parser, which finds and explains the records at fault."""
    try:
        return make(*args)
    except Exception:
        return None


def joined_lines(lines: Sequence[Any]) -> Optional[tuple[bytes, Sequence[bytes]]]:
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


class Builder:
    """Accumulates parsed records of one source into an ExampleBlock."""
    positions: list[int]
    ids: list[Optional[str]]
    keys: list[str]
    labels: list[float]
    weights: list[float]
    times: list[Optional[float]]
    indptr: list[int]
    indices: list[int]
    values: list[float]
    raw: list[object]
    names: dict[int, str]
    _index: dict[str, int]
    dead: list[DeadLetter]

    def __init__(self, spec: RecordSpec, source: str) -> None:
        self.spec, self.source = spec, source
        self.positions, self.ids, self.keys, self.labels, self.weights = [], [], [], [], []
        self.times = []
        self.indptr, self.indices, self.values, self.raw = [0], [], [], []
        self.names, self._index = {}, {}
        self.dead = []
        self.bias = bias_index(spec.bits) if spec.bias else None

    def index(self, name: str) -> int:
        i = self._index.get(name)
        if i is None:
            try:
                i = hash_feature(name, self.spec.bits)
            except UnicodeEncodeError:  # a lone surrogate, from a JSON \\ud800 escape
                raise BadRecord(f"feature name {quoted(name)} is not valid Unicode") from None
            self._index[name] = i
        return i

    def add(self, position: int, raw: object, label: float,
            features: Iterable[tuple[str, float]], weight: float = 1.0, id: object = None,
            key: object = DEFAULT_KEY, time: Optional[float] = None) -> None:
        """Add one parsed record, whole or (raising BadRecord) not at all."""
        if self.spec.time and time is None:
            raise BadRecord(f"missing time field {quoted(self.spec.time)}")
        key = DEFAULT_KEY if key is None else as_text(key, "model key")
        id = None if id is None or id == "" else as_text(id, "id")  # (empty: no id, as in Arrow's)
        merged: dict[int, float]
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

    def reject(self, position: int, raw: object, reason: str) -> None:
        self.dead.append(DeadLetter(self.source, int(position), raw, reason))

    def block(self) -> ExampleBlock:
        if self.bias is not None:
            self.names.setdefault(self.bias, "constant")
        return ExampleBlock(
            self.source, np.asarray(self.positions, dtype=np.int64), string_array(self.ids),
            string_array(self.keys),
            np.asarray(self.labels, dtype=np.float64), np.asarray(self.weights, dtype=np.float64),
            np.asarray(self.indptr, dtype=np.int64), np.asarray(self.indices, dtype=np.int64),
            np.asarray(self.values, dtype=np.float64), FeatureNames.of(self.names), self.raw,
            np.asarray(self.times, dtype=np.float64) if self.spec.time else None)


def empty_block(spec: RecordSpec, source: str) -> ExampleBlock:
    return Builder(spec, source).block()


def as_text(value: object, what: str) -> str:
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


def record_time(value: object, spec: RecordSpec) -> float:
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


def mapping_record(b: Builder, spec: RecordSpec, row: Mapping[str, Any],
                   strings_are_numbers: bool
                   ) -> tuple[float, list[tuple[str, float]], float, Any, Any, Optional[float]]:
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
        weight = as_float(row[spec.weight], "importance weight")
    features = []
    for name, value in row.items():
        if name in spec.special or value is None or value == "":
            continue
        if isinstance(value, (bool, int, float, np.number)):
            features.append((name, as_float(value, "feature", name)))
        elif isinstance(value, str):
            if name in spec.categorical or not strings_are_numbers:
                features.append((f"{name}={value}", 1.0))
            else:
                features.append((name, as_float(value, "feature", name)))
        else:
            raise BadRecord(f"feature {quoted(name)} has unsupported value {quoted(value)}")
    key = row.get(spec.model_key) if spec.model_key else DEFAULT_KEY
    id_ = row.get(spec.id) if spec.id else None
    time = None
    if spec.time and row.get(spec.time) not in (None, ""):
        time = record_time(row[spec.time], spec)
    return label, features, weight, id_, key, time


def one_line(text: str) -> str:
    """The text of a line-based record (VW, libsvm), which holds no line break but at its end
    (a Kafka message may hold several lines)."""
    if "\n" not in text and "\r" not in text:
        return text
    line = text.rstrip("\r\n")
    if "\n" in line or "\r" in line:
        at = min(i for i in (line.find("\n"), line.find("\r")) if i >= 0)
        raise BadRecord(f"a record is one line; this one breaks at character {at}")
    return line


def parse_each(b: Builder, items: Iterable[tuple[int, Any]], parse_one: Callable[[Any], tuple],
               text: bool = True) -> None:
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


def compiled_first(fmt: str, spec: RecordSpec, source: str,
                   items: Sequence[tuple[int, bytes | str | None]],
                   line_by_line: Callable[..., tuple[ExampleBlock, list[DeadLetter]]]
                   ) -> tuple[ExampleBlock, list[DeadLetter]]:
    """(block, dead letters) of (position, record) items: read by the compiled reader when
    all are bytes and it reads them all, else by ``line_by_line``."""
    lines = joined([raw for _, raw in items])
    if lines is not None:
        positions = np.fromiter((p for p, _ in items), np.int64, len(items))
        block = read_block(fmt, spec, source, *lines, positions)
        if block is not None:
            return block, []
    return line_by_line(spec, source, items)
