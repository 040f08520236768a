"""Parsed examples travel between pipeline stages as ExampleBlocks: columnar, one source each."""
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Optional, Sequence, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..learner import Batch, make_batch
from ..learner.names import FeatureNames, merged_names
from ..schemas import DEAD_LETTER_SCHEMA


def own_rows(array: pa.Array) -> pa.Array:
    """A copy of an Arrow array (a slice) holding its own rows only: pickled, a slice carries
    every buffer of the array it was cut from (a block's whole file, a release's every round)."""
    return pa.concat_arrays([array])


@dataclass
class ExampleBlock:
    source: str             # file path or topic/partition
    positions: np.ndarray   # int64: line number (text), row number (Parquet) or offset (Kafka)
    ids: pa.Array           # string: example ids (null where none)
    keys: pa.Array          # string: model keys
    labels: np.ndarray      # float64
    weights: np.ndarray     # float64
    indptr: Optional[np.ndarray]  # int64, CSR over hashed feature indices
    indices: np.ndarray
    values: np.ndarray
    names: FeatureNames = field(default_factory=FeatureNames)  # index -> name, where known
    raw: Any = None         # raw record per example (indexable), kept at the source only
    # float seconds since the epoch, where the source has them
    event_times: Optional[np.ndarray] = None
    blank_lines: int = 0    # blank lines the reader skipped in this block's chunk of a file
    # a resumed run restarts the source at the earliest position its models' checkpoints
    # record (a Kafka partition), not at its start (a file, read again whole)
    restarts_midway: bool = False
    # (first, last) positions of the source read whole into this block (a Kafka partition's
    # offsets, or a file's lines or rows): every example of its model keys in that range is in
    # it or was refused, so a model that learns it has learned all of its own there (first -1:
    # from where this run started reading, a Kafka partition's first block in the run). Kept by
    # ``split_by_key``, ``screen`` and ``concat`` (of blocks whose spans tile), cut by
    # ``parts``; None from any other subset, and where the reader sets none
    span: Optional[tuple] = None
    # [n, K]: the scores each example was served with by a serving step apart from learning
    # (NaN rows: not served there), carried to the learning step (``pipelines/serve.py``)
    served_scores: Optional[np.ndarray] = None

    def __len__(self):
        return len(self.labels)

    def __getstate__(self):
        """The block as pickled (Beam's coders, blocks waiting in state): ``compact``."""
        return dict(self.compact().__dict__)

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.indptr is None:  # (compact)
            full = self.full()
            self.indptr, self.indices = full.indptr, full.indices

    def compact(self) -> "ExampleBlock":
        """The block with the features every example carries once, where every example
        carries the same ones in the same order (a CSV's numeric columns, none missing):
        ``indptr`` None and ``indices`` that one row, 45% fewer bytes; else the block itself.
        Blocks take that form where they are pickled, where ``KeyByModel`` holds them and in
        the pieces ``by_key`` hands on from such blocks; ``batch``, ``take``, ``concat`` and
        ``raw_record`` see the full one."""
        n, indptr = len(self.labels), self.indptr
        if n < 2 or indptr is None or indptr[0] != 0:
            return self
        k = int(indptr[1])
        if not (np.diff(indptr) == k).all():
            return self
        rows = self.indices.reshape(n, k)
        if not (rows == rows[:1]).all():
            return self
        return replace(self, indptr=None, indices=rows[0].copy())

    def full(self) -> "ExampleBlock":
        """The block with its features' indices once per example (itself unless compact)."""
        if self.indptr is not None:
            return self
        n, row = len(self.labels), self.indices
        return replace(self, indptr=np.arange(n + 1, dtype=np.int64) * len(row),
                       indices=np.tile(row, n))

    @property
    def nbytes(self) -> int:
        """Bytes of the block's columns (not of its raw records or names)."""
        arrays = (self.positions, self.labels, self.weights, self.indptr, self.indices,
                  self.values, self.event_times, self.served_scores)
        return (sum(a.nbytes for a in arrays if a is not None) + self.ids.nbytes
                + self.keys.nbytes)

    @property
    def served(self) -> np.ndarray:
        """Which examples have no label (NaN: the readers give it only for an absent or null
        one, and refuse a written NaN): to serve, or score, not to learn."""
        return np.isnan(self.labels)

    def batch(self) -> Batch:
        full = self.full()
        assert full.indptr is not None
        return make_batch(full.indptr, full.indices, full.values, full.labels, full.weights)

    def take(self, rows: np.ndarray | Sequence[int]) -> "ExampleBlock":
        """The examples at positions ``rows`` (in that order) as a new block (without the raw
        records, which stay at the source); every row in order gives a block whose features
        are the block's own arrays (blocks are not changed in place)."""
        rows = np.asarray(rows, dtype=np.int64)
        full = self.full()  # (rows first, then ``make_batch``: in time of the rows, not the block)
        assert full.indptr is not None
        b = Batch(full.indptr, full.indices, full.values, full.labels, full.weights)
        if len(rows) != len(self) or (rows != np.arange(len(rows))).any():
            b = b.take(rows)
        b = make_batch(b.indptr, b.indices, b.values, b.labels, b.weights)
        return ExampleBlock(self.source, self.positions[rows], self.ids.take(rows),
                            self.keys.take(rows), b.labels, b.weights, b.indptr, b.indices,
                            b.values, self.names, None,
                            self.event_times[rows] if self.event_times is not None else None,
                            restarts_midway=self.restarts_midway,
                            served_scores=_rows(self.served_scores, rows))

    def first_positions(self) -> tuple[list[str], np.ndarray]:
        """(model keys, int64 array): each model key the block holds and the position of its
        first example (the least)."""
        encoded = self.keys.dictionary_encode()
        first = np.full(len(encoded.dictionary), np.iinfo(np.int64).max)
        np.minimum.at(first, encoded.indices.to_numpy(zero_copy_only=False), self.positions)
        return encoded.dictionary.to_pylist(), first

    def split_by_key(self, group: Optional[Callable[[pa.Array], list]] = None
                     ) -> list[tuple[str, "ExampleBlock"]]:
        """(key, block) for each model key present, examples in their original order (with
        ``group``, for each group of them: see ``by_key``)."""
        return ExampleBlock.by_key([self], group)

    @staticmethod
    def by_key(blocks: list["ExampleBlock"],
               group: Optional[Callable[[pa.Array], list]] = None
               ) -> list[tuple[str, "ExampleBlock"]]:
        """(key, block) for each model key in ``blocks`` (all of one source), each key's
        examples in position order (where positions do not order them, as the blocks hold
        them), without raw records; each keeps the blocks' span where their spans tile (all
        of the key's examples there are in it). Compact (``compact``) where every block is
        compact with the same row of features, else full; a single block of a single key is
        itself. With ``group`` (a string array of model keys -> the names of their groups, a
        list), (name, block) for each group instead: the examples of all of its model keys, in
        position order.

        One gather of all examples into the keys' order, of which each key's block is a slice
        (split one block at a time, many keys cut the examples into as many pieces), written
        block by block into place: ``blocks`` is emptied as they are, so that a block's memory
        can go as soon as it is copied, rather than all of them being held beside a
        concatenated copy and then a sorted one."""
        every_key = pa.concat_arrays([b.keys for b in blocks])
        keys, codes = _key_codes(every_key, group)
        if len(keys) <= 1 and len(blocks) == 1:
            return [(keys[0] if keys else "", blocks.pop())]
        positions = np.concatenate([b.positions for b in blocks])
        by_position = np.arange(len(positions))
        if (np.diff(positions) < 0).any():
            by_position = np.argsort(positions, kind="stable")
        order = by_position[np.argsort(codes[by_position], kind="stable")]
        lengths = np.concatenate([np.diff(b.indptr) if b.indptr is not None
                                  else np.full(len(b), len(b.indices)) for b in blocks])
        where = np.empty(len(order), dtype=np.int64)  # the new row of each example
        where[order] = np.arange(len(order))
        uniform = len(lengths) and lengths[0] > 0 and (lengths == lengths[0]).all()
        shared = uniform and all(b.indptr is None and np.array_equal(b.indices, blocks[0].indices)
                                 for b in blocks)  # (compact, one row of features for all)
        if shared:
            indptr, indices = None, blocks[0].indices.copy()
        else:
            indptr = np.zeros(len(order) + 1, dtype=np.int64)
            np.cumsum(lengths[order], out=indptr[1:])
            indices = np.empty(indptr[-1], dtype=np.int64)
        times = [b.event_times for b in blocks]
        grouped = ExampleBlock(
            blocks[0].source, positions[order], pa.concat_arrays([b.ids for b in blocks]).take(
                order), every_key.take(order),
            np.concatenate([b.labels for b in blocks])[order],
            np.concatenate([b.weights for b in blocks])[order], indptr, indices,
            np.empty(int(lengths.sum())), merged_names(b.names for b in blocks),
            None, _rows(_concatenated(times), order),
            restarts_midway=blocks[0].restarts_midway,
            served_scores=_rows(_concatenated([b.served_scores for b in blocks]), order))
        span = _tiled([b.span for b in blocks])
        _copy_into(grouped, blocks, where, int(lengths[0]) if uniform else None, shared,
                   len(keys) > 1024)
        bounds = np.searchsorted(codes[order], np.arange(len(keys) + 1))
        pieces = [(keys[k], grouped.slice(bounds[k], bounds[k + 1])) for k in range(len(keys))
                  if bounds[k + 1] > bounds[k]]
        for _, piece in pieces:
            piece.span = span
        return pieces

    def parts(self, size: int) -> list["ExampleBlock"]:
        """The block in consecutive parts of up to ``size`` examples (itself if it is no
        larger); a span is cut between them, each part's ending at its last example (the last
        part's where the block's does)."""
        if len(self) <= size:
            return [self]
        parts = [self.slice(a, min(a + size, len(self))) for a in range(0, len(self), size)]
        if self.span is not None:
            first = self.span[0]
            for part in parts:
                part.span = (first, int(part.positions[-1]))
                first = part.span[1] + 1
            parts[-1].span = (cast(tuple, parts[-1].span)[0], self.span[1])
        return parts

    def slice(self, start: int, stop: int) -> "ExampleBlock":
        """Examples start..stop-1 as a new block (without the raw records): numpy views, and
        Arrow arrays of their own (a pickled Arrow slice would carry its parent's buffers);
        compact if the block is."""
        if self.indptr is None:  # (compact: every example has the row ``indices``)
            indptr, indices = None, self.indices
            a, b = start * len(indices), stop * len(indices)
        else:
            a, b = self.indptr[start], self.indptr[stop]
            indptr, indices = self.indptr[start:stop + 1] - a, self.indices[a:b]
        return ExampleBlock(self.source, self.positions[start:stop],
                            own_rows(self.ids.slice(start, stop - start)),
                            own_rows(self.keys.slice(start, stop - start)),
                            self.labels[start:stop], self.weights[start:stop], indptr,
                            indices, self.values[a:b], self.names, None,
                            self.event_times[start:stop] if self.event_times is not None
                            else None, restarts_midway=self.restarts_midway,
                            served_scores=_rows(self.served_scores, slice(start, stop)))

    @staticmethod
    def concat(blocks: Sequence["ExampleBlock"]) -> "ExampleBlock":
        """One block of the examples of ``blocks`` (all of one source), in position order,
        without raw records."""
        if len(blocks) == 1:
            return blocks[0]
        block = ExampleBlock.stacked(blocks)
        if (np.diff(block.positions) < 0).any():
            block = block.take(np.argsort(block.positions, kind="stable"))
        block.span = _tiled([b.span for b in blocks])
        return block

    @staticmethod
    def stacked(blocks: Sequence["ExampleBlock"]) -> "ExampleBlock":
        """One block of the examples of ``blocks`` one after the other, in the order given,
        without raw records; its source the first's."""
        blocks = [b.full() for b in blocks]
        lengths = np.concatenate([np.diff(cast(np.ndarray, b.indptr)) for b in blocks])
        indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        return ExampleBlock(
            blocks[0].source, np.concatenate([b.positions for b in blocks]),
            pa.concat_arrays([b.ids for b in blocks]), pa.concat_arrays([b.keys for b in blocks]),
            np.concatenate([b.labels for b in blocks]),
            np.concatenate([b.weights for b in blocks]), indptr,
            np.concatenate([b.indices for b in blocks]), np.concatenate([b.values for b in blocks]),
            merged_names(b.names for b in blocks), None,
            _concatenated([b.event_times for b in blocks]),
            restarts_midway=blocks[0].restarts_midway,
            served_scores=_concatenated([b.served_scores for b in blocks]))

    def screen(self, problems: Sequence[tuple[int, str]]
               ) -> tuple["ExampleBlock", list["DeadLetter"]]:
        """Drop the rows named in ``problems`` [(row, reason)]: (remaining block, dead letters
        carrying each dropped row's raw record)."""
        if not problems:
            return self, []
        dead = [DeadLetter(self.source, int(self.positions[r]), self.raw_record(r), reason)
                for r, reason in problems]
        kept = self.take(np.setdiff1d(np.arange(len(self)), [r for r, _ in problems]))
        kept.blank_lines, kept.span = self.blank_lines, self.span
        return kept, dead

    def raw_record(self, r: int) -> str | bytes:
        """Row r's record as read (text or bytes), or (once the source has dropped it) its
        parsed values."""
        raw = self.raw[r] if self.raw is not None else None
        if raw is None:
            row = self.slice(r, r + 1).full()  # (not the whole block made full per row)
            label = float(self.labels[r])
            return json.dumps({"id": self.ids[r].as_py(), "model_key": self.keys[r].as_py(),
                               "label": None if math.isnan(label) else label, "features": {
                                   str(i): float(v) for i, v in zip(row.indices, row.values)}})
        return raw


def _key_codes(keys, group=None):
    """(the distinct model keys of a string array, or with ``group`` the names of their groups,
    sorted; each element's index among them)."""
    encoded = keys.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    if group is None:
        return encoded.dictionary.to_pylist(), codes
    names = group(encoded.dictionary)
    distinct = sorted(set(names))
    index = {name: k for k, name in enumerate(distinct)}
    return distinct, np.array([index[name] for name in names], dtype=np.int64)[codes]


def _copy_into(grouped, blocks, where, row_length, shared, many_keys):
    """Write each of ``blocks``' examples' features into ``grouped`` at its new row (``where``),
    emptying ``blocks`` as they are copied (``ExampleBlock.by_key``). ``row_length``: every row
    holds that many entries (None: not so); ``shared``: they hold the same features, which
    ``grouped.indices`` holds once; ``many_keys``: rows are written in order (else the writes
    scatter over as many places as keys, a cache miss each)."""
    first = 0
    while blocks:
        b = blocks.pop(0)
        n, a = len(b), (b.indptr[0] if b.indptr is not None else 0)
        rows = where[first:first + n]
        if row_length is not None:  # (whole rows of 2-D views: no index per entry)
            k = row_length
            source = slice(None)
            if many_keys:
                source = np.argsort(rows)
                rows = rows[source]
            if not shared:
                grouped.indices.reshape(-1, k)[rows] = (
                    b.indices[a:a + n * k].reshape(n, k) if b.indptr is not None
                    else np.broadcast_to(b.indices, (n, k)))[source]
            grouped.values.reshape(-1, k)[rows] = b.values[a:a + n * k].reshape(n, k)[source]
        else:  # entry e of row r goes to the row's new start + (e - the row's old start)
            b = b.full()
            to = (np.repeat(grouped.indptr[rows] - (b.indptr[:-1] - a), np.diff(b.indptr))
                  + np.arange(b.indptr[-1] - a))
            grouped.indices[to] = b.indices[a:b.indptr[-1]]
            grouped.values[to] = b.values[a:b.indptr[-1]]
        first += n
        del b


def _rows(array, rows):
    """``array[rows]``, or None for None (a column a block may not have)."""
    return None if array is None else array[rows]


def _concatenated(arrays):
    """The arrays one after the other, or None unless every one is there."""
    return None if any(a is None for a in arrays) else np.concatenate(arrays)


def _tiled(spans):
    """The span of blocks whose spans tile (each starting right after another ends), else
    None."""
    if not spans or any(span is None for span in spans):
        return None
    spans = sorted(spans)
    if all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:])):
        return spans[0][0], spans[-1][1]
    return None


class TextLines:
    """The lines of a text buffer as bytes, split only when one is asked for (raw records of a
    chunk parsed as a whole; most chunks never need them)."""

    def __init__(self, data: bytes, first: int = 0) -> None:
        self.data, self.first, self._lines = data, first, None  # item i is line first + i

    def __getitem__(self, i):
        if self._lines is None:
            self._lines = self.data.split(b"\n")
        return self._lines[self.first + i].rstrip(b"\r")


def string_array(values: Iterable[Optional[str]]) -> pa.Array:
    return pa.array(values, pa.string())


def empty_as_null(ids: pa.Array) -> pa.Array:
    """Ids (a string array) with the empty ones null: an empty id is no id, whichever path
    read it (Arrow's CSV reader makes an empty field null, the per-record parsers
    ``rows.Builder.add`` do the same, and a CSV value of spaces is empty once stripped)."""
    empty = pc.equal(ids, "")
    if not pc.any(empty).as_py():
        return ids
    return pc.if_else(empty, pa.scalar(None, pa.string()), ids)


def arrow_buffer(data: bytes) -> pa.Buffer:
    """A copy of ``data`` (bytes) in Arrow's own memory, for Arrow to read: Arrow here reads
    only its own memory and files, never Python's bytes or file objects.

    An Arrow buffer over Python memory must take the GIL to let it go, and Arrow may drop it on
    one of its own threads: it reads a Python file object on its I/O threads (the IPC file
    reader does). If the interpreter is exiting by then, Python ends that thread inside C++ and
    the process aborts, "terminate called without an active exception" (SIGABRT; a core dump
    of one CI run showed exactly that, from the end-of-run summary's schema reads;
    apache/arrow#34314).
    """
    out = pa.allocate_buffer(len(data))
    np.frombuffer(out, dtype=np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
    return out


MAX_QUOTED = 60    # characters of a record's value quoted in a reason
MAX_REASON = 500   # characters of a reason


def clip(text: str, limit: int) -> str:
    """text cut to ``limit`` characters, with '…' where it was cut."""
    return text if len(text) <= limit else text[:limit] + "…"


def quoted(value: object) -> str:
    """A value from a record as a reason quotes it: its repr, cut to MAX_QUOTED characters
    (records are untrusted: a value may be megabytes long)."""
    if isinstance(value, (str, bytes)):
        return clip(repr(value[:MAX_QUOTED + 1]), MAX_QUOTED)
    try:
        return clip(repr(value), MAX_QUOTED)
    except Exception:  # e.g. an integer too long for repr
        return f"<{type(value).__name__}>"


@dataclass
class DeadLetter:
    source: str
    position: int
    raw: object  # the record exactly as read: bytes (None: a Kafka message without a value),
    reason: str  # or text (a Parquet row as JSON); the reason is cut to MAX_REASON characters

    def __post_init__(self):
        self.reason = clip(str(self.reason), MAX_REASON)

    def to_dict(self) -> dict[str, object]:
        raw = self.raw.encode("utf-8") if isinstance(self.raw, str) else self.raw
        return {"source": self.source, "position": self.position, "raw": raw,
                "reason": self.reason}




def dead_letter_table(dead: Iterable[DeadLetter]) -> pa.Table:
    return pa.Table.from_pylist([d.to_dict() for d in dead], schema=DEAD_LETTER_SCHEMA)
