"""CSV: a chunk of lines parsed whole by Arrow's CSV reader where its rows are surely its lines,
else line by line."""
import csv
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from .records import DeadLetter, ExampleBlock, arrow_buffer
from .rows import BOM, Builder, count_byte, joined_lines, mapping_record, or_none, parse_each
from .spec import BadRecord, RecordSpec
from .tables import block_from_table, labels_fit, times_fit


def parse_csv(spec: RecordSpec, source: str, items: Sequence[tuple[int, bytes | str | None]]
              ) -> tuple[ExampleBlock, list[DeadLetter]]:
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
    b = Builder(spec, source)
    n_columns = len(spec.columns)

    def one(line):
        fields = [f.strip() for f in csv_fields(line, spec.delimiter)]
        if len(fields) != n_columns:
            raise BadRecord(f"expected {n_columns} fields, got {len(fields)}")
        return mapping_record(b, spec, dict(zip(spec.columns, fields)), strings_are_numbers=True)

    parse_each(b, items, one)
    return b.block(), b.dead


def _csv_lines_table(spec, lines):
    """csv_table of the lines joined, when Arrow's row i is surely line i (no line holds a line
    break or a carriage return, which Arrow takes for one, and no BOM that Arrow would skip)."""
    joined = joined_lines(lines) if lines else None
    if joined is None:
        return None
    data, lines = joined
    if b"\r" in data or data.startswith(BOM) or count_byte(data, ord("\n")) != len(lines) - 1:
        return None
    table = csv_table(spec, data)
    return table if table is not None and table.num_rows == len(lines) else None


def csv_fields(line: str, delimiter: str) -> list[str]:
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


def csv_table(spec: RecordSpec, data: bytes) -> Optional[pa.Table]:
    """Data lines (bytes, no header) parsed whole by Arrow's CSV reader into the numeric table
    ``block_from_table`` takes, one row per line; None when any record (a blank line too) needs
    the careful per-line path, or Arrow fails in any way."""
    if spec.categorical:
        return None
    return or_none(_read_csv, spec, data)


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
    if spec.label in spec.columns and not labels_fit(spec, table.column(spec.label)):
        return None
    if spec.weight and table.column(spec.weight).null_count:
        return None
    if spec.time and not times_fit(spec, table):
        return None
    return spec.mapped_label_column(table)
