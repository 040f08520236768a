"""A group's part file, format 2 (docs/compatibility.md, "The group layout, file by file"):
the models' metadata as a table with a column per field, the settings every model shares
written once, and one checksum for the whole part; format 1 wrote each model's metadata as
JSON sealed with a checksum of its own, which cost more than the rest of a checkpoint when a
group holds thousands of models (docs/many-models.md, §7). Encoding, decoding and checking;
the body (each model's rows) is built by ``group_writer`` and is the same in both formats.
"""
import base64
import itertools
import json
import operator
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import pyarrow as pa

from .checkpoint_file import CHECKSUM_FIELD, column_digest

PART_KEY = b"unitless_group"  # the part's header: group, seq, format, shared settings, checksum
MODELS_KEY = b"unitless_models"  # the models table, an Arrow IPC stream, base64
PART_FORMAT = 2
MODEL_KEY = "model_key"

# what a run's models share (the learner's settings: ``config.check_resume`` requires them
# equal), written once per part when every model of it holds the same
SHARED = ("schema_version", "algorithm", "loss", "hyperparameters", "dim", "n_classes",
          "bias_index")
_POSITIONS = pa.map_(pa.string(), pa.int64())
# the fields written as a column when every model of the part holds one of the type named
# (its Arrow type, and the Python values it takes back exactly); any other field of a model
# goes to its ``extra`` column, as JSON
COLUMNS: Dict[str, Tuple[pa.DataType, str]] = {
    MODEL_KEY: (pa.string(), "str"),
    "examples_seen": (pa.int64(), "int"),
    "cumulative_loss": (pa.float64(), "float"),
    "progressive_loss": (pa.float64(), "float"),
    "scalars": (pa.map_(pa.string(), pa.list_(pa.float64())), "scalars"),
    "input_positions": (_POSITIONS, "positions"),
    "checkpoint_examples": (pa.int64(), "int"),
    "checkpoint_id": (pa.string(), "str or None"),
    "examples_served": (pa.int64(), "int"),
    "time": (pa.float64(), "float"),
    "errors": (pa.float64(), "float"),
    "unlearned_sources": (_POSITIONS, "positions"),
    "learned_through": (_POSITIONS, "positions"),
    "restart_positions": (_POSITIONS, "positions"),
    "watermark_passed": (pa.list_(pa.string()), "strings"),
}
_MAPS = {name for name, (kind, _) in COLUMNS.items() if pa.types.is_map(kind)}


def _types(values):
    return set(map(type, values))


def _nested(values):
    return itertools.chain.from_iterable(values)


# kind -> whether a column's values (each model's) are ones it gives back exactly: by the set
# of their Python types (pyarrow would take an int for a float, a float for an int, bytes for
# a string; a value past int64 it refuses)
_TAKES = {
    "str": lambda vs: _types(vs) <= {str},
    "str or None": lambda vs: _types(vs) <= {str, type(None)},
    "int": lambda vs: _types(vs) <= {int},
    "float": lambda vs: _types(vs) <= {float},
    "positions": lambda vs: (_types(vs) <= {dict} and _types(_nested(vs)) <= {str}
                             and _types(_nested(map(dict.values, vs))) <= {int}),
    "scalars": lambda vs: (_types(vs) <= {dict} and _types(_nested(vs)) <= {str}
                           and _types(lists := list(_nested(map(dict.values, vs)))) <= {list}
                           and _types(_nested(lists)) <= {float}),
    "strings": lambda vs: _types(vs) <= {list} and _types(_nested(vs)) <= {str},
}
_MISSING = object()


def encode(group: str, seq: int, metas: Sequence[Dict[str, Any]], counts: np.ndarray,
           body: pa.Table) -> Tuple[Dict[bytes, bytes], str]:
    """(the part's schema metadata, its checksum) for models of metadata ``metas`` (dicts,
    their model keys set) whose rows, ``counts`` of them each in their order, are ``body``
    (the model key column first)."""
    shared, columns, extra = _split(metas)
    first_rows = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    table = pa.table({"first_row": first_rows, "rows": np.asarray(counts, np.int64),
                      **columns,
                      "extra": pa.array(extra, pa.string())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    models = base64.b64encode(sink.getvalue().to_pybytes())
    header = {"group": group, "seq": seq, "part_format": PART_FORMAT, "shared": shared}
    digest = _digest(header, models, body)
    header[CHECKSUM_FIELD] = digest
    return {PART_KEY: json.dumps(header, separators=(",", ":")).encode(),
            MODELS_KEY: models}, digest


def _split(metas):
    """(shared fields, {column: values}, [each model's other fields as JSON, or None])."""
    first = metas[0]
    shared = {f: first[f] for f in SHARED
              if f in first and all(_same(m.get(f, _MISSING), first[f]) for m in metas)}
    fields = set().union(*metas) - set(shared)
    columns = {}
    for name, (kind, takes) in COLUMNS.items():
        if name in fields:
            try:
                values = list(map(operator.itemgetter(name), metas))
                if _TAKES[takes](values):
                    columns[name] = pa.array(values, kind)
            except (KeyError, OverflowError, pa.ArrowInvalid, pa.ArrowTypeError):
                pass  # (a model lacks it, or a value does not fit: JSON)
    rest = sorted(fields - set(columns))
    extra = [json.dumps({f: m[f] for f in rest if f in m}, sort_keys=True,
                        separators=(",", ":")) for m in metas] if rest else [None] * len(metas)
    return shared, columns, extra


def _same(a, b):
    """Whether ``a`` reads back as ``b`` does: the same object (a run's models share their
    settings' objects), or the same JSON (1 == 1.0, but not as JSON)."""
    return a is b or (type(a) is type(b) and json.dumps(a, sort_keys=True) == json.dumps(
        b, sort_keys=True))


def _digest(header, models, body):
    """The part's checksum: its header (without the checksum, canonical JSON), its models
    table as stored, and its body's columns (the model key as its indices and dictionary)."""
    canonical = json.dumps({k: v for k, v in header.items() if k != CHECKSUM_FIELD},
                           sort_keys=True, separators=(",", ":")).encode()
    keys = body.column(MODEL_KEY).combine_chunks()
    # (a body without rows is stored as no record batch, so without its dictionary: hashed so)
    dictionary = keys.dictionary if len(keys) else pa.array([], pa.string())
    columns = [(MODEL_KEY, keys.indices), (MODEL_KEY + " dictionary", dictionary)]
    columns += [(name, body.column(name)) for name in body.column_names if name != MODEL_KEY]
    return column_digest([canonical, models], body.num_rows, columns)


def decode(header: Dict[str, Any], metadata: Dict[bytes, bytes]
           ) -> List[Tuple[int, int, Dict[str, Any]]]:
    """[(first row, rows, metadata)] of a format-2 part's models (its schema's ``metadata``,
    ``header`` its PART_KEY read), each metadata as a format-1 part holds it, its checksum the
    part's and its index (unverified: ``verify``)."""
    table = pa.ipc.open_stream(base64.b64decode(metadata[MODELS_KEY], validate=True)).read_all()
    shared, digest = header["shared"], header[CHECKSUM_FIELD]
    if not isinstance(shared, dict) or not isinstance(digest, str):
        raise ValueError("its header is not a part's")
    columns = table.to_pydict()
    firsts, counts, extras = columns.pop("first_row"), columns.pop("rows"), columns.pop("extra")
    for name in _MAPS & set(columns):
        columns[name] = [dict(pairs) for pairs in columns[name]]
    names = list(columns)
    found = []
    for index, values in enumerate(zip(*columns.values()) if names else [()] * len(firsts)):
        meta = {**shared, **dict(zip(names, values))}
        if extras[index] is not None:
            meta.update(json.loads(extras[index]))
        meta[CHECKSUM_FIELD] = f"{digest}#{index}"
        found.append((int(firsts[index]), int(counts[index]), meta))
    return found


def verify(table: pa.Table) -> None:
    """ValueError unless a format-2 part's checksum holds (``table`` as read, its schema's
    metadata included)."""
    metadata = table.schema.metadata
    header = json.loads(metadata[PART_KEY])
    if header.get(CHECKSUM_FIELD) != _digest(header, metadata[MODELS_KEY], table):
        raise ValueError("its checksum does not match its contents (the file is damaged)")
