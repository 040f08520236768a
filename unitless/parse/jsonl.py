"""JSON lines, and the user's own records (mappings read as a JSON line's fields are): a chunk
parsed whole by Arrow's JSON reader where it is plainly one flat object a line, else line by
line."""
import json
import re
from typing import Any, Iterable, Sequence

import numba
import numpy as np
import pyarrow as pa
import pyarrow.json as pajson

from .records import DeadLetter, ExampleBlock, arrow_buffer
from .rows import Builder, joined_lines, mapping_record, or_none, parse_each
from .spec import BadRecord, HashCollision, RecordSpec
from .tables import block_from_table, numeric_table


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


def parse_jsonl(spec: RecordSpec, source: str, items: Sequence[tuple[int, bytes | str | None]]
                ) -> tuple[ExampleBlock, list[DeadLetter]]:
    """items: (position, raw record: bytes, or text) pairs."""
    block = _json_block(spec, source, items)
    if block is not None:
        return block, []
    b = Builder(spec, source)
    parse_each(b, items, lambda line: mapping_record(b, spec, _json_object(line),
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
    return merged_features(row)


def merged_features(row: dict[str, Any]) -> dict[str, Any]:
    """A record's fields with a nested "features" mapping merged in."""
    if isinstance(row.get("features"), dict):
        row = {**{k: v for k, v in row.items() if k != "features"}, **row["features"]}
    return row


def parse_records(spec: RecordSpec, source: str, items: Iterable[tuple[int, Any]]
                  ) -> tuple[ExampleBlock, list[DeadLetter]]:
    """items: (position, record) pairs of the user's own records: dicts (or any mapping, or a
    ``beam.Row`` / named tuple) whose fields are read as a JSON line's are: label, id, model key
    and weight from the fields the spec names, a nested "features" mapping merged in, numbers
    as values, strings as categories. A dead letter carries the record as JSON."""
    b = Builder(spec, source)
    for position, record in items:
        try:
            row = record._asdict() if hasattr(record, "_asdict") else dict(record)
            b.add(position, _record_json(row), *mapping_record(
                b, spec, merged_features(row), strings_are_numbers=False))
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
    table = table if table is None else or_none(numeric_table, spec, table)
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
    joined = joined_lines(lines) if lines else None
    if joined is None:
        return None
    data, lines = joined
    if not _one_flat_object_per_line(data, lines):
        return None
    return or_none(_read_json, data, lines, keep)


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
