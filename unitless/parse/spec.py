"""What a run reads of each record (``RecordSpec``: which fields are the label, id, model key,
weight and time, how features are hashed) and the one label mapping (``LabelMap``), with the
errors a record or a configuration can raise."""
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .records import quoted


DEFAULT_KEY = ""


TRUTH = {"true": 1.0, "false": -1.0}


def as_number(text: str) -> Optional[float]:
    """float(text), or None when it is not a finite number."""
    try:
        number = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if np.isfinite(number) else None


def label_text(value: str | bool | int | float) -> str:
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
    positive: Optional[str] = None
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
    def active(self) -> bool:
        return self.positive is not None or bool(self.classes)

    def value(self, raw: object) -> float:
        """The learner's label for one record's label value; BadRecord when it has none."""
        if not self.active:
            if isinstance(raw, str) and raw.strip().lower() in TRUTH:
                return TRUTH[raw.strip().lower()]
            label = as_float(raw, "label")
            if label != label:  # NaN is how a block marks an example without a label
                raise BadRecord(f"label {quoted(raw)} is not a number")
            return label
        if not isinstance(raw, (str, bool, int, float)):
            raise BadRecord(f"label {quoted(raw)} is not a number or text")
        try:
            text = label_text(raw)
        except ValueError:  # an integer too long for str()
            raise BadRecord(f"label {quoted(raw)} is out of range") from None
        if not text:
            raise BadRecord("missing label")
        if self.positive is not None:
            positive = self.positive.strip()
            if text == positive:
                return 1.0
            number, wanted = as_number(text), as_number(positive)
            return 1.0 if number is not None and number == wanted else -1.0
        names = self.classes
        if text in names:
            return float(names.index(text) + 1)
        number = as_number(text)
        if number is not None:
            for i, name in enumerate(names):
                if as_number(name) == number:
                    return float(i + 1)
        raise BadRecord(f"label {quoted(text)} is not one of the classes {', '.join(names)}")

    def arrow(self, column: pa.Array | pa.ChunkedArray) -> Optional[pa.Array]:
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


def check_column_names(columns: Iterable[str], where: str,
                       fix: str = "name every column with --columns (and leave out "
                                  "those that are no feature with --ignore-columns)") -> None:
    """Refuse a list of column names (a CSV header, --columns, a Parquet schema; ``where``
    names it, ``fix`` says what to do) that gives a name twice or a column none: a column is
    found by its name, and a feature's index is its name's hash."""
    seen: dict[str, int] = {}
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
    id: Optional[str] = None
    model_key: Optional[str] = None
    weight: Optional[str] = None
    # the record's own time (--time-column): a number of ``time_unit``s since the epoch, or
    # ISO 8601 text (UTC without an offset); a Kafka record's timestamp otherwise
    time: Optional[str] = None
    time_unit: float = 1.0  # units a second: 1 (s), 1000 (ms), 1e6 (µs)
    bits: int = 18
    bias: bool = True
    categorical: tuple = ()
    delimiter: str = ","
    # a record whose label is absent or null is refused (a dead letter), or else read with the
    # label NaN: an example to serve (training) or score, not to learn
    require_label: bool = True
    header_needs_label: bool = True  # a CSV header without the label column is refused
    # CSV column names: given, or the reader sets them
    columns: Optional[list] = field(default=None)
    header: bool = True  # CSV: the first line names the columns (else it is data)
    ignore: tuple = ()  # columns dropped: neither features nor anything else
    labels: LabelMap = NO_MAP  # how label values become labels (--positive-label, --classes)

    def label_value(self, raw: object) -> float:
        """The learner's label for a record's label value (BadRecord when there is none)."""
        return (self.labels or NO_MAP).value(raw)

    def mapped_label_column(self, table: pa.Table) -> Optional[pa.Table]:
        """The table with its label column mapped to float64 by ``labels`` (as is without a
        mapping or a label column); None when a label needs the per-record path."""
        if not (self.labels and self.labels.active) or self.label not in table.column_names:
            return table
        mapped = self.labels.arrow(table.column(self.label))
        if mapped is None:
            return None
        return table.set_column(table.column_names.index(self.label), self.label, mapped)

    @property
    def special(self) -> set[str]:
        """Fields that are not features."""
        return {c for c in (self.label, self.id, self.model_key, self.weight, self.time,
                            *self.ignore) if c}


class BadRecord(ValueError):
    pass


class HashCollision(ValueError):
    """Two columns hash to one feature index: a configuration error (raise --bits)."""


def as_float(value: Any, what: str, name: Optional[str] = None) -> float:
    """float(value); a BadRecord naming ``what`` (and the feature ``name``) when it is none."""
    try:
        return float(value)
    except OverflowError:  # an integer past float's range (JSON allows any number of digits)
        problem = "is out of range"
    except (TypeError, ValueError):
        problem = "is not a number"
    what = what if name is None else f"{what} {quoted(name)}"
    raise BadRecord(f"{what} {quoted(value)} {problem}")
