"""File sources (local paths and globs, gzip) and the per-bundle file sinks."""
import csv
import glob
import gzip
import io
import json
import os
import uuid
from dataclasses import replace

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .formats import PARSERS, parse_table

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


def _open_text(path):
    raw = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def read_file(path, fmt, spec, chunk_size=8192):
    """Yield (ExampleBlock, dead letters) for consecutive chunks of a file, in order."""
    if fmt == "parquet":
        first = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_size):
            table = pa.Table.from_batches([batch])
            yield parse_table(spec, path, table, first)
            first += table.num_rows
        return
    parse = PARSERS[fmt]
    with _open_text(path) as f:
        number = 0
        if fmt == "csv":
            header = f.readline()
            number = 1
            if not header.strip():
                raise ValueError(f"{path}: CSV file has no header line")
            columns = next(csv.reader([header.rstrip("\r\n")], delimiter=spec.delimiter))
            spec = replace(spec, columns=[c.strip() for c in columns])
            if spec.require_label and spec.label not in spec.columns:
                raise ValueError(f"{path}: label column {spec.label!r} not in header "
                                 f"{spec.columns}")
        items = []
        for line in f:
            number += 1
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            items.append((number, line))
            if len(items) >= chunk_size:
                yield parse(spec, path, items)
                items = []
        if items:
            yield parse(spec, path, items)


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
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        raise ValueError(f"unknown output format {fmt!r}; choose one of {OUTPUT_FORMATS}")
    os.replace(temp, final)
    return final


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
