"""One checkpoint file: a model's Arrow table as an Arrow IPC file, sealed with its model key
and a SHA-256 checksum of its columns and metadata (``checksum`` in its metadata), and read back
verified. A checkpoint is valid when it is a readable Arrow file whose checksum matches and
whose model ``from_arrow`` accepts (which refuses NaN or infinite state). Within ``read_once``
(a run's start, when several readers read the same checkpoints) each file is read and verified
once."""
import contextvars
import hashlib
import json
from contextlib import contextmanager
from typing import (Any, Callable, Dict, Hashable, Iterable, Iterator, List, Optional, Sequence,
                    Tuple, TypeVar, cast)

import numpy as np
import pyarrow as pa

from ..connectors.storage import read_bytes, read_start
from ..learner import LearnerState, from_arrow, read_metadata
from ..learner.arrow_form import TableRows
from ..learner.state import METADATA_KEY
from ..parse.records import arrow_buffer

CHECKSUM_FIELD = "checksum"
T = TypeVar("T")


def table_to_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def table_from_bytes(data: bytes) -> pa.Table:
    return pa.ipc.open_file(arrow_buffer(data)).read_all()


# --- checksums ---------------------------------------------------------------------------------

def checksum(table: pa.Table) -> str:
    """"sha256:<hex>" over the table's row count, each column's name, type and values, and the
    canonical JSON (sorted keys) of its metadata without the checksum field. Values are hashed
    in a form independent of chunking and buffer layout: numbers as little-endian bytes, strings
    as their lengths then their bytes, nulls as a bit mask, fixed-size lists flattened."""
    meta = read_metadata(table)
    if not isinstance(meta, dict):
        raise ValueError("its metadata is not a JSON object")
    return RowChecksums(table).of(meta, 0, table.num_rows)


class RowChecksums:
    """``checksum``s of row ranges of one table (several models' rows: a part's, or what
    ``seal_many`` seals), its columns converted once for them all: converting a model at a
    time, pyarrow's per-column calls cost more than the hashing."""

    def __init__(self, table: pa.Table) -> None:
        self.columns = _columns(table)

    def of(self, meta: Dict[str, Any], first: int, count: int) -> str:
        """The checksum of rows ``first`` to ``first + count`` with metadata ``meta``."""
        return _digest(self.columns, _canonical(meta), first, count)

    def check(self, meta: Any, first: int, count: int) -> None:
        """ValueError (the reason, one line) unless ``meta`` is a JSON object holding the
        checksum of rows ``first`` to ``first + count`` with it."""
        if not isinstance(meta, dict):
            raise ValueError("its metadata is not a JSON object")
        stored = meta.get(CHECKSUM_FIELD)
        if stored is None:
            raise ValueError("it has no checksum")
        if stored != self.of(meta, first, count):
            raise ValueError("its checksum does not match its contents (the file is damaged)")


def _canonical(meta):
    """The metadata without its checksum field as the checksum reads it: JSON, keys sorted."""
    return json.dumps({k: v for k, v in meta.items() if k != CHECKSUM_FIELD}, sort_keys=True,
                      separators=(",", ":"))


def _hasher(canonical, rows):
    """The hash of a checksum, fed its metadata's canonical JSON and row count."""
    h = hashlib.sha256(b"unitless checkpoint checksum 1\0")
    _hash_part(h, canonical.encode())
    _hash_part(h, rows.to_bytes(8, "little"))
    return h


def _digest(columns, canonical, first, count):
    """``checksum`` of rows ``first`` to ``first + count`` of a table of ``columns``
    (``_columns``) whose metadata's canonical JSON is ``canonical``."""
    h, parts = _hasher(canonical, count), []
    for name, column in columns:
        parts.append(name)
        parts += column.parts(first, first + count)
    h.update(b"".join(parts))  # (the same hash as an update per part, and cheaper)
    return "sha256:" + h.hexdigest()


def _columns(table):
    """[(framed name, _Slices)] of the table's columns, as a checksum hashes them."""
    return _named_columns(zip(table.column_names, table.columns))


def _named_columns(columns):
    """[(framed name, _Slices)] of [(name, array or chunked array)]."""
    return [(b"".join(_framed(name.encode("utf-8", "surrogatepass"))),
             _Slices(column if isinstance(column, pa.Array) else
                     column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()))
            for name, column in columns]


def column_digest(head: Sequence[bytes], rows: int,
                  columns: Sequence[Tuple[str, Any]]) -> str:
    """"sha256:<hex>" over ``head`` (byte strings), the row count and the columns [(name,
    array)] whole, each hashed as ``checksum`` hashes one: a format-2 part's checksum
    (``part_format``)."""
    h = hashlib.sha256(b"unitless part checksum 2\0")
    for data in head:
        _hash_part(h, data)
    _hash_part(h, rows.to_bytes(8, "little"))
    parts = []
    for name, column in _named_columns(columns):
        parts.append(name)
        parts += column.parts(0, len(column.array))
    h.update(b"".join(parts))
    return "sha256:" + h.hexdigest()


def _hash_part(h, data):
    h.update(b"".join(_framed(data)))


_EIGHT = (8).to_bytes(8, "little")


def _framed(data):
    """A part of a checksum's input: its length (8 bytes, little-endian), then itself."""
    return [len(data).to_bytes(8, "little"), data]


def seal(table: pa.Table, key: str) -> pa.Table:
    """The table with its model key and checksum in its metadata, as write_checkpoint writes
    it. A table already naming another model key is refused (ValueError)."""
    (_, _, _, stored), = seal_many([(key, TableRows.whole(table), read_metadata(table))])
    return table.replace_schema_metadata({**(table.schema.metadata or {}),
                                          METADATA_KEY: stored})


def keyed_metadata(key: str, meta: Dict[str, Any]) -> Dict[str, Any]:
    """A model's metadata as a checkpoint of model ``key`` holds it before it is sealed: its
    model key set, no checksum (``meta`` itself when it is so already); ValueError when it
    names another model key."""
    if meta.get("model_key", key) != key:
        raise ValueError(f"a checkpoint of model {meta['model_key']!r} cannot be written "
                         f"as model {key!r}")
    if CHECKSUM_FIELD in meta or "model_key" not in meta:  # (one read back; a table's)
        meta = {**{k: v for k, v in meta.items() if k != CHECKSUM_FIELD}, "model_key": key}
    return meta


def seal_many(models: Iterable[Tuple[str, TableRows, Dict[str, Any]]]
              ) -> List[Tuple[str, TableRows, Dict[str, Any], bytes]]:
    """[(model key, TableRows, metadata)] -> [(model key, TableRows, sealed metadata, as
    stored)]: each model's metadata (a dict, whatever the table's schema holds) given its
    model key and the checksum ``seal`` gives its rows, and the JSON a sealed table's schema
    holds of it (bytes). Each table's columns are converted once for all the models whose
    rows it holds (``RowChecksums``)."""
    checksums: Dict[int, RowChecksums] = {}  # id(table) -> (its models' tables are held)
    sealed = []
    for key, rows, meta in models:
        meta = dict(keyed_metadata(key, meta))  # (a copy: it is given its checksum)
        found = checksums.get(id(rows.table))
        if found is None:
            found = checksums[id(rows.table)] = RowChecksums(rows.table)
        canonical = _canonical(meta)
        digest = _digest(found.columns, canonical, rows.first, rows.count)
        # stored as it is hashed, the checksum added before its closing brace (never "{}": it
        # holds the model key)
        meta[CHECKSUM_FIELD] = digest
        sealed.append((key, rows, meta,
                       f'{canonical[:-1]},"{CHECKSUM_FIELD}":"{digest}"}}'.encode()))
    return sealed


def bare_table(table: pa.Table) -> pa.Table:
    """The table without schema metadata (itself, when it has none)."""
    return table if table.schema.metadata is None else table.replace_schema_metadata(None)


class _Slices:
    """A column as the checksum hashes it, converted once, then hashed slice by slice (rows
    ``first`` to ``end``): its type, length and null mask, then its values in a form independent
    of chunking and buffer layout (see ``checksum``)."""

    def __init__(self, array):
        kind = array.type
        self.array, self.kind = array, str(kind).encode()
        self.kind_part = b"".join(_framed(self.kind))
        self.heads = {}  # rows -> what ``parts`` feeds before the values, without nulls
        self.nulls = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
        self.values = self.lengths = self.child = None
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
            values = array.fill_null(False if pa.types.is_boolean(kind) else 0) \
                if array.null_count else array
            values = values.to_numpy(zero_copy_only=False)
            self.values = values.astype(values.dtype.newbyteorder("<"), copy=False)
        elif (pa.types.is_string(kind) or pa.types.is_large_string(kind)
              or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            # nulls hashed as empty values (their lengths 0)
            if array.null_count == len(array):  # (none or all null: no buffers to read)
                self.offsets, self.data = np.zeros(len(array) + 1, "<i8"), memoryview(b"")
            else:
                filled = array.cast(pa.large_binary()).fill_null(b"")
                self.offsets = np.frombuffer(filled.buffers()[1], dtype="<i8")[
                    filled.offset:filled.offset + len(filled) + 1]
                data = filled.buffers()[2]
                self.data = memoryview(b"" if data is None else data)
            self.lengths = np.diff(self.offsets).astype("<i8")
        elif pa.types.is_fixed_size_list(kind):
            # flattened: without null lists, rows first..end are values first..end times the size
            self.size = kind.list_size
            self.child = None if array.null_count else _Slices(array.flatten())
        else:
            raise ValueError(f"it has a column of type {kind}, which no checkpoint holds")

    def parts(self, first, end):
        """What a checksum hashes of rows ``first`` to ``end``, as a list of byte strings."""
        rows = end - first
        head = self.heads.get(rows) if self.nulls is None else None
        if head is None:
            nulls = (np.packbits(self.nulls[first:end], bitorder="little").tobytes()
                     if self.nulls is not None else bytes((rows + 7) // 8))
            head = b"".join([self.kind_part, _EIGHT, rows.to_bytes(8, "little"),
                             len(nulls).to_bytes(8, "little"), nulls])
            if self.nulls is None:
                self.heads[rows] = head
        out = [head]
        if self.values is not None:
            return out + _framed(self.values[first:end].tobytes())
        if self.lengths is not None:
            return (out + _framed(self.lengths[first:end].tobytes())
                    + _framed(self.data[self.offsets[first]:self.offsets[end]]))
        if self.child is not None:
            return out + self.child.parts(first * self.size, end * self.size)
        flat = _Slices(self.array.slice(first, end - first).flatten())
        return out + flat.parts(0, len(flat.array))


def check_table(table: pa.Table, decode: bool = True) -> Optional[LearnerState]:
    """Raise ValueError (the reason, one line) unless the table is a valid checkpoint: its
    checksum present and matching, and, when ``decode``, its model accepted by ``from_arrow``;
    returns that model (a LearnerState), or None when not ``decode``."""
    RowChecksums(table).check(read_metadata(table), 0, table.num_rows)
    return from_arrow(table) if decode else None


# --- reading -----------------------------------------------------------------------------------

class _ReadOnce:
    """What ``read_once`` keeps: valid tables by path, each with the learner state checking it
    decoded until a reader takes that (``bytes_left``: how many more bytes of them it may
    keep), what the per-key layout's readers keep (``listings``: a key directory's checkpoint
    files; ``candidates``: what its `latest` holds), and what other readers read once
    (``memo``: by kind, then by what they read, see ``once_per_run``)."""

    def __init__(self, limit):
        self.tables, self.bytes_left, self.listings, self.candidates = {}, limit, {}, {}
        self.memo = {}


# the _ReadOnce of the ``read_once`` active in this thread (a context variable: a runner's
# threads, which start with contexts of their own, never see it; and Beam's type inference,
# which walks the dicts and lists that a DoFn's code reaches through globals, sees one object)
_once: contextvars.ContextVar[Optional[_ReadOnce]] = contextvars.ContextVar(
    "unitless_read_once", default=None)


@contextmanager
def read_once(limit: int = 256 << 20) -> Iterator[None]:
    """Within it, each checkpoint file is read and verified once: the valid ones are kept for
    the next reader, up to ``limit`` bytes of tables (past that, read again), each with the
    learner state its check decoded until one reader takes that; so is the list of a model
    directory's keys (``checkpoint_metadata``) and of a key's checkpoint files. A run's start
    reads every model key's latest checkpoint for several things: to check the models'
    settings, where to restart its sources, and which start records it needs (a pass over
    many keys is seconds). Nothing may write checkpoints meanwhile (nothing does before a run
    starts). Nested, the outer one holds."""
    if _once.get() is not None:
        yield
        return
    token = _once.set(_ReadOnce(limit))
    try:
        yield
    finally:
        _once.reset(token)


def read_valid(path: str, take_state: bool = True,
               keep_state: bool = False) -> Tuple[pa.Table, Optional[LearnerState]]:
    """(table, its LearnerState) of the checkpoint file at path: the state as checking the
    file built it, None when not ``take_state`` or when another reader took it already;
    ValueError (the reason) unless it is valid; FileNotFoundError if there is no such file.
    Within ``read_once`` the table is kept, and, with ``keep_state`` (a key's newest
    checkpoint, whose model a later reader decodes), the state too while it fits, for the first
    reader that takes one: a state is never handed to two readers."""
    once = _once.get()
    if once is not None and path in once.tables:
        table, state = once.tables[path]
        if take_state and state is not None:
            once.tables[path] = table, None
            once.bytes_left += state.nbytes
        return table, state if take_state else None
    table, state = _read_and_verify(path)
    if once is not None and table.nbytes <= once.bytes_left:
        once.bytes_left -= table.nbytes
        kept = None
        if keep_state and not take_state and state.nbytes <= once.bytes_left:
            kept = state
            once.bytes_left -= state.nbytes
        once.tables[path] = table, kept
    return table, state if take_state else None


def _read_and_verify(path):
    try:
        data = read_bytes(path)  # whole, not mapped: a file changed later cannot change
        table = table_from_bytes(data)  # (or, truncated, crash) a table already read
        table.validate(full=True)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, pa.ArrowException) as err:
        raise ValueError(f"it is not a readable Arrow file ({one_line(err)})") from None
    try:
        return table, check_table(table)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, MemoryError,
            pa.ArrowException) as err:
        raise ValueError(one_line(err) if isinstance(err, ValueError)
                         else f"{type(err).__name__}: {one_line(err)}") from None


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def read_schema(path: str) -> pa.Schema:
    """The Arrow schema at the start of an Arrow IPC file (magic, padding, then the schema
    message), read from the bytes it takes, in Arrow's own memory: not the whole file, and not
    through a Python file object (Arrow reads those on its I/O threads, and a process exiting
    right after can then abort; see ``records.arrow_buffer``)."""
    head = read_start(path, 1 << 16) or b""
    if head[:6] != b"ARROW1":
        raise ValueError("not an Arrow IPC file")
    end = 16 + int.from_bytes(head[12:16], "little")  # the schema message's flatbuffer length
    if end > len(head):
        head = cast(bytes, read_start(path, end))
    message = pa.ipc.read_message(pa.BufferReader(arrow_buffer(head[8:end])))
    return pa.ipc.read_schema(message)


def once_per_run(kind: str, key: Hashable, read: Callable[[], T]) -> T:
    """``read()``, called once per ``key`` of a ``kind`` within ``read_once`` (its result kept
    and handed to every later caller), every time outside it."""
    once = _once.get()
    if once is None:
        return read()
    memo = once.memo.setdefault(kind, {})
    if key not in memo:
        memo[key] = read()
    return memo[key]


def kept_reads() -> Optional[_ReadOnce]:
    """The ``read_once`` in force in this thread (what it keeps), or None."""
    return _once.get()
