"""What a run reads: its inputs (files, each once, and their format; or one topic) and what it
reads of each record (``record_spec``: the reading options as a ``RecordSpec``)."""
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ..connectors.kafka import is_kafka
from ..connectors.storage import resolve
from ..connectors.files import expand_inputs
from ..parse.formats import EXTENSIONS, FORMATS, VALUE_FORMATS
from ..parse.spec import LabelMap, RecordSpec, check_column_names
from .options import TIME_UNITS, defaults

DELIMITER_NAMES = {"\\t": "\t", "tab": "\t", "\\s": " ", "space": " "}


def names(value: Union[str, Iterable[Any], None]) -> Tuple[str, ...]:
    """Column names given as 'a,b,c' or as a list: a tuple without blanks."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    return tuple(str(c).strip() for c in items if str(c).strip())


def classes(value: Union[int, str, Iterable[Any]]) -> Tuple[int, Tuple[str, ...]]:
    """classes: (number of classes, their names or ()): a count K (int or text), or names
    ('setosa,versicolor,virginica' or a list of them)."""
    if isinstance(value, bool):
        raise ValueError(f"classes wants a number of classes or their names, not {value!r}")
    if isinstance(value, int):
        count = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
        count = int(value)
    else:
        labels = tuple(c.strip() for c in (value.split(",") if isinstance(value, str)
                                           else map(str, value)))
        if len(labels) < 2 or not all(labels):
            raise ValueError(f"--classes wants a number of classes or two or more "
                             f"comma-separated names, got {value!r}")
        return len(labels), labels
    if count < 1:
        raise ValueError(f"--classes wants a positive number of classes, got {count}")
    return count, ()


def record_spec(options: Mapping[str, Any], scoring: bool = False) -> RecordSpec:
    """The RecordSpec of the reading options (READ_OPTIONS names), checked (their choices and
    bounds in the option table by ``configure``, ``options.check_values``). A record without a
    label is an example to serve (or, ``scoring``, to score); a sharded model refuses it (it
    serves nothing yet)."""
    o = {**defaults("read"), **options}
    delimiter = DELIMITER_NAMES.get(o["delimiter"], o["delimiter"])
    if not delimiter:
        raise ValueError("--delimiter cannot be empty")
    columns = list(names(o["columns"])) if o["columns"] is not None else None
    if columns is not None:
        check_column_names(columns, "--columns", "give each column a name of its own")
    roles = [(flag, o[name]) for flag, name in (
        ("--label-column", "label_column"), ("--id-column", "id_column"),
        ("--model-key-column", "model_key_column"), ("--weight-column", "weight_column"),
        ("--time-column", "time_column"))
        if o[name] is not None]
    for i, (flag, column) in enumerate(roles):
        if not str(column).strip():
            raise ValueError(f"{flag} names no column")
        for other, same in roles[:i]:
            if same == column:
                raise ValueError(f"{other} and {flag} both name column {column!r}: a column "
                                 "has one role")
    if not 1 <= int(o["bits"]) <= 32:
        raise ValueError(f"--bits wants 1..32, got {o['bits']}")
    positive = o["positive_label"]
    return RecordSpec(label=o["label_column"], id=o["id_column"], model_key=o["model_key_column"],
                      weight=o["weight_column"], time=o["time_column"],
                      time_unit=TIME_UNITS[o["time_unit"]], bits=int(o["bits"]),
                      bias=not o["no_bias"],
                      categorical=names(o["categorical_columns"]), delimiter=delimiter,
                      require_label=not scoring and int(o.get("shards") or 0) > 0,
                      header_needs_label=not scoring and not o.get("labels"), columns=columns,
                      header=not o["no_header"],
                      ignore=names(o["ignore_columns"]),
                      labels=LabelMap(None if positive is None else str(positive),
                                      classes(o["classes"])[1]))


def resolve_inputs(inputs: Union[str, Sequence[str]], fmt: Optional[str] = None
                   ) -> Tuple[List[str], str]:
    """(inputs, format): a kafka:// URL as is (format default jsonl), or the files that paths
    and globs name, each by its canonical name once (the same file spelled differently, or
    named twice, is one source, read once), with the format (one of ``FORMATS``, as
    ``configure`` checked) taken from their extensions when not given."""
    if isinstance(inputs, str):
        inputs = [inputs]
    if not inputs:
        raise ValueError("no input given")
    if is_kafka(inputs[0]):
        if len(inputs) > 1:
            raise ValueError("read one Kafka topic per run, or files, not both")
        if fmt is not None and fmt not in VALUE_FORMATS:
            raise ValueError(f"Kafka messages cannot be {fmt}; choose one of: "
                             f"{', '.join(VALUE_FORMATS)}")
        return list(inputs), fmt or "jsonl"
    files = list(dict.fromkeys(resolve(f) for f in expand_inputs(inputs)))  # (each once)
    if fmt is None:
        formats: Dict[str, str] = {}
        for path in files:
            name = path[:-3] if path.endswith(".gz") else path
            found = EXTENSIONS.get(os.path.splitext(name)[1].lower())
            if found is None:
                raise ValueError(f"cannot tell the format of {path} from its extension; pass "
                                 f"--format ({', '.join(FORMATS)})")
            formats.setdefault(found, path)
        if len(formats) > 1:
            raise ValueError("the inputs are of different formats (" + ", ".join(
                f"{path}: {found}" for found, path in formats.items()) + "); read one format "
                "per run")
        fmt = next(iter(formats))
    return files, fmt
