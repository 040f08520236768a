"""Writing a model group's checkpoints: parts of many models' states and the manifests that name
them, sealed together, compacted once a group has many parts, the oldest pruned
(docs/compatibility.md, "The group layout, file by file")."""

import json
import logging
from collections import OrderedDict
from typing import Any, Dict, Mapping, Sequence, Set, Tuple

import numpy as np
import pyarrow as pa

from ..connectors.storage import atomic_write_many, join, makedirs, remove, unique_token
from ..learner import read_metadata
from ..learner.arrow_form import TableRows
from . import part_format
from .by_group import (FIGURES, MANIFEST_FORMAT, MODEL_KEY, GroupCheckpoints,
                       entry_summary, examples_of, load_located, locator, part_metadata,
                       sequence_of)
from .checkpoint_file import CHECKSUM_FIELD, bare_table, keyed_metadata, table_to_bytes
from .groups import group_dir

log = logging.getLogger("unitless")
COMPACT_PARTS = 16  # parts a group's manifest may name before a write rewrites them as one


class GroupWriter:
    """Writes the checkpoints of a worker's groups (``write``), and reads a group's models back
    (``load``) from what it last wrote or listed, so that a group's directory is listed once
    per write, not once per model."""

    KNOWN = 1024  # groups whose manifests it keeps (the least recently used are read again)

    def __init__(self, model_dir: str, groups: int, keep: int = 3) -> None:
        self.model_dir, self.groups, self.keep = model_dir, groups, keep
        # group key -> GroupCheckpoints as of its last write or listing
        self.known: OrderedDict[str, GroupCheckpoints] = OrderedDict()
        self.made: Set[str] = set()  # group directories it made (or found there)

    def group(self, key: str) -> GroupCheckpoints:
        """The checkpoints of the group of keyed-step key ``key``, as last listed or written."""
        found = self.known.get(key)
        if found is None:
            return self.listed(key)
        self._keep(key, found)
        return found

    def listed(self, key: str) -> GroupCheckpoints:
        """The checkpoints of the group of ``key`` as its directory holds them now."""
        found = GroupCheckpoints(group_dir(self.model_dir, self.groups, key))
        self._keep(key, found)
        return found

    def passed(self, key: str) -> Set[Tuple[str, str]]:
        """{(model key, partition)} where the newest checkpoint of a model of the group of
        ``key`` records that its restart position moved with the watermark (unverified:
        metadata from the parts' schemas)."""
        group = self.group(key)
        found: Set[Tuple[str, str]] = set()
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

    def write(self, checkpoints: Mapping[str, Sequence[tuple]]) -> Dict[str, str]:
        """Write {group key: [(model key, TableRows, metadata)]} (a model's checkpoint rows and
        its metadata beside them, ``ModelGroup.checkpoints``; or ``taken`` of a table holding
        it): per group one part of those models, then one manifest naming them and the
        group's other models; all parts first, made durable together, then all manifests.
        Returns {model key: locator}. A model whose newest checkpoint holds more examples than
        the one given (a bundle retried after another took it further) keeps that one."""
        parts, manifests, written, pruned = [], [], {}, []
        for key, models in checkpoints.items():
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
            kept = [model for model in models if model[0] not in entries
                    or examples_of(entries[model[0]]) <= model[2]["examples_seen"]]
            if len({e[0] for e in entries.values()} - {name}) > COMPACT_PARTS:
                kept = self._compacted(directory, entries, kept)
            if not kept:
                continue
            data, digest = _part_bytes(key, seq, kept)
            for index, (model_key, _, meta) in enumerate(kept):
                entries[model_key] = (name, index, entry_summary(
                    meta["examples_seen"], f"{digest}#{index}",
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

    def _compacted(self, directory, entries, kept):
        """``kept`` and every other model of the group, read back from their parts, to be
        written as one part (a group's manifest names at most COMPACT_PARTS parts): each
        copied as its checksum vouches for it, its learner not decoded."""
        fresh = {model_key for model_key, *_ in kept}
        for model_key, (part, index, meta) in sorted(entries.items()):
            if model_key in fresh:
                continue
            try:
                table, _ = load_located(join(directory, part), index, model_key,
                                        meta.get(CHECKSUM_FIELD), decode=False)
            except (OSError, ValueError) as err:
                log.warning("model %r keeps its checkpoint in %s: %s", model_key, part, err)
                return kept
            kept.append(taken(model_key, table))
        return kept

    def _prune(self, group):
        """Keep the newest ``keep`` manifests and the parts they name; older parts not named
        go too (but none newer than the oldest kept manifest: a retried bundle may be writing
        one whose manifest is still to come)."""
        if self.keep <= 0 or len(group.names) <= self.keep:
            return
        kept, stale = group.names[:self.keep], group.names[self.keep:]
        named = {entry[0] for name in kept for entry in (group.manifest(name) or {}).values()}
        oldest = min(sequence_of(name) for name in kept)
        for name in stale:
            remove(join(group.directory, name))
            group._manifests.pop(name, None)
        group.names = kept
        for name in sorted(group.parts):
            if name not in named and sequence_of(name) < oldest:
                remove(join(group.directory, name))
                group.parts.discard(name)


def _part_bytes(group, seq, models):
    """(the part holding the models' rows, in their order, its checksum) of [(model key,
    TableRows, metadata)], in part format 2 (``part_format``)."""
    metas = [keyed_metadata(key, meta) for key, _, meta in models]
    counts = np.array([rows.count for _, rows, _ in models], dtype=np.int64)
    body = pa.concat_tables([_taken(run) for run in _runs(models)], promote_options="none")
    keys = pa.DictionaryArray.from_arrays(
        pa.array(np.repeat(np.arange(len(models), dtype=np.int32), counts)),
        pa.array([model_key for model_key, *_ in models], pa.string()))
    body = body.add_column(0, MODEL_KEY, keys)
    metadata, digest = part_format.encode(group, seq, metas, counts, body)
    return table_to_bytes(body.replace_schema_metadata(metadata)), digest


def _runs(models):
    """The models' TableRows in runs of one table each, in their order."""
    runs = []
    for _, rows, _ in models:
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


def taken(key: str, table: pa.Table) -> Tuple[str, TableRows, Dict[str, Any]]:
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
               if FIGURES[0] in meta}  # (all of them: ``entry_summary``)
    return json.dumps({"format": MANIFEST_FORMAT, "group": group, "seq": seq,
                       "models": models, "figures": figures}, separators=(",", ":")).encode()
