"""The per-key checkpoint layout, a directory per model key: one checkpoint file
(``checkpoint_file``) per checkpoint, written atomically, checked whenever it is read. Runs
write models by group (``by_group``) and read this layout's checkpoints of earlier versions
(``models``); each shard of a model over feature shards keeps its checkpoints in it
(``shards``). The files, the key directories' names (``key_dir_name``) and which checkpoint a
reader takes: docs/compatibility.md, "The per-key layout, file by file".
"""
import hashlib
import logging
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pyarrow as pa

from ..connectors.storage import (atomic_write_many, is_dir, join, list_dir, makedirs,
                                  read_start, remove)
from ..learner import LearnerState, read_metadata
from .checkpoint_file import (kept_reads, one_line, read_schema, read_valid, seal,
                              table_to_bytes)

log = logging.getLogger("unitless")

LATEST = "latest"
CHECKPOINT_NAME = re.compile(r"ckpt-[0-9]{12}\.arrow")
SHORT_PREFIX, HASHED_PREFIX = "k-", "h-"
MAX_ESCAPED = 100   # longer escaped keys get the hashed form
CLIPPED = 64        # escaped characters kept in the hashed form
_UNESCAPED = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")


def key_dir_name(key: str) -> str:
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


def key_dir(model_dir: str, key: str) -> str:
    """The directory under model_dir holding the key's checkpoints."""
    return join(model_dir, key_dir_name(key))


def checkpoint_name(examples_seen: int) -> str:
    """ckpt-<examples seen, 12 digits>.arrow; names sort as their example counts do."""
    if isinstance(examples_seen, bool) or not 0 <= examples_seen < 10 ** 12:
        raise ValueError(f"a checkpoint's example count must be in 0..10^12-1, "
                         f"not {examples_seen!r}")
    return f"ckpt-{int(examples_seen):012d}.arrow"


def checkpoint_files(directory: str) -> List[str]:
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
        return None, one_line(err)
    return name, None


def _candidates(directory, warn=True):
    """The directory's checkpoint file names in the order readers try them: the one `latest`
    names, then the others newest first. Within ``read_once``, a directory is listed once."""
    once = kept_reads()
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


def load_newest(directory: str,
                key: Optional[str] = None) -> Optional[Tuple[str, pa.Table]]:
    """(path, table) of the newest valid checkpoint in a key directory (`latest`'s file first,
    then the files newest first), or None. Each invalid file is skipped with a warning naming
    it and why; given ``key``, so is a checkpoint of another model key."""
    found = _load_newest(directory, key, take_state=False)
    return None if found is None else found[:2]


def _load_newest(directory, key=None, take_state=True):
    """``load_newest`` with the state checking the file built, when ``take_state`` (else None,
    and within ``read_once`` it waits for the reader that takes it; ``read_valid``)."""
    for name in _candidates(directory):
        path = join(directory, name)
        try:
            table, state = read_valid(path, take_state, keep_state=not take_state)
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


def load_latest(model_dir: str, key: str) -> Optional[Tuple[str, pa.Table]]:
    """(path, table) of the key's newest valid checkpoint, or None (see load_newest)."""
    return load_newest(key_dir(model_dir, key), key)


def load_latest_learner(model_dir: str, key: str
                        ) -> Optional[Tuple[str, pa.Table, Optional[LearnerState]]]:
    """(path, table, its LearnerState) of the key's newest valid checkpoint, or None: the
    learner as checking the file decoded it (None when another reader took it, ``read_once``),
    so that a model resumes without decoding it twice."""
    return _load_newest(key_dir(model_dir, key), key)


def latest_checkpoint(model_dir: str, key: str) -> Optional[str]:
    """Path of the key's newest valid checkpoint (see load_newest), or None."""
    found = load_latest(model_dir, key)
    return None if found is None else found[0]


def load_checkpoint(path: str) -> Tuple[str, pa.Table]:
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
        return path, read_valid(path, take_state=False)[0]
    except ValueError as err:
        raise ValueError(f"invalid checkpoint {path}: {err}") from None


def read_checkpoint(path: str) -> pa.Table:
    """The Arrow table of a checkpoint file or of a model key's directory (see load_checkpoint)."""
    return load_checkpoint(path)[1]


def model_keys(model_dir: str) -> List[str]:
    """The model keys with a checkpoint under model_dir, sorted, read from the checkpoints'
    metadata (only the Arrow schema is read). A directory counts only when its name is
    ``key_dir_name`` of the key its checkpoints hold; anything else is ignored. Whether the key
    has a valid checkpoint is only known once it is read (``load_latest``)."""
    return [key for key, _, _ in checkpoint_metadata(model_dir)]


def checkpoint_metadata(model_dir: str) -> List[Tuple[str, str, Dict[str, Any]]]:
    """[(model key, checkpoint path, its metadata)] per key directory under model_dir (see
    ``model_keys``), sorted by key: the metadata of the checkpoint readers try first whose
    Arrow schema is readable. Only schemas are read: nothing is verified. Within
    ``read_once``, the directory is read once."""
    once = kept_reads()
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


def _first_readable(directory):
    """(path, metadata) of the directory's first checkpoint, in the order readers try them,
    whose schema reads and names a model key; None if none does."""
    for name in _candidates(directory, warn=False):
        path = join(directory, name)
        try:
            meta = read_metadata(read_schema(path))
        except (OSError, ValueError, pa.ArrowException):
            continue
        if isinstance(meta, dict) and isinstance(meta.get("model_key"), str):
            return path, meta
    return None


# --- writing -----------------------------------------------------------------------------------

def write_checkpoint(model_dir: str, key: str, table: pa.Table, examples_seen: int,
                     keep: int = 3) -> str:
    """Write the table as one of this key's checkpoints (see ``write_checkpoints``); returns
    the checkpoint's path."""
    return write_checkpoints(model_dir, [(key, table, examples_seen)], keep)[0]


def write_checkpoints(model_dir: str, checkpoints: Sequence[Tuple[str, pa.Table, int]],
                      keep: int = 3) -> List[str]:
    """Write each (key, table, examples seen), with its model key and checksum added
    (``seal``), as one of that key's checkpoints; returns their paths. The files are written
    first, all made durable together, then the keys' `latest` pointers.

    `latest` never moves back to fewer examples (a runner may re-run a bundle that already
    wrote a checkpoint), and pruning, which keeps the newest ``keep`` files, never removes the
    file `latest` names nor the key's last one written. Only checkpoint files inside the key's own
    directory are ever removed.
    """
    written: Dict[str, List[str]] = {}  # key directory -> names written there
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
