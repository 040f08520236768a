"""Model checkpoints by model group: the models that share one key of the keyed step
(``group_key``) are checkpointed together, a few files per group per checkpoint, not a file
and a pointer per model key. The layout, file by file (parts, manifests, names, who writes
and who reads what): docs/compatibility.md, "The group layout, file by file".
"""
import json
import logging
import posixpath
import re
import threading
import zlib
from collections import OrderedDict

import numpy as np
import pyarrow as pa
from numba import njit

from ..connectors.storage import (atomic_write_many, join, list_dir, makedirs, read_bytes,
                                  remove, unique_token)
from ..learner import read_metadata
from ..learner.state import METADATA_KEY, TableRows
from .checkpoint_file import (CHECKSUM_FIELD, bare_table, check_table, one_line, read_schema,
                              seal_many, table_from_bytes, table_to_bytes)
from .per_key import key_dir_name

log = logging.getLogger("unitless")

GROUPS = "groups"
# model states published to a serving step apart from learning: a model directory of its own
# in the group layout, inside the run's (``published_dir``)
PUBLISHED = "published"
PART_KEY = b"unitless_group"
MODEL_KEY = "model_key"
PART = re.compile(r"part-([0-9]{12})-([0-9a-f]{1,64})\.arrow")
MANIFEST = re.compile(r"manifest-([0-9]{12})-([0-9a-f]{1,64})\.json")
MANIFEST_FORMAT = "unitless group manifest 1"
COMPACT_PARTS = 16  # parts a group's manifest may name before a write rewrites them as one


def group_key(model_key, groups):
    """The keyed step's key of a model key's group, of ``groups`` groups ("<group>/<groups>",
    the same in every process and run: CRC-32 of its UTF-8); 0 groups: the model key itself."""
    if not groups:
        return model_key
    return f"{zlib.crc32(model_key.encode('utf-8', 'surrogatepass')) % groups}/{groups}"


def group_keys(model_keys, groups):
    """``group_key`` of each model key of a string array (a list), computed together."""
    if not groups:
        return model_keys.to_pylist()
    return [f"{g}/{groups}" for g in group_numbers(model_keys, groups).tolist()]


def group_numbers(model_keys, groups):
    """The number (0 to ``groups`` - 1) of each model key's group of a string array (int64):
    ``group_key``'s CRC-32 over each key's UTF-8, in one compiled pass over the array's
    buffers (a null key counts as the empty one)."""
    keys = model_keys.fill_null("")
    if not pa.types.is_string(keys.type):
        keys = keys.cast(pa.large_string())
    _, offsets, data = keys.buffers()
    offsets = np.frombuffer(offsets, dtype=np.int32 if pa.types.is_string(keys.type)
                            else np.int64)[keys.offset:keys.offset + len(keys) + 1]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return _crc32(offsets, data) % groups


def _crc_table():
    table = np.arange(256, dtype=np.int64)
    for _ in range(8):
        table = np.where(table & 1, 0xEDB88320 ^ (table >> 1), table >> 1)
    return table


_CRC_TABLE = _crc_table()


@njit(cache=True)
def _crc32(offsets, data):
    """zlib's CRC-32 of each string data[offsets[i]:offsets[i + 1]] (int64)."""
    out = np.empty(offsets.shape[0] - 1, dtype=np.int64)
    for i in range(out.shape[0]):
        c = 0xFFFFFFFF
        for p in range(offsets[i], offsets[i + 1]):
            c = _CRC_TABLE[(c ^ data[p]) & 0xFF] ^ (c >> 8)
        out[i] = c ^ 0xFFFFFFFF
    return out


def groups_dir(model_dir, groups):
    return join(model_dir, GROUPS, str(int(groups)))


def group_dir(model_dir, groups, key):
    """The directory of the group of the keyed step's ``key`` (a ``group_key``)."""
    return join(groups_dir(model_dir, groups), key_dir_name(key))


def published_dir(model_dir):
    """Where a run serving apart from learning publishes its models' states: checkpoints in
    the group layout (``GroupWriter``), without the bookkeeping a resumed run needs."""
    return join(model_dir, PUBLISHED)


def group_counts(model_dir):
    """The numbers of model groups G that model_dir holds checkpoints in (sorted)."""
    return sorted(int(n) for n in list_dir(join(model_dir, GROUPS))[1] if n.isdigit())


def locator(part_path, index):
    """How the ``index``-th model of a part is named to people and to ``load_located``."""
    return f"{part_path}#{index}"


LOCATOR = re.compile(r"(.*\.arrow)#([0-9]+)")


def is_part(path):
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
    """[(first row, rows, metadata)] of a part's models, from its schema's metadata."""
    index = json.loads(metadata[PART_KEY])
    return [(int(m["first_row"]), int(m["rows"]), m["metadata"]) for m in index["models"]]


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


@_as_part
def _read_part(path):
    """(table, ``_part_index``) of a part, its table checked whole."""
    table = table_from_bytes(read_bytes(path))
    table.validate(full=True)
    return table, _part_index(table.schema.metadata)


_parts = _Kept(_read_part, 256 << 20, lambda found: found[0].nbytes)
# parts' ``_part_index`` read from their schemas alone (what readers of metadata need)
_indices = _Kept(_as_part(lambda path: _part_index(read_schema(path).metadata)), 4096)


def load_located(part_path, index, key=None, checksum=None, decode=True):
    """(table, LearnerState) of the ``index``-th model of a part: its table as its own
    checkpoint file held it, checked (``check_table``; not ``decode``d: its checksum only, and
    no state); ValueError unless it is valid, of model ``key`` when given, and, given the
    manifest's ``checksum``, the state the manifest names."""
    part, models = _parts.get(part_path)
    if not 0 <= index < len(models):
        raise ValueError(f"the part holds no model {index}")
    first_row, rows, meta = models[index]
    if not 0 <= first_row <= first_row + rows <= part.num_rows:
        raise ValueError(f"rows {first_row}-{first_row + rows} are not in the part")
    if key is not None and meta.get(MODEL_KEY) != key:
        raise ValueError(f"it holds model {meta.get(MODEL_KEY)!r}, not {key!r}")
    if checksum is not None and meta.get(CHECKSUM_FIELD) != checksum:
        raise ValueError("it is not the state its manifest names")
    table = part.slice(first_row, rows).drop_columns([MODEL_KEY]).replace_schema_metadata(
        {METADATA_KEY: json.dumps(meta).encode()})
    try:
        return table, check_table(table, decode)
    except (TypeError, KeyError, IndexError, OverflowError, pa.ArrowException) as err:
        raise ValueError(f"{type(err).__name__}: {one_line(err)}") from None


def part_metadata(part_path, index):
    """The metadata of a part's ``index``-th model as its schema holds it (unverified);
    ValueError unless it reads as a part holding one."""
    kept = _parts.get(part_path, read=False)
    models = kept[1] if kept is not None else _indices.get(part_path)
    if not 0 <= index < len(models):
        raise ValueError(f"the part holds no model {index}")
    return models[index][2]


def part_models(part_path):
    """[(n, model key, examples seen)] of the models a part holds, from its schema (unverified);
    ValueError unless it reads as a part."""
    return [(n, meta.get(MODEL_KEY), int(meta.get("examples_seen", 0)))
            for n, (_, _, meta) in enumerate(_indices.get(part_path))]


def part_rows(part_path, indices):
    """The rows of the part's ``indices``-th models, ``model_key`` column first (unverified)."""
    part, models = _parts.get(part_path)
    return pa.concat_tables([part.slice(models[i][0], models[i][1]) for i in indices]
                            ).replace_schema_metadata(None)


class GroupCheckpoints:
    """One group's checkpoints, as its directory was listed once: each model's newest entry
    and its older ones (the fallbacks), from the kept manifests."""

    def __init__(self, directory):
        self.directory = directory
        files = list_dir(directory)[0]
        # newest first (by seq, then token)
        self.names = sorted((n for n in files if MANIFEST.fullmatch(n)), reverse=True)
        self.parts = {n for n in files if PART.fullmatch(n)}
        self.seq = max((_seq(n) for n in self.names + list(self.parts)), default=0)
        self._manifests = {}  # name -> parsed manifest, or None if unreadable
        self._newest = None

    def manifest(self, name):
        if name not in self._manifests:
            self._manifests[name] = _read_manifest(join(self.directory, name))
        return self._manifests[name]

    def newest(self):
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
                if top is not None and _seq(name) != top:
                    break
                top = _seq(name)
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
                models = _indices.get(path)
            except (OSError, ValueError) as err:
                log.warning("ignoring part %s: %s", path, one_line(err))
                continue
            for index, (_, _, meta) in enumerate(models):
                try:
                    key, entry = meta[MODEL_KEY], (name, index, _summary(
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

    def entries(self, key):
        """The model's entries, the newest first, then those of older manifests (each state
        once)."""
        newest = self.newest().get(key)
        found = [] if newest is None else [newest]
        for name in self.names:
            entry = (self.manifest(name) or {}).get(key)
            if entry is not None and all(entry[:2] != f[:2] for f in found):
                found.append(entry)
        return found

    def load(self, key):
        """(locator, table, LearnerState) of the model's newest valid state here, or None (see
        ``load_entries``)."""
        return load_entries([(self.directory, entry) for entry in self.entries(key)], key)


def load_entries(entries, key, decode=True):
    """(locator, table, LearnerState) of the first valid of the model's entries, [(group
    directory, entry)], or None; each invalid one is skipped with a warning naming it and
    why (not ``decode``d: checked by its checksum only, no state)."""
    for directory, (part, index, meta) in entries:
        path = join(directory, part)
        try:
            table, state = load_located(path, index, key, meta.get(CHECKSUM_FIELD), decode)
        except FileNotFoundError:
            log.warning("ignoring checkpoint %s: its part is gone", locator(path, index))
            continue
        except ValueError as err:
            log.warning("ignoring checkpoint %s: %s", locator(path, index), err)
            continue
        return locator(path, index), table, state
    return None


def _seq(name):
    return int(name.split("-", 2)[1])


def examples_of(entry):
    return int(entry[2]["examples_seen"])


# a model's figures a manifest holds beside its part, index, examples and checksum (under
# "figures", which readers before it ignore): a run's summary reads them, not every model's part
FIGURES = ("progressive_loss", "errors", "loss")


def _summary(examples, checksum, figures=()):
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
        if manifest.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"not a manifest of format {MANIFEST_FORMAT!r}")
        found, parts, figures = {}, set(), manifest.get("figures") or {}
        for key, (part, index, examples, checksum) in manifest["models"].items():
            if part not in parts:
                if not PART.fullmatch(part):
                    raise ValueError(f"{part!r} is not a part's name")
                parts.add(part)
            held = figures.get(key)
            found[key] = (part, int(index), _summary(
                examples, checksum, held if isinstance(held, list) else ()))
        return found
    except FileNotFoundError:  # pruned since it was listed
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        log.warning("ignoring manifest %s: %s", path, one_line(err))
        return None


def group_checkpoints(model_dir):
    """[(G, GroupCheckpoints)] of every group directory under model_dir."""
    found = []
    for groups in group_counts(model_dir):
        root = groups_dir(model_dir, groups)
        found += [(groups, GroupCheckpoints(join(root, name))) for name in list_dir(root)[1]]
    return found


# --- writing -----------------------------------------------------------------------------------

class GroupWriter:
    """Writes the checkpoints of a worker's groups (``write``), and reads a group's models back
    (``load``) from what it last wrote or listed, so that a group's directory is listed once
    per write, not once per model."""

    KNOWN = 1024  # groups whose manifests it keeps (the least recently used are read again)

    def __init__(self, model_dir, groups, keep=3):
        self.model_dir, self.groups, self.keep = model_dir, groups, keep
        self.known = OrderedDict()  # group key -> GroupCheckpoints as of its last write or listing
        self.made = set()  # group directories it made (or found there)

    def group(self, key):
        """The checkpoints of the group of keyed-step key ``key``, as last listed or written."""
        found = self.known.get(key)
        if found is None:
            return self.listed(key)
        self._keep(key, found)
        return found

    def listed(self, key):
        """The checkpoints of the group of ``key`` as its directory holds them now."""
        found = GroupCheckpoints(group_dir(self.model_dir, self.groups, key))
        self._keep(key, found)
        return found

    def passed(self, key):
        """{(model key, partition)} where the newest checkpoint of a model of the group of
        ``key`` records that its restart position moved with the watermark (unverified:
        metadata from the parts' schemas)."""
        group = self.group(key)
        found = set()
        for model_key, (part, index, _) in group.newest().items():
            try:
                meta = part_metadata(join(group.directory, part), index)
            except (OSError, ValueError):
                continue
            found.update((model_key, source) for source in meta.get("watermark_passed") or ())
        return found

    def _keep(self, key, group):
        self.known[key] = group
        self.known.move_to_end(key)
        while len(self.known) > self.KNOWN:
            self.known.popitem(last=False)

    def write(self, checkpoints):
        """Write {group key: [(model key, TableRows, metadata)]} (a model's checkpoint rows and
        its metadata beside them, ``ModelGroup.checkpoints``; or ``taken`` of a table holding
        it): per group one part of those models, then one manifest naming them and the
        group's other models; all parts first, made durable together, then all manifests.
        Returns {model key: locator}. A model whose newest checkpoint holds more examples than
        the one given (a bundle retried after another took it further) keeps that one."""
        parts, manifests, written, pruned = [], [], {}, []
        every = iter(seal_many([model for models in checkpoints.values() for model in models]))
        for key, models in checkpoints.items():
            models = [next(every) for _ in models]  # (sealed all together: see seal_many)
            directory = group_dir(self.model_dir, self.groups, key)
            if directory not in self.made:
                makedirs(directory)
                self.made.add(directory)
            current = GroupCheckpoints(directory)  # (listed: another worker may have written)
            known = self.known.get(key)
            if known is not None and known.names[:1] == current.names[:1]:
                known.parts, known.seq = current.parts, current.seq
                current = known  # (no manifest since: what it read stays)
            entries = dict(current.newest())
            seq = current.seq + 1
            name = f"part-{seq:012d}-{unique_token()}.arrow"
            sealed = [model for model in models if model[0] not in entries
                      or examples_of(entries[model[0]]) <= model[2]["examples_seen"]]
            if len({e[0] for e in entries.values()} - {name}) > COMPACT_PARTS:
                sealed = self._compacted(directory, entries, sealed)
            if not sealed:
                continue
            data = _part_bytes(key, seq, sealed)
            for index, (model_key, _, meta, _) in enumerate(sealed):
                entries[model_key] = (name, index, _summary(
                    meta["examples_seen"], meta[CHECKSUM_FIELD],
                    [meta[field] for field in FIGURES if field in meta]))
                written[model_key] = locator(join(directory, name), index)
            parts.append((join(directory, name), data))
            current.parts.add(name)
            manifest = f"manifest-{seq:012d}-{unique_token()}.json"
            manifests.append((join(directory, manifest), _manifest_bytes(key, seq, entries)))
            current.names.insert(0, manifest)
            current.seq = seq
            current._manifests[manifest], current._newest = entries, entries
            self._keep(key, current)
            pruned.append(current)
        atomic_write_many(parts)
        atomic_write_many(manifests)
        for current in pruned:
            self._prune(current)
        return written

    def _compacted(self, directory, entries, sealed):
        """``sealed`` and every other model of the group, read back from their parts, to be
        written as one part (a group's manifest names at most COMPACT_PARTS parts)."""
        fresh = {model_key for model_key, *_ in sealed}
        for model_key, (part, index, meta) in sorted(entries.items()):
            if model_key in fresh:
                continue
            try:
                table, _ = load_located(join(directory, part), index, model_key,
                                        meta.get(CHECKSUM_FIELD))
            except (OSError, ValueError) as err:
                log.warning("model %r keeps its checkpoint in %s: %s", model_key, part, err)
                return sealed
            stored = table.schema.metadata[METADATA_KEY]
            sealed.append((model_key, TableRows.whole(table), json.loads(stored), stored))
        return sealed

    def _prune(self, group):
        """Keep the newest ``keep`` manifests and the parts they name; older parts not named
        go too (but none newer than the oldest kept manifest: a retried bundle may be writing
        one whose manifest is still to come)."""
        if self.keep <= 0 or len(group.names) <= self.keep:
            return
        kept, stale = group.names[:self.keep], group.names[self.keep:]
        named = {entry[0] for name in kept for entry in (group.manifest(name) or {}).values()}
        oldest = min(_seq(name) for name in kept)
        for name in stale:
            remove(join(group.directory, name))
            group._manifests.pop(name, None)
        group.names = kept
        for name in sorted(group.parts):
            if name not in named and _seq(name) < oldest:
                remove(join(group.directory, name))
                group.parts.discard(name)


def _part_bytes(group, seq, sealed):
    """The part holding the sealed models' rows, in their order (``seal_many``'s)."""
    counts = np.array([rows.count for _, rows, _, _ in sealed], dtype=np.int64)
    first_rows = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
    body = pa.concat_tables([_taken(run) for run in _runs(sealed)], promote_options="none")
    keys = pa.DictionaryArray.from_arrays(
        pa.array(np.repeat(np.arange(len(sealed), dtype=np.int32), counts)),
        pa.array([model_key for model_key, *_ in sealed], pa.string()))
    # (each model's metadata as sealed, not encoded again: ``_part_index`` reads the JSON)
    index = b",".join(b'{"first_row":%d,"rows":%d,"metadata":%s}' % (first, n, stored)
                      for first, n, (*_, stored) in zip(first_rows, counts.tolist(), sealed))
    head = json.dumps({"group": group, "seq": seq})[:-1].encode()
    part = body.add_column(0, MODEL_KEY, keys).replace_schema_metadata(
        {PART_KEY: head + b',"models":[' + index + b"]}"})
    return table_to_bytes(part)


def _runs(sealed):
    """The sealed models' TableRows in runs of one table each, in their order."""
    runs = []
    for _, rows, _, _ in sealed:
        if runs and runs[-1][0].table is rows.table:
            runs[-1].append(rows)
        else:
            runs.append([rows])
    return runs


def _taken(run):
    """One table of a run's rows (TableRows of one table), in its order."""
    if len(run) == 1:
        return bare_table(run[0].slice())
    firsts = np.array([rows.first for rows in run], dtype=np.int64)
    counts = np.array([rows.count for rows in run], dtype=np.int64)
    starts = np.cumsum(counts) - counts  # where each model's rows start in what is taken
    return bare_table(run[0].table.take(np.repeat(firsts - starts, counts)
                                        + np.arange(counts.sum())))


def taken(key, table):
    """(model key, TableRows, metadata) of a checkpoint table holding its metadata
    (``to_arrow``, ``KeyedModel.to_table``), as ``GroupWriter.write`` takes it."""
    return key, TableRows.whole(table), read_metadata(table)


def _manifest_bytes(group, seq, entries):
    """The manifest: each model's part, index in it, examples seen and checksum; and the
    FIGURES of those whose entries hold them."""
    entries = sorted(entries.items())
    models = {key: [part, index, meta["examples_seen"], meta[CHECKSUM_FIELD]]
              for key, (part, index, meta) in entries}
    figures = {key: [meta[field] for field in FIGURES] for key, (_, _, meta) in entries
               if FIGURES[0] in meta}  # (all of them: ``_summary``)
    return json.dumps({"format": MANIFEST_FORMAT, "group": group, "seq": seq,
                       "models": models, "figures": figures}, separators=(",", ":")).encode()
