"""The catalog of a model directory's checkpoints: the one entry point for reading them, whatever
their layout (what the command, the transforms, `unitless inspect` and users' code read through).
By model group (``by_group``, what runs write), then the per-key layout earlier versions wrote
(``per_key``, read only); a model found in both is taken from the group layout, newest first (a
resumed run writes what it read from the per-key layout there). ``unitless.store.models`` is its
earlier name, still imported."""
import logging
from typing import Any, Dict, List, Optional, Tuple, Union

import pyarrow as pa

from ..connectors.storage import join, list_dir
from ..learner import LearnerState, read_metadata
from . import per_key
from .by_group import (FIGURES, LOCATOR, GroupCheckpoints, examples_of, group_checkpoints,
                       group_view, is_part, load_entries, load_located, load_metadata, locator,
                       part_metadata, part_models, part_rows)
from .groups import GROUPS, group_counts, group_dir, group_key
from .checkpoint_file import kept_reads, once_per_run
from .shards import SHARD_DIR, SHARDS, shard_counts

log = logging.getLogger("unitless")


def _views(model_dir, key, fresh=False):
    """GroupCheckpoints of each group that may hold the model (one per number of groups);
    within ``read_once`` (unless ``fresh``) each directory is listed once."""
    if fresh:
        return [GroupCheckpoints(group_dir(model_dir, g, group_key(key, g)))
                for g in group_counts(model_dir)]
    directories = [group_dir(model_dir, g, group_key(key, g)) for g in
                   once_per_run("group counts", model_dir, lambda: group_counts(model_dir))]
    return [group_view(d) for d in directories]


def _entries(model_dir, key, fresh=False):
    """The model's entries in every group layout, [(group directory, entry)], most examples
    first."""
    found = [(view.directory, entry) for view in _views(model_dir, key, fresh)
             for entry in view.entries(key)]
    return sorted(found, key=lambda f: -examples_of(f[1]))


def load_latest_learner(model_dir: str, key: str
                        ) -> Optional[Tuple[str, pa.Table, Optional[LearnerState]]]:
    """(locator or path, table, LearnerState or None) of the model's newest valid checkpoint,
    or None; each invalid one is skipped with a warning naming it and why. Within
    ``read_once`` a model is read and verified once while its tables fit (its state handed to
    the first reader only)."""
    once = kept_reads()
    kept = None if once is None else once.memo.setdefault("model", {})
    if kept is not None and (model_dir, key) in kept:
        found = kept[(model_dir, key)]
        return None if found is None else (*found, None)
    found = (load_entries(_entries(model_dir, key), key)
             or per_key.load_latest_learner(model_dir, key))
    if (kept is not None and once is not None
            and (found is None or found[1].nbytes <= once.bytes_left)):
        kept[(model_dir, key)] = None if found is None else found[:2]
        once.bytes_left -= 0 if found is None else found[1].nbytes
    return found


def latest_metadata(model_dir: str, key: str) -> Optional[Tuple[str, Dict[str, Any]]]:
    """(where, metadata) of the model's newest checkpoint whose checksum holds (a part's rows
    are checked, not decoded: what a resumed run's start reads of every model), or None.
    Within ``read_once`` read once. The metadata is the one its part's reader keeps: not to be
    changed."""
    return _latest(model_dir, key, lambda: _entries(model_dir, key))


def every_latest_metadata(model_dir: str) -> Dict[str, Tuple[str, Dict[str, Any]]]:
    """{model key: ``latest_metadata(model_dir, key)``} of every model that has one, read group
    by group: a resumed run's start reads every model's, and finding a model's groups took
    longer than reading its metadata. Within ``read_once`` each is kept for
    ``latest_metadata``."""
    entries: Dict[str, list] = {}
    for _, view in group_checkpoints(model_dir):
        for key in view.newest():
            entries.setdefault(key, []).extend((view.directory, e) for e in view.entries(key))
    found = {}
    for key, held in entries.items():
        held.sort(key=lambda f: -examples_of(f[1]))  # (as ``_entries`` orders them)
        found[key] = _latest(model_dir, key, lambda: held)
    for key in per_key.model_keys(model_dir):
        if key not in entries:
            found[key] = latest_metadata(model_dir, key)
    return {key: meta for key, meta in found.items() if meta is not None}


def _latest(model_dir, key, entries):
    """``latest_metadata`` of the model, whose entries in the group layout are ``entries()``."""
    def read():
        found = load_metadata(entries(), key)
        if found is None:
            kept = per_key.load_latest(model_dir, key)
            found = None if kept is None else (kept[0], read_metadata(kept[1]))
        return found
    return once_per_run("metadata", (model_dir, key), read)


def load_latest(model_dir: str, key: str) -> Optional[Tuple[str, pa.Table]]:
    """(locator or path, table) of the model's newest valid checkpoint, or None."""
    found = load_latest_learner(model_dir, key)
    return None if found is None else found[:2]


def latest_checkpoint(model_dir: str, key: str) -> Optional[str]:
    """Where the model's newest valid checkpoint is (``load_checkpoint`` reads it), or None."""
    found = load_latest_learner(model_dir, key)
    return None if found is None else found[0]


def _metadata(directory, part, index):
    """(where, metadata) of a part's model (unverified), or None (with a warning) when its
    part cannot be read."""
    where = locator(join(directory, part), index)
    try:
        return where, part_metadata(join(directory, part), index)
    except (OSError, ValueError) as err:
        log.warning("ignoring checkpoint %s: %s", where, err)
        return None


def checkpoint_history(model_dir: str, key: str) -> List[Tuple[str, Dict[str, Any]]]:
    """[(where, metadata)] of the model's kept checkpoints in the group layout, oldest first
    (from the kept manifests, each state once; unverified)."""
    found = [_metadata(directory, part, index)
             for directory, (part, index, _) in _entries(model_dir, key, fresh=True)[::-1]]
    return [f for f in found if f is not None]


def newest_version(model_dir: str,
                   key: str) -> Tuple[Tuple[List[str], ...], List[str]]:
    """What changes when the model may have a newer checkpoint: the newest manifest of each of
    its groups and its newest per-key file, listed now."""
    return (tuple(v.names[:1] for v in _views(model_dir, key, fresh=True)),
            per_key.checkpoint_files(per_key.key_dir(model_dir, key))[-1:])


def has_checkpoint(model_dir: str, key: str) -> bool:
    """True when a checkpoint of the model is listed now (not verified)."""
    return (any(key in view.newest() for view in _views(model_dir, key, fresh=True))
            or bool(per_key.checkpoint_files(per_key.key_dir(model_dir, key))))


def load_checkpoint(path: str) -> Tuple[str, pa.Table]:
    """(where, table) of one model's checkpoint: a locator (``<part>.arrow#<n>``, the part's
    n-th model), a per-key checkpoint file, or a per-key model directory (its newest valid
    checkpoint); it must be valid (ValueError naming it and why; FileNotFoundError if absent)."""
    located = LOCATOR.fullmatch(path)
    if located is None:
        if is_part(path):
            raise ValueError(whole_part(path))
        return per_key.load_checkpoint(path)
    try:
        return path, load_located(located.group(1), int(located.group(2)))[0]
    except ValueError as err:
        raise ValueError(f"invalid checkpoint {path}: {err}") from None


def whole_part(path: str, shown: int = 10) -> str:
    """What to say of a part named without ``#N``: it holds several models' checkpoints, each
    one of them named by its number (up to ``shown`` of them listed)."""
    try:
        models = part_models(path)
    except ValueError as err:
        return f"invalid checkpoint {path}: {err}"
    listed = ", ".join(f"#{n} {key!r} ({seen:,} examples)" for n, key, seen in models[:shown])
    more = f", and {len(models) - shown:,} more" if len(models) > shown else ""
    return (f"{path} is a part holding the checkpoints of {len(models):,} models: name one by "
            f"its number, {path}#N ({listed}{more}), or inspect the model directory")


def read_checkpoint(path: str) -> pa.Table:
    """The Arrow table of a model's checkpoint (see ``load_checkpoint``)."""
    return load_checkpoint(path)[1]


def _newest_entries(model_dir):
    """{model key: (its group's GroupCheckpoints, its newest entry)} over the group layout's
    manifests."""
    found = {}
    for _, view in group_checkpoints(model_dir):
        for key, entry in view.newest().items():
            if key not in found or examples_of(entry) > examples_of(found[key][1]):
                found[key] = view, entry
    return found


def newest_models(model_dir: str) -> Optional[pa.Table]:
    """Every model's newest state in the group layout as one Arrow table, a ``model_key``
    column first, then its checkpoint's columns (unverified: the rows its manifest names); for
    pandas (``.to_pandas()``) or DuckDB, which query it in scope. Models of the per-key layout
    are not in it."""
    parts: Dict[str, List[int]] = {}
    for view, (part, index, _) in _newest_entries(model_dir).values():
        parts.setdefault(join(view.directory, part), []).append(index)
    tables = [part_rows(path, sorted(indices)) for path, indices in sorted(parts.items())]
    return pa.concat_tables(tables) if tables else None


def checkpoint_metadata(model_dir: str) -> List[Tuple[str, str, Dict[str, Any]]]:
    """[(model key, where its newest checkpoint is, its metadata)] of every model under
    model_dir, sorted by key: unverified, from the group layout's manifests and its parts'
    schemas, then the per-key layout's schemas for models the group layout does not hold."""
    return list(once_per_run("all metadata", model_dir,
                             lambda: _by_key(_newest_metadata(model_dir, summary=False))))


def checkpoint_summaries(model_dir: str) -> List[Tuple[str, str, Dict[str, Any]]]:
    """``checkpoint_metadata``, but where a manifest holds a model's examples seen and
    ``by_group.FIGURES`` (progressive loss, errors, loss), those alone, without reading its
    part (a run's own summary of a million models: ``newest_summaries``)."""
    return _by_key(newest_summaries(model_dir))


def _by_key(found):
    """[(model key, where, metadata)] of {model key: (Where, metadata)}, sorted by key."""
    return [(key, where_of(where), meta) for key, (where, meta) in sorted(found.items())]


# where a model's checkpoint is: a path or locator, or (group directory, part, index) to make
# its locator of (``where_of``)
Where = Union[str, Tuple[str, str, int]]


def newest_summaries(model_dir: str) -> Dict[str, Tuple[Where, Dict[str, Any]]]:
    """``checkpoint_summaries``, unsorted, {model key: (where, metadata)}, the locators not
    made (a run's summary shows a few of a million models)."""
    return _newest_metadata(model_dir, summary=True)


def where_of(where: Where) -> str:
    return where if isinstance(where, str) else locator(join(where[0], where[1]), where[2])


def _newest_metadata(model_dir, summary):
    """{model key: (Where, metadata)} of each model's newest state whose part's schema reads
    (an older one where the newest's does not: a model is listed while it has a state to
    resume or score)."""
    listed = {}
    for key, (view, (part, index, held)) in _newest_entries(model_dir).items():
        if summary and FIGURES[0] in held:  # (all of them: ``by_group.entry_summary``)
            listed[key] = (view.directory, part, index), held
            continue
        for part, index, _ in view.entries(key):  # (the newest first)
            found = _metadata(view.directory, part, index)
            if found is not None:
                listed[key] = found
                break
    for key, path, meta in per_key.checkpoint_metadata(model_dir):
        listed.setdefault(key, (path, meta))
    return listed


def model_keys(model_dir: str) -> List[str]:
    """The model keys with a checkpoint under model_dir, sorted (see ``checkpoint_metadata``)."""
    return [key for key, _, _ in checkpoint_metadata(model_dir)]


def lists_models(model_dir: str) -> bool:
    """True when model_dir lists checkpoints in any layout (model groups, feature shards, per
    key): listings only, no checkpoint is read or verified."""
    if group_counts(model_dir) or shard_counts(model_dir):
        return True
    return any(name.startswith((per_key.SHORT_PREFIX, per_key.HASHED_PREFIX))
               and per_key.checkpoint_files(join(model_dir, name))
               for name in list_dir(model_dir)[1])


def model_directory_of(path: str) -> str:
    """The model directory that ``path`` is or is under: the directory itself, or anything the
    layouts put below one (a group's directory, its manifests and parts, a part's locator; a
    shard's directory and files; a key's directory or checkpoint file), so that a file a
    watcher reports (Beam's ``WatchFilePattern`` over ``<dir>/groups/*/*/manifest-*.json``)
    names its models. A path under none of them is taken as the model directory."""
    path = path.rstrip("/")
    if lists_models(path):
        return path
    parts = path.split("/")
    if parts[-1] in (GROUPS, SHARDS):
        return "/".join(parts[:-1])
    for i in range(len(parts) - 2, 0, -1):  # (the layout's marker nearest the path's end)
        below = parts[i + 1]
        if ((parts[i] == GROUPS and below.isdigit())
                or (parts[i] == SHARDS and SHARD_DIR.fullmatch(below))):
            return "/".join(parts[:i])
    key_dir = parts[-2] if (per_key.CHECKPOINT_NAME.fullmatch(parts[-1])
                            or parts[-1] == per_key.LATEST) else parts[-1]
    if key_dir.startswith((per_key.SHORT_PREFIX, per_key.HASHED_PREFIX)):
        return "/".join(parts[:len(parts) - (2 if key_dir != parts[-1] else 1)])
    return path
