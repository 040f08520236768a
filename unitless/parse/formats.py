"""The one table of data formats: each one's name, the file name endings that mean it, how its
records are read from files and Kafka message values, and how the outputs written in it
(predictions, dead letters) are written and read back. Adding a format is one entry."""
import base64
import json
from dataclasses import dataclass
from typing import Callable, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .csv import parse_csv
from .jsonl import parse_jsonl
from .libsvm import libsvm_lines, parse_libsvm
from .records import arrow_buffer
from .vw import parse_vw, vw_lines


@dataclass(frozen=True)
class Format:
    name: str
    extensions: tuple
    # a chunk of (position, record) items -> (ExampleBlock, dead letters); None: a file is read
    # whole by its own reader (Parquet: files.read_file)
    parse: Optional[Callable] = None
    # formats read by the compiled reader (sparse_text.read_block) first: the per-line parser
    # of the chunks it leaves
    line_by_line: Optional[Callable] = None
    value: bool = False  # a Kafka message value may be a record of it
    write: Optional[Callable] = None  # an output table -> the bytes of its file
    read: Optional[Callable] = None  # an output file's bytes -> its table (None: an empty one)


def _write_parquet(table):
    # dictionary-encoded: the text columns (a prediction's model key, source and checkpoint
    # repeat); not numbers, which rarely repeat and which Arrow otherwise tries first, at
    # twice the cost of writing them plain for files as large
    text = [f.name for f in table.schema if pa.types.is_string(f.type)
            or pa.types.is_large_string(f.type) or pa.types.is_binary(f.type)]
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, use_dictionary=text)
    return sink.getvalue().to_pybytes()


def _write_csv(table):
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    return sink.getvalue().to_pybytes()


def _write_jsonl(table):
    """Strict JSON: a NaN or infinity fails the write (ValueError naming its column) rather
    than become a bare NaN token that strict parsers refuse; the steps before refuse such
    outcomes with their reason, so reaching here would be a bug."""
    refuse_non_finite(table)
    binary = {f.name for f in table.schema
              if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)}
    return "".join(json.dumps(_json_row(row, binary), ensure_ascii=False, allow_nan=False)
                   + "\n" for row in table.to_pylist()).encode("utf-8")


def refuse_non_finite(table: pa.Table) -> None:
    """Raise ValueError when a float column of the table holds NaN or an infinity: JSON has no
    such numbers (the one rule of every JSON output: files and Kafka messages)."""
    for name, column in zip(table.column_names, table.columns):
        if pa.types.is_floating(column.type) and column.length() and not (
                pc.all(pc.or_kleene(pc.is_finite(column), pc.is_null(column))).as_py()):
            raise ValueError(f"column {name!r} holds a value that is not finite: JSON outputs "
                             "carry finite numbers only")


def _json_row(row, binary):
    """A row for JSON output. JSON cannot carry arbitrary bytes, so each binary column (a dead
    letter's ``raw`` record) is written as text when its bytes are valid UTF-8 (else null),
    followed by ``<column>_base64``, the exact bytes (null only for a null)."""
    if not binary:
        return row
    out = {}
    for name, value in row.items():
        if name in binary:
            out[name] = _utf8_or_none(value)
            out[name + "_base64"] = (None if value is None
                                     else base64.b64encode(value).decode("ascii"))
        else:
            out[name] = value
    return out


def _utf8_or_none(data):
    try:
        return data.decode("utf-8")
    except (AttributeError, UnicodeDecodeError):
        return None


# (Arrow reads a copy in its own memory: see records.arrow_buffer)
def _read_parquet(data):
    return pq.read_table(pa.BufferReader(arrow_buffer(data)))


def _read_csv(data):
    return pacsv.read_csv(pa.BufferReader(arrow_buffer(data)))


def _read_jsonl(data):
    rows = [json.loads(line) for line in data.splitlines() if line.strip()]
    return pa.Table.from_pylist(rows) if rows else None


FORMATS = {f.name: f for f in (
    Format("csv", (".csv",), parse_csv, value=True, write=_write_csv, read=_read_csv),
    Format("libsvm", (".libsvm", ".svm", ".svmlight"), parse_libsvm, libsvm_lines,
           value=True),
    Format("vw", (".vw",), parse_vw, vw_lines, value=True),
    Format("jsonl", (".jsonl", ".json"), parse_jsonl, value=True, write=_write_jsonl,
           read=_read_jsonl),
    Format("parquet", (".parquet",), write=_write_parquet, read=_read_parquet),
)}
EXTENSIONS = {ending: f.name for f in FORMATS.values() for ending in f.extensions}
OUTPUT_FORMATS = tuple(name for name, f in FORMATS.items() if f.write)
VALUE_FORMATS = tuple(name for name, f in FORMATS.items() if f.value)
