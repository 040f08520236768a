"""File sources (local paths and globs, gzip) and the per-bundle file sinks."""
import csv
import glob
import gzip
import json
import os
import uuid
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .formats import PARSERS, block_from_table, csv_table, parse_table
from .records import TextLines

OUTPUT_FORMATS = ("parquet", "jsonl", "csv")


def expand_inputs(patterns):
    """Sorted files matching each pattern; a pattern matching nothing is an error."""
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(os.path.expanduser(pattern))) or (
            [pattern] if os.path.isfile(pattern) else [])
        if not matches:
            raise FileNotFoundError(f"input not found: {pattern}")
        files.extend(m for m in matches if os.path.isfile(m))
    return files


def _open(path):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _buffers(f, size):
    """Consecutive runs of whole lines (bytes, each ending in a newline) read from f."""
    rest = b""
    while True:
        data = f.read(size)
        if not data:
            if rest:
                yield rest + b"\n"
            return
        data = rest + data
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        if cut:
            yield data[:cut]


def _lines(data, first_number):
    """(line number, text) of the non-blank lines of a buffer."""
    for number, line in enumerate(data.decode("utf-8", errors="replace").split("\n")[:-1],
                                  first_number):
        line = line.rstrip("\r")
        if line.strip():
            yield number, line


def _unquoted(data):
    """True when no field may hold a newline, so Arrow's row i is the buffer's line i (the
    parse refuses blank lines)."""
    return b'"' not in data


def _csv_header(f, path, spec):
    header = f.readline().decode("utf-8", errors="replace").rstrip("\r\n")
    if not header.strip():
        raise ValueError(f"{path}: CSV file has no header line")
    columns = next(csv.reader([header], delimiter=spec.delimiter))
    spec = replace(spec, columns=[c.strip() for c in columns])
    if spec.require_label and spec.label not in spec.columns:
        raise ValueError(f"{path}: label column {spec.label!r} not in header {spec.columns}")
    return spec


def read_file(path, fmt, spec, chunk_size=8192, buffer_bytes=8 << 20):
    """Yield (ExampleBlock, dead letters) for consecutive chunks of a file, in order.

    Text is read in buffers of whole lines. A CSV buffer without quotes or blank lines is parsed
    whole by Arrow; any other buffer, or one Arrow refuses, goes line by line through the
    format's parser, which sends each bad record to the dead letters.
    """
    if fmt == "parquet":
        first = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_size):
            table = pa.Table.from_batches([batch])
            yield parse_table(spec, path, table, first)
            first += table.num_rows
        return
    parse = PARSERS[fmt]
    with _open(path) as f:
        number = 1  # line number of the buffer's first line
        if fmt == "csv":
            spec = _csv_header(f, path, spec)
            number = 2
        for data in _buffers(f, buffer_bytes):
            table = csv_table(spec, data) if fmt == "csv" and _unquoted(data) else None
            if table is not None:
                for a in range(0, table.num_rows, chunk_size):
                    rows = table.slice(a, chunk_size)
                    positions = np.arange(number + a, number + a + rows.num_rows)
                    yield block_from_table(spec, path, rows, positions,
                                           TextLines(data, a)), []
            else:
                items = list(_lines(data, number))
                for a in range(0, len(items), chunk_size):
                    yield parse(spec, path, items[a:a + chunk_size])
            number += table.num_rows if table is not None else data.count(b"\n")


def write_table(directory, table, fmt):
    """Write one part file atomically (temp name, then rename); returns its path."""
    os.makedirs(directory, exist_ok=True)
    name = f"part-{uuid.uuid4().hex}.{fmt}"
    final = os.path.join(directory, name)
    temp = os.path.join(directory, f".{name}.tmp")
    if fmt == "parquet":
        pq.write_table(table, temp)
    elif fmt == "csv":
        pacsv.write_csv(table, temp)
    elif fmt == "jsonl":
        with open(temp, "w", encoding="utf-8") as f:
            for row in table.to_pylist():
                f.write(json.dumps(row, ensure_ascii=False, default=_text) + "\n")
    else:
        raise ValueError(f"unknown output format {fmt!r}; choose one of {OUTPUT_FORMATS}")
    os.replace(temp, final)
    return final


def _text(value):
    """Bytes in JSON output (a dead letter's raw record): UTF-8 text, other bytes as \\xNN."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def read_output(directory):
    """All part files of an output directory as one Arrow table (for tests and users)."""
    tables = []
    for path in sorted(glob.glob(os.path.join(directory, "part-*"))):
        if path.endswith(".parquet"):
            tables.append(pq.read_table(path))
        elif path.endswith(".csv"):
            tables.append(pacsv.read_csv(path))
        elif path.endswith(".jsonl"):
            with open(path, encoding="utf-8") as f:
                rows = [json.loads(line) for line in f]
            if rows:
                tables.append(pa.Table.from_pylist(rows))
    return pa.concat_tables(tables, promote_options="permissive") if tables else None
