"""Model checkpoints on disk: one Arrow IPC file per checkpoint, written atomically, checked
whenever it is read.

Layout: MODEL_DIR/<key directory>/ckpt-<examples seen, 12 digits>.arrow, the last K kept, and
MODEL_DIR/<key directory>/latest holding the name of the newest file; MODEL_DIR/starts holds
start records of models in Kafka partitions (``write_starts``). MODEL_DIR may be local or
any file system Beam knows (gs://, s3://, hdfs://); files are written whole or not at all
(``storage.atomic_write``: locally to a temporary name, fsynced and renamed; on an object store
as one upload), so a crash never leaves a half-written checkpoint or pointer. `latest` is the
manifest naming a complete file; readers fall back to the files themselves, each checked.

Key directories (``key_dir_name``) are built so that no key, however hostile, can name a path
outside MODEL_DIR, share a directory with another key (also on case-insensitive file systems),
or exceed a file system's name limit: "k-" and the key's UTF-8 bytes with every byte other than
[a-z0-9_-] written as %XX (upper-case hex; so '.', '/', '~', '%' and upper-case letters are
escaped too); when that is longer than 100 characters, "h-", its first 64 characters and the
SHA-256 of the key (64 hex digits). Names are ASCII, at most 131 characters, never '.' or '..'.
The key itself is read back from the checkpoints' metadata (``model_key``), never decoded from
a directory name. This layout replaced the earlier one (the percent-quoted key, '_default' for
the empty key), which is no longer read: models written before it must be retrained or moved.

Every checkpoint holds a SHA-256 checksum of its columns and metadata (``checksum`` in its
metadata). A checkpoint is valid when it is a readable Arrow file whose checksum matches and
whose model ``from_arrow`` accepts (which refuses NaN or infinite state). Readers take the
newest valid checkpoint: the one `latest` names first, then the files newest first; each
invalid one is skipped with a warning naming it and why.
"""
import contextvars
import hashlib
import json
import logging
import re
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..connectors.records import arrow_buffer
from ..connectors.storage import (atomic_write_many, is_dir, join, list_dir, makedirs,
                                  read_bytes, read_start, remove)
from ..learner import from_arrow, read_metadata
from ..learner.state import METADATA_KEY

log = logging.getLogger("unitless")

LATEST = "latest"
CHECKPOINT_NAME = re.compile(r"ckpt-[0-9]{12}\.arrow")
SHORT_PREFIX, HASHED_PREFIX = "k-", "h-"
MAX_ESCAPED = 100   # longer escaped keys get the hashed form
CLIPPED = 64        # escaped characters kept in the hashed form
CHECKSUM_FIELD = "checksum"
_UNESCAPED = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")


def key_dir_name(key):
    """The directory name of a model key (see the module docstring): a one-to-one map from
    keys to ASCII names of [a-z0-9_%A-F-] of at most 131 characters, never '.' or '..'."""
    if not isinstance(key, str):
        raise TypeError(f"a model key is a string, not {type(key).__name__}")
    raw = key.encode("utf-8", "surrogatepass")
    escaped = "".join(chr(b) if b in _UNESCAPED else f"%{b:02X}" for b in raw)
    if len(escaped) <= MAX_ESCAPED:
        return SHORT_PREFIX + escaped
    clipped = escaped[:CLIPPED]
    if "%" in clipped[-2:]:  # do not cut an escape in two
        clipped = clipped[:clipped.rindex("%")]
    return f"{HASHED_PREFIX}{clipped}-{hashlib.sha256(raw).hexdigest()}"


def key_dir(model_dir, key):
    """The directory under model_dir holding the key's checkpoints."""
    return join(model_dir, key_dir_name(key))


def checkpoint_name(examples_seen):
    """ckpt-<examples seen, 12 digits>.arrow; names sort as their example counts do."""
    if isinstance(examples_seen, bool) or not 0 <= examples_seen < 10 ** 12:
        raise ValueError(f"a checkpoint's example count must be in 0..10^12-1, "
                         f"not {examples_seen!r}")
    return f"ckpt-{int(examples_seen):012d}.arrow"


def table_to_bytes(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def table_from_bytes(data):
    return pa.ipc.open_file(arrow_buffer(data)).read_all()


# --- checksums ---------------------------------------------------------------------------------

def checksum(table):
    """"sha256:<hex>" over the table's row count, each column's name, type and values, and the
    canonical JSON (sorted keys) of its metadata without the checksum field. Values are hashed
    in a form independent of chunking and buffer layout: numbers as little-endian bytes, strings
    as their lengths then their bytes, nulls as a bit mask, fixed-size lists flattened."""
    meta = read_metadata(table)
    if not isinstance(meta, dict):
        raise ValueError("its metadata is not a JSON object")
    return _checksum(table, meta)


def _checksum(table, meta):
    """``checksum`` of the table with metadata ``meta`` (a dict)."""
    return _digest(table, _canonical(meta))


def _canonical(meta):
    """The metadata without its checksum field as the checksum reads it: JSON, keys sorted."""
    return json.dumps({k: v for k, v in meta.items() if k != CHECKSUM_FIELD}, sort_keys=True,
                      separators=(",", ":"))


def _digest(table, canonical):
    """``checksum`` of the table whose metadata's canonical JSON is ``canonical``."""
    h = hashlib.sha256(b"unitless checkpoint checksum 1\0")
    _hash_part(h, canonical.encode())
    _hash_part(h, table.num_rows.to_bytes(8, "little"))
    for name, column in zip(table.column_names, table.columns):
        _hash_part(h, name.encode("utf-8", "surrogatepass"))
        _hash_array(h, column.chunk(0) if column.num_chunks == 1 else column.combine_chunks())
    return "sha256:" + h.hexdigest()


def _hash_part(h, data):
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)


def _hash_array(h, array):
    kind = array.type
    _hash_part(h, str(kind).encode())
    _hash_part(h, len(array).to_bytes(8, "little"))
    if array.null_count:
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        _hash_part(h, np.packbits(nulls, bitorder="little").tobytes())
    else:  # (the same bytes, without building the mask)
        _hash_part(h, bytes((len(array) + 7) // 8))
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        values = array.fill_null(False if pa.types.is_boolean(kind) else 0) if array.null_count \
            else array
        values = values.to_numpy(zero_copy_only=False)
        _hash_part(h, values.astype(values.dtype.newbyteorder("<"), copy=False).tobytes())
    elif (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
          or pa.types.is_large_binary(kind)):
        if array.null_count == len(array):  # (what the general form below gives, cheaper)
            _hash_part(h, bytes(8 * len(array)))
            _hash_part(h, b"")
            return
        if array.null_count == 0 and (pa.types.is_string(kind) or pa.types.is_binary(kind)):
            filled, width = array, "<i4"  # (its own 32-bit offsets: the same, without a cast)
        else:
            filled, width = array.cast(pa.large_binary()).fill_null(b""), "<i8"
        offsets = np.frombuffer(filled.buffers()[1], dtype=width)[
            filled.offset:filled.offset + len(filled) + 1]
        _hash_part(h, np.diff(offsets).astype("<i8").tobytes())
        data = filled.buffers()[2]
        _hash_part(h, b"" if data is None else data.to_pybytes()[offsets[0]:offsets[-1]])
    elif pa.types.is_fixed_size_list(kind):
        _hash_array(h, array.flatten())
    else:
        raise ValueError(f"it has a column of type {kind}, which no checkpoint holds")


def seal(table, key):
    """The table with its model key and checksum in its metadata, as write_checkpoint writes
    it. A table already naming another model key is refused (ValueError)."""
    meta = read_metadata(table)
    if meta.get("model_key", key) != key:
        raise ValueError(f"a checkpoint of model {meta['model_key']!r} cannot be written as "
                         f"model {key!r}")
    meta["model_key"] = key
    # stored as it is hashed, the checksum added before its closing brace (never "{}": it
    # holds the model key)
    canonical = _canonical(meta)
    stored = f'{canonical[:-1]},"{CHECKSUM_FIELD}":"{_digest(table, canonical)}"}}'
    schema_metadata = dict(table.schema.metadata or {})
    schema_metadata[METADATA_KEY] = stored.encode()
    return table.replace_schema_metadata(schema_metadata)


def check_table(table):
    """Raise ValueError (the reason, one line) unless the table is a valid checkpoint: its
    checksum present and matching, and its model accepted by ``from_arrow``; returns that
    model (a LearnerState)."""
    meta = read_metadata(table)
    if not isinstance(meta, dict):
        raise ValueError("its metadata is not a JSON object")
    stored = meta.get(CHECKSUM_FIELD)
    if stored is None:
        raise ValueError("it has no checksum")
    if stored != checksum(table):
        raise ValueError("its checksum does not match its contents (the file is damaged)")
    return from_arrow(table)


# --- reading -----------------------------------------------------------------------------------

class _ReadOnce:
    """What ``read_once`` keeps: valid tables by path, each with the learner state checking it
    decoded until a reader takes that (``bytes_left``: how many more bytes of them it may
    keep), ``checkpoint_metadata`` by model directory, and a key directory's checkpoint files
    and what its `latest` holds (``_candidates``)."""

    def __init__(self, limit):
        self.tables, self.bytes_left, self.listings, self.candidates = {}, limit, {}, {}


# the _ReadOnce of the ``read_once`` active in this thread (a context variable: a runner's
# threads, which start with contexts of their own, never see it; and Beam's type inference,
# which walks the dicts and lists that a DoFn's code reaches through globals, sees one object)
_once = contextvars.ContextVar("unitless_read_once", default=None)


@contextmanager
def read_once(limit=256 << 20):
    """Within it, each checkpoint file is read and verified once: the valid ones are kept for
    the next reader, up to ``limit`` bytes of tables (past that, read again), each with the
    learner state its check decoded until one reader takes that; so is the list of a model
    directory's keys (``checkpoint_metadata``) and of a key's checkpoint files. A run's start
    reads every model key's latest checkpoint for several things: to check the models'
    settings, where to restart its sources, and which start records it needs (10,000 keys:
    some 6 s a pass). Nothing may write checkpoints meanwhile (nothing does before a run
    starts). Nested, the outer one holds."""
    if _once.get() is not None:
        yield
        return
    token = _once.set(_ReadOnce(limit))
    try:
        yield
    finally:
        _once.reset(token)


def _read_valid(path, take_state=True, keep_state=False):
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
        raise ValueError(f"it is not a readable Arrow file ({_one_line(err)})") from None
    try:
        return table, check_table(table)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, MemoryError,
            pa.ArrowException) as err:
        raise ValueError(_one_line(err) if isinstance(err, ValueError)
                         else f"{type(err).__name__}: {_one_line(err)}") from None


def _one_line(err):
    return " ".join(str(err).split()) or type(err).__name__


def checkpoint_files(directory):
    """Names of the checkpoint files in directory (ckpt-<12 digits>.arrow only), oldest first."""
    return [n for n in list_dir(directory)[0] if CHECKPOINT_NAME.fullmatch(n)]


def _pointer(directory, files, warn=True):
    """The checkpoint file `latest` names, if it names one of ``files`` (the directory's); else
    None, with a warning when `latest` exists but names anything else. `latest` must hold
    exactly a name ckpt-<12 digits>.arrow (a final newline is allowed): never a path."""
    name, problem = _read_pointer(directory, files)
    if problem is not None and warn:
        log.warning("ignoring %s: %s", join(directory, LATEST), problem)
    return name


def _read_pointer(directory, files):
    """(the name `latest` holds, None) if valid (see ``_pointer``); (None, why not) if `latest`
    is there but invalid; (None, None) if it is not there."""
    try:
        content = read_start(join(directory, LATEST), 64)
        if content is None:
            return None, None
        name = content.decode("ascii").removesuffix("\n")
        if not CHECKPOINT_NAME.fullmatch(name):
            raise ValueError(f"{content[:40]!r} is not a name ckpt-<12 digits>.arrow")
        if name not in files:
            raise ValueError(f"it names {name}, which does not exist")
    except (OSError, ValueError) as err:  # UnicodeDecodeError is a ValueError
        return None, _one_line(err)
    return name, None


def _candidates(directory, warn=True):
    """The directory's checkpoint file names in the order readers try them: the one `latest`
    names, then the others newest first. Within ``read_once``, a directory is listed once."""
    once = _once.get()
    listed = None if once is None else once.candidates.get(directory)
    if listed is None:
        files = checkpoint_files(directory)
        listed = (files, *_read_pointer(directory, files))
        if once is not None:
            once.candidates[directory] = listed
    files, pointed, problem = listed
    if problem is not None and warn:
        log.warning("ignoring %s: %s", join(directory, LATEST), problem)
    newest_first = files[::-1]
    return newest_first if pointed is None else [pointed] + [n for n in newest_first
                                                             if n != pointed]


def load_newest(directory, key=None):
    """(path, table) of the newest valid checkpoint in a key directory (`latest`'s file first,
    then the files newest first), or None. Each invalid file is skipped with a warning naming
    it and why; given ``key``, so is a checkpoint of another model key."""
    found = _load_newest(directory, key, take_state=False)
    return None if found is None else found[:2]


def _load_newest(directory, key=None, take_state=True):
    """``load_newest`` with the state checking the file built, when ``take_state`` (else None,
    and within ``read_once`` it waits for the reader that takes it; ``_read_valid``)."""
    for name in _candidates(directory):
        path = join(directory, name)
        try:
            table, state = _read_valid(path, take_state, keep_state=not take_state)
            held = read_metadata(table).get("model_key")
            if key is not None and held != key:
                raise ValueError(f"it holds model {held!r}, not {key!r}")
        except FileNotFoundError:  # pruned by a writer since it was listed
            continue
        except ValueError as err:
            log.warning("ignoring checkpoint %s: %s", path, err)
            continue
        return path, table, state
    return None


def load_latest(model_dir, key):
    """(path, table) of the key's newest valid checkpoint, or None (see load_newest)."""
    return load_newest(key_dir(model_dir, key), key)


def load_latest_learner(model_dir, key):
    """(path, table, its LearnerState) of the key's newest valid checkpoint, or None: the
    learner as checking the file decoded it (None when another reader took it, ``read_once``),
    so that a model resumes without decoding it twice."""
    return _load_newest(key_dir(model_dir, key), key)


def latest_checkpoint(model_dir, key):
    """Path of the key's newest valid checkpoint (see load_newest), or None."""
    found = load_latest(model_dir, key)
    return None if found is None else found[0]


def load_checkpoint(path):
    """(checkpoint file, table) of a checkpoint file, which must be valid (ValueError naming the
    file and why, FileNotFoundError if absent), or of a model key's directory, whose newest
    valid checkpoint is taken (FileNotFoundError if it has none). The directory is read as it
    is: no model key is decoded from its name."""
    if is_dir(path):
        found = load_newest(path)
        if found is None:
            raise FileNotFoundError(f"{path} holds no valid checkpoint")
        return found
    try:
        return path, _read_valid(path, take_state=False)[0]
    except ValueError as err:
        raise ValueError(f"invalid checkpoint {path}: {err}") from None


def read_checkpoint(path):
    """The Arrow table of a checkpoint file or of a model key's directory (see load_checkpoint)."""
    return load_checkpoint(path)[1]


def model_keys(model_dir):
    """The model keys with a checkpoint under model_dir, sorted, read from the checkpoints'
    metadata (only the Arrow schema is read). A directory counts only when its name is
    ``key_dir_name`` of the key its checkpoints hold; anything else is ignored. Whether the key
    has a valid checkpoint is only known once it is read (``load_latest``)."""
    return [key for key, _, _ in checkpoint_metadata(model_dir)]


def checkpoint_metadata(model_dir):
    """[(model key, checkpoint path, its metadata)] per key directory under model_dir (see
    ``model_keys``), sorted by key: the metadata of the checkpoint readers try first whose
    Arrow schema is readable. Only schemas are read: nothing is verified. Within
    ``read_once``, the directory is read once."""
    once = _once.get()
    if once is None:
        return _checkpoint_metadata(model_dir)
    if model_dir not in once.listings:
        once.listings[model_dir] = _checkpoint_metadata(model_dir)
    return [(key, path, dict(meta)) for key, path, meta in once.listings[model_dir]]


def _checkpoint_metadata(model_dir):
    found = []
    for name in list_dir(model_dir)[1]:
        if not name.startswith((SHORT_PREFIX, HASHED_PREFIX)):
            continue
        directory = join(model_dir, name)
        first = _first_readable(directory)
        if first is None:
            continue
        path, meta = first
        if key_dir_name(meta["model_key"]) != name:
            log.warning("ignoring %s: its checkpoints are of model key %r, whose directory is %s",
                        directory, meta["model_key"], key_dir_name(meta["model_key"]))
            continue
        found.append((meta["model_key"], path, meta))
    return sorted(found, key=lambda f: f[0])


def _schema(path):
    """The Arrow schema at the start of an Arrow IPC file (magic, padding, then the schema
    message), read from the bytes it takes, in Arrow's own memory: not the whole file, and not
    through a Python file object (Arrow reads those on its I/O threads, and a process exiting
    right after can then abort; see ``records.arrow_buffer``)."""
    head = read_start(path, 1 << 16) or b""
    if head[:6] != b"ARROW1":
        raise ValueError("not an Arrow IPC file")
    end = 16 + int.from_bytes(head[12:16], "little")  # the schema message's flatbuffer length
    if end > len(head):
        head = read_start(path, end)
    message = pa.ipc.read_message(pa.BufferReader(arrow_buffer(head[8:end])))
    return pa.ipc.read_schema(message)


def _first_readable(directory):
    """(path, metadata) of the directory's first checkpoint, in the order readers try them,
    whose schema reads and names a model key; None if none does."""
    for name in _candidates(directory, warn=False):
        path = join(directory, name)
        try:
            meta = read_metadata(_schema(path))
        except (OSError, ValueError, pa.ArrowException):
            continue
        if isinstance(meta, dict) and isinstance(meta.get("model_key"), str):
            return path, meta
    return None


# --- writing -----------------------------------------------------------------------------------

def write_checkpoint(model_dir, key, table, examples_seen, keep=3):
    """Write the table as one of this key's checkpoints (see ``write_checkpoints``); returns
    the checkpoint's path."""
    return write_checkpoints(model_dir, [(key, table, examples_seen)], keep)[0]


def write_checkpoints(model_dir, checkpoints, keep=3):
    """Write each (key, table, examples seen), with its model key and checksum added
    (``seal``), as one of that key's checkpoints; returns their paths. The files are written
    first, all made durable together, then the keys' `latest` pointers.

    `latest` never moves back to fewer examples (a runner may re-run a bundle that already
    wrote a checkpoint), and pruning, which keeps the newest ``keep`` files, never removes the
    file `latest` names nor the key's last one written. Only checkpoint files inside the key's own
    directory are ever removed.
    """
    written = {}  # key directory -> names written there
    made = set()  # directories this call made: they hold only what it writes (not listed)
    paths = []
    for key, table, examples_seen in checkpoints:
        directory = key_dir(model_dir, key)
        if directory not in written and makedirs(directory):
            made.add(directory)
        written.setdefault(directory, []).append(checkpoint_name(examples_seen))
        paths.append(join(directory, written[directory][-1]))
    atomic_write_many([(path, table_to_bytes(seal(table, key)))
                       for path, (key, table, _) in zip(paths, checkpoints)])
    kept, pointers = {}, []
    for directory, names in written.items():
        if directory in made:
            files, current = sorted(set(names)), None
        else:
            files = checkpoint_files(directory)
            current = _pointer(directory, files) or (files[-1] if files else None)
        if current is None or current <= max(names):
            pointers.append((join(directory, LATEST), max(names).encode()))
            current = max(names)
        kept[directory] = files, (names[-1], current)  # (as if written one at a time)
    atomic_write_many(pointers)
    for directory, (files, keep_also) in kept.items():
        for stale in files[:-keep] if keep > 0 else []:
            if stale not in keep_also:
                remove(join(directory, stale))  # gone already: another writer pruned it
    return paths


def resume_positions(model_dir):
    """({source: earliest position}, {source: furthest position}) over the input positions
    that the models' latest valid checkpoints record (models over feature shards: their cuts'
    positions, and their starts in sources they have learned nothing from), and the start
    records the reading stage wrote (``write_starts``), but those of a model in a partition
    where its checkpoint's restart position moved with the watermark (``watermark_passed``,
    ``KeyedModel.passed_partitions``): that covers them."""
    return _resume_positions(model_dir)[:2]


def covered_partitions(model_dir):
    """{(model key, partition)} where the model's latest valid checkpoint's restart position
    moved with the watermark: no start record is needed there (``KeyByModel``)."""
    return _resume_positions(model_dir)[2]


def _resume_positions(model_dir):
    """(earliest, furthest, covered): see ``resume_positions``, ``covered_partitions``.
    Earliest: where each may restart (``restart_positions``, which lag what a model learned on
    arrival). Sharded models' partitions with a cut position are covered too."""
    recorded = []  # (positions learned, positions to restart after)
    passed = {}  # model key -> the partitions its restart positions cover (watermark_passed)
    for key in model_keys(model_dir):
        found = load_latest(model_dir, key)
        if found is not None:
            meta = read_metadata(found[1])
            positions = meta.get("input_positions") or {}
            recorded.append((positions, {**positions, **(meta.get("restart_positions") or {})}))
            passed[key] = set(meta.get("watermark_passed") or ())
    for key, starts in read_starts(starts_dir(model_dir)).items():  # (superseded: not pruned yet)
        recorded.append(({}, {s: p for s, p in starts.items() if s not in passed.get(key, ())}))
    covered = {(key, source) for key, sources in passed.items() for source in sources}
    for shards in shard_counts(model_dir):  # models over feature shards: their cuts
        for key, cut in sharded_cuts(model_dir, shards).items():
            recorded.append(({**cut.starts, **cut.positions},) * 2)
            covered |= {(key, source) for source in cut.positions}
    earliest, furthest = {}, {}
    for positions, restart in recorded:
        for source, position in restart.items():
            earliest[source] = min(earliest.get(source, position), position)
        for source, position in positions.items():
            furthest[source] = max(furthest.get(source, position), position)
    return earliest, furthest, covered


def resume_offsets(model_dir, topic):
    """{partition: offset} where a restarted Kafka source must resume so that no model misses
    an example: one past the earliest position any model's latest valid checkpoint recorded
    (a model records where it starts in a source before it learns from it)."""
    return partition_starts(resume_positions(model_dir)[0], topic)


def partition_starts(earliest, topic):
    """{partition: offset} of the topic's sources in ``earliest`` ({source: position}): one
    past the position."""
    starts = {}
    for source, position in earliest.items():
        name, _, partition = source.rpartition("/")
        if name == topic and partition.isdigit():
            starts[int(partition)] = position + 1
    return starts


# --- one model over feature shards (pipelines/sharded.py) --------------------------------------
# Shard s of S keeps its checkpoints as a model directory of its own, SHARDS/<s>-of-<S>, every
# shard's file of the same examples named alike (every shard counts every example): the newest
# count all S hold is a consistent cut. A model's start in a Kafka partition, before it learns
# anything there, is a start record under SHARDS/STARTS (``write_starts``).
SHARDS = "shards"
STARTS = "starts"
SHARD_DIR = re.compile(r"([0-9]+)-of-([0-9]+)")


def shard_dir(model_dir, shard, shards):
    """The model directory of shard ``shard`` of ``shards``."""
    return join(model_dir, SHARDS, f"{shard}-of-{shards}")


def shard_counts(model_dir):
    """The shard counts S that model_dir holds shard checkpoints of (sorted)."""
    found = {int(m.group(2)) for m in map(SHARD_DIR.fullmatch, list_dir(join(model_dir, SHARDS))[1])
             if m}
    return sorted(found)


def consistent_cut(model_dir, key, shards):
    """The newest example count every shard of the model holds a checkpoint of, or None."""
    common = None
    for s in range(shards):
        names = set(checkpoint_files(key_dir(shard_dir(model_dir, s, shards), key)))
        common = names if common is None else common & names
    return int(max(common)[5:17]) if common else None


def load_shard(model_dir, key, shard, shards, examples):
    """(path, table) of shard ``shard``'s checkpoint of ``examples`` examples of the model;
    ValueError naming the file when it is not valid or not of that model, FileNotFoundError
    when it is not there."""
    path = join(key_dir(shard_dir(model_dir, shard, shards), key), checkpoint_name(examples))
    path, table = load_checkpoint(path)
    if read_metadata(table).get("model_key") != key:
        raise ValueError(f"invalid checkpoint {path}: not of model {key!r}")
    return path, table


def sharded_model_keys(model_dir, shards):
    """The model keys shard 0 of ``shards`` holds checkpoints of."""
    return model_keys(shard_dir(model_dir, 0, shards))


def starts_dir(model_dir, sharded=False):
    """Where the start records of model_dir's models are (``write_starts``): STARTS, or for
    models over feature shards SHARDS/STARTS."""
    return join(model_dir, SHARDS, STARTS) if sharded else join(model_dir, STARTS)


def write_starts(root, records):
    """Record, durably and together, that each model key starts in a source after a position,
    [(key, source, position)]: a file each, ROOT/<key directory>/<hex of the source>-<the
    position>, never replaced (a source's earliest record for a key is the one that counts)."""
    items, made = [], set()
    for key, source, position in records:
        directory = join(root, key_dir_name(key))
        if directory not in made:
            makedirs(directory)
            made.add(directory)
        name = f"{source.encode('utf-8', 'surrogatepass').hex()}-{int(position)}"
        items.append((join(directory, name), json.dumps(
            {"model_key": key, "source": source, "position": int(position)}).encode()))
    atomic_write_many(items)


def read_starts(root):
    """{model key: {source: its earliest start position}} of the start records under ``root``
    (``write_starts``; also those of earlier versions, one file per key and source)."""
    starts = {}
    for directory in list_dir(root)[1]:
        for name in list_dir(join(root, directory))[0]:
            path = join(root, directory, name)
            try:
                record = json.loads(read_bytes(path))
                key, source, position = record["model_key"], record["source"], record["position"]
                if not (isinstance(key, str) and isinstance(source, str)
                        and isinstance(position, int)):
                    raise ValueError("not a start record")
            except (ValueError, KeyError, TypeError, OSError) as err:
                log.warning("ignoring start record %s: %s", path, _one_line(err))
                continue
            known = starts.setdefault(key, {})
            known[source] = min(known.get(source, position), position)
    return starts


def prune_starts(root, key, sources):
    """Remove the key's start records of ``sources`` (a checkpoint of its model, durable now,
    records where it may restart there)."""
    directory = join(root, key_dir_name(key))
    hexes = {source.encode("utf-8", "surrogatepass").hex() for source in sources}
    for name in list_dir(directory)[0]:
        if name.split("-", 1)[0] in hexes:  # (hex has no '-'; a position may: -1)
            remove(join(directory, name))


def sharded_models(model_dir, verify=True):
    """[(model key, shards, checkpoint, shard 0's metadata, the model or None)], one per sharded
    model under model_dir, of its consistent cut; ``checkpoint`` names its files as a pattern
    (<model_dir>/shards/*-of-S/<key directory>/ckpt-N.arrow). ``verify``ing, every shard's
    file is read and checked (a model with one that is not valid is skipped, with a warning),
    and the model is the unsharded LearnerState they make up (``learner.sharded.merge``);
    else only shard 0's schema is read."""
    from ..learner.sharded import merge
    found = []
    for shards in shard_counts(model_dir):
        for key in sharded_model_keys(model_dir, shards):
            examples = consistent_cut(model_dir, key, shards)
            if examples is None:
                continue
            pattern = join(model_dir, SHARDS, f"*-of-{shards}", key_dir_name(key),
                           checkpoint_name(examples))
            try:
                if verify:
                    cut = [load_shard(model_dir, key, s, shards, examples)
                           for s in range(shards)]
                    meta = read_metadata(cut[0][1])
                    model = merge([from_arrow(table) for _, table in cut])
                else:
                    meta = read_metadata(_schema(join(key_dir(shard_dir(model_dir, 0, shards),
                                                              key), checkpoint_name(examples))))
                    model = None
            except (OSError, ValueError, pa.ArrowException) as err:
                log.warning("ignoring sharded model %r (%s): %s", key, pattern, _one_line(err))
                continue
            found.append((key, shards, pattern, meta, model))
    return found


@dataclass(frozen=True)
class Cut:
    """Where a sharded model continues: the examples and rounds its shards' newest common
    checkpoint (``consistent_cut``) holds, the last input position learned per source (the
    lowest any shard's file records), and its start records of sources it has learned nothing
    from (Kafka partitions, ``write_starts``)."""
    examples: int = 0
    rounds: int = 0
    positions: dict = field(default_factory=dict)
    starts: dict = field(default_factory=dict)


def sharded_cuts(model_dir, shards, check=None):
    """{model key: Cut} of the models over ``shards`` shards under model_dir (and of those
    with start records only); ``check(table, path)`` is called on every shard file of a cut."""
    starts = read_starts(starts_dir(model_dir, sharded=True))
    cuts = {}
    for key in sorted(set(sharded_model_keys(model_dir, shards)) | set(starts)):
        examples = consistent_cut(model_dir, key, shards)
        rounds, positions = 0, {}
        for s in range(shards if examples is not None else 0):
            path, table = load_shard(model_dir, key, s, shards, examples)
            if check is not None:
                check(table, path)
            meta = read_metadata(table)
            rounds = int(meta["rounds"])
            for source, position in (meta.get("input_positions") or {}).items():
                positions[source] = min(positions.get(source, position), position)
        cuts[key] = Cut(examples or 0, rounds, positions,
                        {source: position for source, position in starts.get(key, {}).items()
                         if source not in positions})
    return cuts
