"""File sources (paths and globs on any file system, gzip) and the per-bundle file sinks."""
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import replace
from functools import partial
from typing import Callable, Iterable, Iterator, Optional, cast

import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .storage import (atomic_write, join, list_dir, makedirs, match, open_input, open_read,
                      read_bytes, scheme)
from ..parse.csv import csv_fields, csv_table
from ..parse.formats import FORMATS, OUTPUT_FORMATS
from ..parse.records import DeadLetter, ExampleBlock, TextLines
from ..parse.rows import BOM, count_byte, empty_block
from ..parse.sparse_text import read_block
from ..parse.spec import RecordSpec, check_column_names
from ..parse.tables import block_from_table, parse_table

log = logging.getLogger("unitless")


def expand_inputs(patterns: Iterable[str]) -> list[str]:
    """Sorted files matching each pattern; a pattern matching nothing is an error."""
    files = []
    for pattern in patterns:
        matches = match(pattern)
        if not matches:
            raise FileNotFoundError(f"input not found: {pattern}")
        files.extend(matches)
    return files


LINE_END_READ = 1 << 16  # bytes read at a time to finish the line a buffer cuts


def _buffers(f, size, rest=b""):
    """Consecutive runs of whole lines (bytes, each ending in a newline; a last line without
    one gets one) read from f, after ``rest`` (bytes read from f already): ``size`` bytes, then
    on to the end of the line they cut (read ``LINE_END_READ`` bytes at a time: some file
    objects, gs://'s, read a line a byte at a time), joined once."""
    while True:
        data = f.read(size)
        parts = [rest, data] if rest else [data]
        rest = b""
        while data and not data.endswith(b"\n"):
            data = f.read(LINE_END_READ)
            cut = data.find(b"\n") + 1
            parts.append(data[:cut] if cut else data)
            if cut:
                rest = data[cut:]
                break
        buffer = b"".join(parts)  # (one part: itself, not a copy)
        if not buffer:
            return
        yield buffer if buffer.endswith(b"\n") else buffer + b"\n"


@numba.njit(cache=True, nogil=True)
def _lines(data):
    """(line index, start, stop) of each non-blank line of a buffer of whole lines, and for each
    blank line how many non-blank lines came before it. A line stops before its '\\r\\n' or
    '\\n'; a blank line holds nothing but ASCII whitespace."""
    n = 0
    for b in data:
        n += b == 10
    index = np.empty(n, np.int64)
    starts = np.empty(n, np.int64)
    stops = np.empty(n, np.int64)
    blanks = np.empty(n, np.int64)
    k = n_blank = line = start = 0
    for i in range(data.shape[0]):
        if data[i] != 10:
            continue
        stop = i
        while stop > start and data[stop - 1] == 13:
            stop -= 1
        blank = True
        for j in range(start, stop):
            b = data[j]
            if not (b == 32 or 9 <= b <= 13):  # (what bytes.strip() strips)
                blank = False
                break
        if blank:
            blanks[n_blank] = k
            n_blank += 1
        else:
            index[k], starts[k], stops[k] = line, start, stop
            k += 1
        line += 1
        start = i + 1
    return index[:k], starts[:k], stops[:k], blanks[:n_blank]


def _line_chunks(fmt, spec, path, data, first_number, chunk_size):
    """(block, dead letters) for each chunk of a buffer's lines through ``_parse_lines``; each
    block counts the blank lines before its chunk's last line (the last block also those after
    it), and a buffer of blank lines alone gives one empty block that counts them."""
    index, starts, stops, blanks = _lines(np.frombuffer(data, np.uint8))
    numbers = index + first_number
    n_chunks = max(1, -(-len(index) // chunk_size))
    blank_lines = np.bincount(np.minimum(blanks // chunk_size, n_chunks - 1), minlength=n_chunks)
    for k in range(n_chunks):
        chunk = slice(k * chunk_size, (k + 1) * chunk_size)
        block, dead = (_parse_lines(fmt, spec, path, data, starts[chunk], stops[chunk],
                                    numbers[chunk])
                       if len(index) else (empty_block(spec, path), []))
        block.blank_lines = int(blank_lines[k])
        yield block, dead


def _parse_lines(fmt, spec, source, data, starts, stops, positions):
    """(block, dead letters) of the lines ``data[starts[r]:stops[r]]`` at ``positions``: read by
    the compiled reader where the format has one and it reads them all, else by the format's
    parser (a line at a time, or Arrow's for CSV and JSON)."""
    line_by_line = FORMATS[fmt].line_by_line
    if line_by_line:
        block = read_block(fmt, spec, source, data, starts, stops, positions)
        if block is not None:
            return block, []
    items = [(p, data[a:b]) for p, a, b in zip(positions.tolist(), starts.tolist(),
                                                stops.tolist())]
    return (line_by_line or FORMATS[fmt].parse)(spec, source, items)


def _whole_buffer_csv(spec, data):
    """The buffer's lines parsed whole by Arrow, or None: only when no field is quoted (which
    may hold a newline) or starts with a BOM (which Arrow skips), and Arrow gives one row per
    line (it refuses blank lines, and takes a lone '\\r' for a line break)."""
    if b'"' in data or data.startswith(BOM):
        return None
    table = csv_table(spec, data)
    if table is None or (b"\r" in data and table.num_rows != count_byte(data, ord("\n"))):
        return None
    return table


def _first_line(f, data):
    """(the first line that is not blank, as read (or b""), all bytes read) from f after
    ``data`` (bytes read from f already)."""
    while True:
        for line in data.split(b"\n")[:-1]:
            if line.strip():
                return line, data
        more = f.readline()
        if not more:
            last = data.rsplit(b"\n", 1)[-1]
            return (last if last.strip() else b""), data
        data += more


def _csv_header(f, path, spec):
    """(spec with the file's column names, bytes read from f that hold data, line number of
    the first data line). The names are the header line's, or with spec.header false those in
    spec.columns, else the column numbers 0, 1, ... of the first line. A UTF-8 BOM starting
    the file is skipped."""
    if spec.header:
        line = f.readline()
        header = line.decode("utf-8", errors="replace").rstrip("\r\n").removeprefix("\ufeff")
        if not header.strip():
            raise ValueError(f"{path}: CSV file has no header line (for a file without one, "
                             "pass --no-header, and --columns to name its columns)")
        names = [c.strip() for c in csv_fields(header, spec.delimiter)]
        if spec.columns is None:
            check_column_names(names, f"{path}: the header")
        else:
            if len(spec.columns) != len(names):
                raise ValueError(f"{path}: --columns names {len(spec.columns)} columns, the "
                                 f"header line {len(names)}")
            names = list(spec.columns)
        rest, number = b"", 2
    else:
        rest, number = f.read(len(BOM)), 1
        if rest == BOM:
            rest = b""
        names = spec.columns
        if names is None:
            line, rest = _first_line(f, rest)
            n = len(csv_fields(line.decode("utf-8", errors="replace").rstrip("\r"),
                                spec.delimiter)) if line else 0
            names = [str(i) for i in range(n)]
    spec = replace(spec, columns=list(names))
    where = "header" if spec.header else "columns"
    if spec.header_needs_label and spec.label not in spec.columns:
        raise ValueError(f"{path}: label column {spec.label!r} not in {where} {spec.columns}")
    missing = [c for c in spec.ignore if c not in spec.columns]
    if missing:
        raise ValueError(f"{path}: --ignore-columns {','.join(missing)} not in {where} "
                         f"{spec.columns}")
    dropped = [c for c in (spec.label, spec.id, spec.model_key, spec.weight, spec.time)
               if c and c in spec.ignore]
    if dropped:
        raise ValueError(f"--ignore-columns drops {', '.join(dropped)}, which is the label, id, "
                         "model key, weight or time column")
    return spec, rest, number


def csv_columns(path: str, spec: RecordSpec) -> list[str]:
    """The columns a CSV file's records have (its header's, or ``--columns``), as its reader
    takes them, with its checks."""
    with open_input(path) as f:
        return _csv_header(f, path, spec)[0].columns


def parquet_schema(path: str) -> pa.Schema:
    """The Arrow schema of a Parquet file's records (read from its footer only)."""
    with open_read(path) if scheme(path) else nullcontext(path) as f:
        return pq.ParquetFile(f).schema_arrow


def record_columns(path: str, fmt: str, spec: RecordSpec
                   ) -> Optional[dict[str, Optional[pa.DataType]]]:
    """{column: its Arrow type, or None when the format does not say} of the records of a
    file, as its reader takes them; None for a format whose records each name their own fields
    (JSON lines) or have none (libsvm, VW)."""
    if fmt == "csv":
        return dict.fromkeys(csv_columns(path, spec))
    if fmt == "parquet":
        return {f.name: f.type for f in parquet_schema(path)}
    return None


def read_file(path: str, fmt: str, spec: RecordSpec, chunk_size: int = 8192,
              buffer_bytes: int = 8 << 20) -> Iterator[tuple[ExampleBlock, list[DeadLetter]]]:
    """Yield (ExampleBlock, dead letters) for consecutive chunks of a file, in order.

    Text is read in buffers of whole lines. A CSV buffer without quotes or blank lines is parsed
    whole by Arrow; any other buffer, or one Arrow refuses, goes line by line through the
    format's parser, which sends each bad record to the dead letters with its bytes as read.
    Blank lines are skipped, counted in ``blank_lines`` of the block of their chunk, and logged
    per file. The next buffer is parsed on another thread while this one's blocks are handed on.
    """
    if fmt == "parquet":
        first = 0
        # a local file through Arrow's own file, not a Python file object (see
        # records.arrow_buffer); other file systems' files only come as those
        with open_read(path) if scheme(path) else nullcontext(path) as f:
            parquet = pq.ParquetFile(f)
            check_column_names(parquet.schema_arrow.names, f"{path}: the schema",
                               "each column needs a name of its own")
            for batch in parquet.iter_batches(batch_size=chunk_size):
                table = pa.Table.from_batches([batch])
                yield parse_table(spec, path, table, first)
                first += table.num_rows
        return
    blank_lines = 0
    with open_input(path) as f:
        number, rest = 1, b""  # line number of the buffer's first line
        if fmt == "csv":
            spec, rest, number = _csv_header(f, path, spec)
        jobs = (partial(_buffer_blocks, fmt, spec, path, data, first, chunk_size)
                for data, first in _numbered(_buffers(f, buffer_bytes, rest), number))
        for blocks in _ahead(jobs):
            for block, dead in blocks:
                blank_lines += block.blank_lines
                yield block, dead
    if blank_lines:
        log.info("%s: skipped %d blank lines", path, blank_lines)


def _numbered(buffers, number):
    """(buffer, line number of its first line) of consecutive buffers of whole lines."""
    for data in buffers:
        yield data, number
        number += count_byte(data, ord("\n"))


def _buffer_blocks(fmt, spec, path, data, number, chunk_size):
    """[(block, dead letters)] of a buffer's chunks: a CSV buffer without quotes or blank lines
    parsed whole by Arrow, any other through ``_line_chunks``."""
    table = _whole_buffer_csv(spec, data) if fmt == "csv" else None
    if table is None:
        return list(_line_chunks(fmt, spec, path, data, number, chunk_size))
    return [(block_from_table(spec, path, table.slice(a, chunk_size),
                              np.arange(number + a, number + min(a + chunk_size, table.num_rows)),
                              TextLines(data, a)), [])
            for a in range(0, table.num_rows, chunk_size)]


def _ahead(jobs):
    """Each job's result, in order, the next job running on a thread of its own while this
    result is consumed: parsing a buffer (compiled code that lets go of the GIL, and Arrow's)
    overlaps with what is done with the blocks of the one before."""
    with ThreadPoolExecutor(1, thread_name_prefix="unitless-read-ahead") as pool:
        pending = None
        for job in jobs:
            running = pool.submit(job)
            if pending is not None:
                yield pending.result()
            pending = running
        if pending is not None:
            yield pending.result()


def write_table(directory: str, table: pa.Table, fmt: str) -> str:
    """Write one part file whole or not at all (``storage.atomic_write``); returns its path."""
    makedirs(directory)
    path = join(directory, f"part-{uuid.uuid4().hex}.{fmt}")
    atomic_write(path, table_bytes(table, fmt))
    return path


def table_bytes(table: pa.Table, fmt: str) -> bytes:
    """The table as the bytes of a file in one of the OUTPUT_FORMATS."""
    if fmt not in OUTPUT_FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; choose one of {OUTPUT_FORMATS}")
    return cast(Callable, FORMATS[fmt].write)(table)


def output_parts(directory: str) -> list[str]:
    """The names of the part files (``write_table``'s) in an output directory."""
    return [name for name in list_dir(directory)[0]
            if name.startswith("part-") and name.rsplit(".", 1)[-1] in OUTPUT_FORMATS]


def read_output(directory: str) -> Optional[pa.Table]:
    """All part files of an output directory as one Arrow table (for tests and users)."""
    tables = []
    for name in output_parts(directory):
        table = cast(Callable, FORMATS[name.rsplit(".", 1)[-1]].read)(
            read_bytes(join(directory, name)))
        if table is not None:
            tables.append(table)
    return pa.concat_tables(tables, promote_options="permissive") if tables else None
