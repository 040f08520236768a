"""Model checkpoints by model group, read: the models that share one key of the keyed step
(``groups.group_key``) are checkpointed together, a few files per group per checkpoint, not a
file and a pointer per model key; their parts, manifests and what a reader makes of them
(writing them: group_writer.py). The layout, file by file (parts, manifests, names, who writes
and who reads what): docs/compatibility.md, "The group layout, file by file".
"""
import json
import logging
import posixpath
import re
import threading
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import pyarrow as pa

from ..connectors.storage import join, list_dir, read_bytes
from ..learner.state import METADATA_KEY, LearnerState
from ..learner import from_arrow
from . import part_format
from .checkpoint_file import (CHECKSUM_FIELD, RowChecksums, once_per_run, one_line, read_schema,
                              table_from_bytes)
from .groups import group_counts, groups_dir
from .part_format import MODEL_KEY, PART_KEY

log = logging.getLogger("unitless")

PART = re.compile(r"part-([0-9]{12})-([0-9a-f]{1,64})\.arrow")
MANIFEST = re.compile(r"manifest-([0-9]{12})-([0-9a-f]{1,64})\.json")
# what a manifest's "format" says: 2 since parts of format 2 (``part_format``), which a manifest
# of format 2 may name; a version that reads only format 1 then finds no manifest it reads
# rather than manifests naming parts it cannot read (docs/compatibility.md)
MANIFEST_FORMAT = "unitless group manifest 2"
MANIFEST_FORMATS = ("unitless group manifest 1", MANIFEST_FORMAT)  # (what is read)
Entry = Tuple[str, int, Dict[str, Any]]


def locator(part_path: str, index: int) -> str:
    """How the ``index``-th model of a part is named to people and to ``load_located``."""
    return f"{part_path}#{index}"


LOCATOR = re.compile(r"(.*\.arrow)#([0-9]+)")


def is_part(path: str) -> bool:
    """Whether ``path`` names a group's part file (several models' checkpoints), not one
    model's checkpoint in it (``locator``)."""
    return PART.fullmatch(posixpath.basename(path)) is not None


# --- reading -----------------------------------------------------------------------------------

class _Kept:
    """What ``read(path)`` makes of parts, by path, the most recently used last, up to
    ``limit`` in ``weigh``: a part never changes once written (its name is unique), so a
    worker resuming a group's models one by one reads the group's part once."""

    def __init__(self, read, limit, weigh=lambda found: 1):
        self.read, self.limit, self.weigh = read, limit, weigh
        self.held, self.found, self.lock = 0, OrderedDict(), threading.Lock()

    def get(self, path, read=True):
        """What ``read`` makes of the part (None if not ``read`` and not kept)."""
        with self.lock:
            found = self.found.get(path)
            if found is not None:
                self.found.move_to_end(path)
                return found
        if not read:
            return None
        found = self.read(path)
        with self.lock:
            if path not in self.found:
                self.found[path] = found
                self.held += self.weigh(found)
            while self.held > self.limit and len(self.found) > 1:
                self.held -= self.weigh(self.found.popitem(last=False)[1])
        return found

    def clear(self):
        with self.lock:
            self.held, self.found = 0, OrderedDict()


def _part_index(metadata):
    """(format, [(first row, rows, metadata)] of a part's models), from its schema's metadata:
    format 1, each model's metadata JSON in the header; format 2, ``part_format``'s."""
    header = json.loads(metadata[PART_KEY])
    found = header.get("part_format", 1)
    if found == part_format.PART_FORMAT:
        return found, part_format.decode(header, metadata)
    if found != 1:
        raise ValueError(f"it is of part format {found!r}, which this version does not read")
    return found, [(int(m["first_row"]), int(m["rows"]), m["metadata"])
                   for m in header["models"]]


def _as_part(read):
    """``read`` with what it raises on something that is not a part as ValueError (a part
    gone stays FileNotFoundError)."""
    def reading(path):
        try:
            return read(path)
        except FileNotFoundError:
            raise
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as err:
            raise ValueError(f"it is not a readable part ({one_line(err)})") from None
    return reading


class _Part:
    """A part as read: its table, its models (``_part_index``), and, once one is checked, the
    checksums of its rows (``RowChecksums``: its columns converted once for all its models)
    and which models' checksums held. A resumed run checks each model it reads back, and
    its start reads every model's metadata, checked, before its workers read the same models
    (in one process, on the FnApiRunner): each is hashed once."""

    def __init__(self, table: pa.Table, found: Tuple[int, list]) -> None:
        self.table, (self.format, self.models) = table, found
        self.checksums: Optional[RowChecksums] = None
        self.checked: set = set()

    def check(self, index: int) -> None:
        """ValueError unless the ``index``-th model's checksum holds (format 2: the part's)."""
        if self.format == part_format.PART_FORMAT:
            if not self.checked:
                part_format.verify(self.table)
                self.checked.add(None)
        elif index not in self.checked:
            if self.checksums is None:
                self.checksums = RowChecksums(self.table.drop_columns([MODEL_KEY]))
            first_row, rows, meta = self.models[index]
            self.checksums.check(meta, first_row, rows)
            self.checked.add(index)


@_as_part
def _read_part(path):
    """The part at ``path`` (``_Part``), its table checked whole; its index as ``_indices``
    read it from the same schema metadata, if it did (a resumed run's start reads every
    model's metadata, unverified and then checked: each index is decoded once)."""
    table = table_from_bytes(read_bytes(path))
    table.validate(full=True)
    metadata, kept = table.schema.metadata, _indices.get(path, read=False)
    return _Part(table, kept[1] if kept is not None and kept[0] == metadata
                 else _part_index(metadata))


def _read_index(path):
    """(schema metadata, ``_part_index``) of the part at ``path``: its kept ``_Part``'s, else
    from its schema alone."""
    part = _parts.get(path, read=False)
    if part is not None:
        return part.table.schema.metadata, (part.format, part.models)
    metadata = read_schema(path).metadata
    return metadata, _part_index(metadata)


# (format 1 weighed twice its table: its ``RowChecksums`` convert its columns once more)
_parts = _Kept(_read_part, 256 << 20, lambda found: (
    found.table.nbytes * (1 if found.format == part_format.PART_FORMAT else 2)))
# what readers of metadata need of parts, read from their schemas alone (``_read_index``)
_indices = _Kept(_as_part(_read_index), 4096)


def _index(path):
    """[(first row, rows, metadata)] of the part's models (unverified: ``_indices``)."""
    return _indices.get(path)[1][1]


def load_located(part_path: str, index: int, key: Optional[str] = None,
                 checksum: Optional[str] = None,
                 decode: bool = True) -> Tuple[pa.Table, Optional[LearnerState]]:
    """(table, LearnerState) of the ``index``-th model of a part: its table as its own
    checkpoint file held it, checked as ``check_table`` checks one (not ``decode``d: its
    checksum only, and no state); ValueError unless it is valid, of model ``key`` when given,
    and, given the manifest's ``checksum``, the state the manifest names."""
    part, first_row, rows, meta = _located(part_path, index, key, checksum)
    table = part.table.slice(first_row, rows).drop_columns([MODEL_KEY]).replace_schema_metadata(
        {METADATA_KEY: json.dumps(meta).encode()})
    try:
        return table, from_arrow(table) if decode else None
    except (TypeError, KeyError, IndexError, OverflowError, pa.ArrowException) as err:
        raise ValueError(f"{type(err).__name__}: {one_line(err)}") from None


def located_metadata(part_path: str, index: int, key: Optional[str] = None,
                     checksum: Optional[str] = None) -> Dict[str, Any]:
    """The metadata of the ``index``-th model of a part, checked as ``load_located`` checks
    it without ``decode`` (the part's own dict: not to be changed), with no table made."""
    return _located(part_path, index, key, checksum)[3]


def _located(part_path, index, key, checksum):
    """(``_Part``, first row, rows, metadata) of the ``index``-th model of a part, its checksum
    checked; ValueError as ``load_located`` says."""
    part = _parts.get(part_path)
    if not 0 <= index < len(part.models):
        raise ValueError(f"the part holds no model {index}")
    first_row, rows, meta = part.models[index]
    if not 0 <= first_row <= first_row + rows <= part.table.num_rows:
        raise ValueError(f"rows {first_row}-{first_row + rows} are not in the part")
    if not isinstance(meta, dict):
        raise ValueError("its metadata is not a JSON object")
    if key is not None and meta.get(MODEL_KEY) != key:
        raise ValueError(f"it holds model {meta.get(MODEL_KEY)!r}, not {key!r}")
    if checksum is not None and meta.get(CHECKSUM_FIELD) != checksum:
        raise ValueError("it is not the state its manifest names")
    try:
        part.check(index)
    except (TypeError, KeyError, IndexError, OverflowError, pa.ArrowException) as err:
        raise ValueError(f"{type(err).__name__}: {one_line(err)}") from None
    return part, first_row, rows, meta


def part_metadata(part_path: str, index: int) -> Dict[str, Any]:
    """The metadata of a part's ``index``-th model as its schema holds it (unverified);
    ValueError unless it reads as a part holding one."""
    kept = _parts.get(part_path, read=False)
    models = kept.models if kept is not None else _index(part_path)
    if not 0 <= index < len(models):
        raise ValueError(f"the part holds no model {index}")
    return models[index][2]


def part_models(part_path: str) -> List[Tuple[int, Optional[str], int]]:
    """[(n, model key, examples seen)] of the models a part holds, from its schema (unverified);
    ValueError unless it reads as a part."""
    return [(n, meta.get(MODEL_KEY), int(meta.get("examples_seen", 0)))
            for n, (_, _, meta) in enumerate(_index(part_path))]


def part_rows(part_path: str, indices: Sequence[int]) -> pa.Table:
    """The rows of the part's ``indices``-th models, ``model_key`` column first (unverified)."""
    part = _parts.get(part_path)
    return pa.concat_tables([part.table.slice(part.models[i][0], part.models[i][1])
                             for i in indices]
                            ).replace_schema_metadata(None)


class GroupCheckpoints:
    """One group's checkpoints, as its directory was listed once: each model's newest entry
    and its older ones (the fallbacks), from the kept manifests."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        files = list_dir(directory)[0]
        # newest first (by seq, then token)
        self.names = sorted((n for n in files if MANIFEST.fullmatch(n)), reverse=True)
        self.parts = {n for n in files if PART.fullmatch(n)}
        self.seq = max((sequence_of(n) for n in self.names + list(self.parts)), default=0)
        # name -> parsed manifest, or None if unreadable
        self._manifests: Dict[str, Optional[Dict[str, Entry]]] = {}
        self._newest: Optional[Dict[str, Entry]] = None

    def manifest(self, name: str) -> Optional[Dict[str, Entry]]:
        if name not in self._manifests:
            self._manifests[name] = _read_manifest(join(self.directory, name))
        return self._manifests[name]

    def newest(self) -> Dict[str, Entry]:
        """{model key: entry} of the newest readable manifests (those of its newest seq,
        merged: per model, the entry of most examples); an entry is (part name, the model's
        index in it, {examples_seen, checksum})."""
        if self._newest is None:
            self._newest = {}
            top = None
            for name in self.names:
                manifest = self.manifest(name)
                if manifest is None:
                    continue
                if top is not None and sequence_of(name) != top:
                    break
                top = sequence_of(name)
                for key, entry in manifest.items():
                    held = self._newest.get(key)
                    if held is None or examples_of(entry) > examples_of(held):
                        self._newest[key] = entry
            if top is None and self.parts:
                self._newest = self._from_parts()
        return self._newest

    def _from_parts(self):
        """``newest`` of a group whose parts no readable manifest names (its manifests deleted,
        or a run stopped between its first part and manifest): each model's entry of most
        examples in the parts, read from their schemas (each state is still checked against
        its checksum when it is loaded)."""
        found = {}
        for name in sorted(self.parts):
            path = join(self.directory, name)
            try:
                models = _index(path)
            except (OSError, ValueError) as err:
                log.warning("ignoring part %s: %s", path, one_line(err))
                continue
            for index, (_, _, meta) in enumerate(models):
                try:
                    key, entry = meta[MODEL_KEY], (name, index, entry_summary(
                        meta["examples_seen"], meta[CHECKSUM_FIELD],
                        [meta[f] for f in FIGURES if f in meta]))
                except (KeyError, TypeError, ValueError):
                    continue  # (not a state: loading it would refuse it too)
                if key not in found or examples_of(entry) > examples_of(found[key]):
                    found[key] = entry
        if found:
            log.warning("%s has no readable manifest: its %d models are read from its parts",
                        self.directory, len(found))
        return found

    def entries(self, key: str) -> List[Entry]:
        """The model's entries, the newest first, then those of older manifests (each state
        once)."""
        newest = self.newest().get(key)
        found = [] if newest is None else [newest]
        for name in self.names:
            entry = (self.manifest(name) or {}).get(key)
            if entry is not None and all(entry[:2] != f[:2] for f in found):
                found.append(entry)
        return found

    def load(self, key: str) -> Optional[Tuple[str, pa.Table, Optional[LearnerState]]]:
        """(locator, table, LearnerState) of the model's newest valid state here, or None (see
        ``load_entries``)."""
        return load_entries([(self.directory, entry) for entry in self.entries(key)], key)

    def metadata(self, key: str) -> Optional[Tuple[str, Dict[str, Any]]]:
        """(locator, metadata) of the model's newest state here whose checksum holds, or None
        (``load_entries`` without ``decode``, no table made: ``located_metadata``)."""
        return load_metadata([(self.directory, entry) for entry in self.entries(key)], key)


def load_entries(entries: Iterable[Tuple[str, Entry]], key: str
                 ) -> Optional[Tuple[str, pa.Table, Optional[LearnerState]]]:
    """(locator, table, LearnerState) of the first valid of the model's entries, [(group
    directory, entry)], or None; each invalid one is skipped with a warning naming it and
    why."""
    found = _first_valid(entries, key, load_located)
    return None if found is None else (found[0], *found[1])


def load_metadata(entries: Iterable[Tuple[str, Entry]], key: str
                  ) -> Optional[Tuple[str, Dict[str, Any]]]:
    """(locator, metadata) of the first of the model's entries whose checksum holds (its
    learner not decoded, no table made: ``located_metadata``), or None."""
    return _first_valid(entries, key, located_metadata)


def _first_valid(entries, key, read):
    """(locator, ``read(part path, index, key, checksum)``) of the first of the model's
    entries it reads (``load_entries``), or None."""
    for directory, (part, index, meta) in entries:
        path = join(directory, part)
        try:
            found = read(path, index, key, meta.get(CHECKSUM_FIELD))
        except FileNotFoundError:
            log.warning("ignoring checkpoint %s: its part is gone", locator(path, index))
            continue
        except ValueError as err:
            log.warning("ignoring checkpoint %s: %s", locator(path, index), err)
            continue
        return locator(path, index), found
    return None


def sequence_of(name: str) -> int:
    return int(name.split("-", 2)[1])


def examples_of(entry: Entry) -> int:
    return int(entry[2]["examples_seen"])


# a model's figures a manifest holds beside its part, index, examples and checksum (under
# "figures", which readers before it ignore): a run's summary reads them, not every model's part
FIGURES = ("progressive_loss", "errors", "loss")


def entry_summary(examples: int, checksum: str,
                  figures: Sequence[float] = ()) -> Dict[str, Any]:
    """What a manifest holds of a model's metadata: its examples and checksum, and its
    ``figures`` (the values of FIGURES: all of them, or none)."""
    summary = {"examples_seen": int(examples), CHECKSUM_FIELD: str(checksum)}
    if len(figures) == len(FIGURES):
        summary.update(zip(FIGURES, figures))
    return summary


def _read_manifest(path):
    """{model key: (part name, index in it, {examples_seen, checksum})} of a manifest, or None
    (with a warning) when it cannot be read."""
    try:
        manifest = json.loads(read_bytes(path))
        if manifest.get("format") not in MANIFEST_FORMATS:
            raise ValueError(f"not a manifest of format {' or '.join(MANIFEST_FORMATS)}")
        found, parts, figures = {}, set(), manifest.get("figures") or {}
        for key, (part, index, examples, checksum) in manifest["models"].items():
            if part not in parts:
                if not PART.fullmatch(part):
                    raise ValueError(f"{part!r} is not a part's name")
                parts.add(part)
            held = figures.get(key)
            found[key] = (part, int(index), entry_summary(
                examples, checksum, held if isinstance(held, list) else ()))
        return found
    except FileNotFoundError:  # pruned since it was listed
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        log.warning("ignoring manifest %s: %s", path, one_line(err))
        return None


def group_checkpoints(model_dir: str) -> List[Tuple[int, GroupCheckpoints]]:
    """[(G, GroupCheckpoints)] of every group directory under model_dir (within ``read_once``
    each directory's the run's one: ``group_view``)."""
    found = []
    for groups in group_counts(model_dir):
        root = groups_dir(model_dir, groups)
        found += [(groups, group_view(join(root, name))) for name in list_dir(root)[1]]
    return found


def group_view(directory: str) -> GroupCheckpoints:
    """The group directory's GroupCheckpoints: within ``read_once`` listed and its manifests
    read once (a resumed run's start lists every model, then reads each one's newest)."""
    return once_per_run("group", directory, lambda: GroupCheckpoints(directory))


# --- writing -----------------------------------------------------------------------------------
