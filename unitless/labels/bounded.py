"""A bounded input's labels join, whole, at the input's end (``LabelJoin.in_time_order``):
every features file's served examples and every labels file's records, judged example id by
example id on record time (``labels.by_id``) in array operations, and the join's state left
as the streaming join would have it at the end of the input (docs/delayed-outcomes.md)."""
import math
from typing import TYPE_CHECKING, Any, Iterator, Optional, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..parse.records import DeadLetter, ExampleBlock
from . import by_id, resume
from .reasons import LATE_LABEL, NEVER_SERVED, SECOND_LABEL
from .waiting import FEATURES, LABELS, FeaturesInput, Released, ToLearn

if TYPE_CHECKING:
    from .join import LabelJoin


class _Waiting:
    """``joined_in_time_order``'s served examples that wait: ``rows`` of one block (None:
    none), with the scores each was served with and the index of its features source; its
    columns are those rows' (``take`` makes a block of some of them)."""

    def __init__(self, block=None, rows=(), scores=None, sources=None):
        self.block, self.rows = block, np.asarray(rows, np.int64)
        self.scores, self.sources = scores, sources
        if block is None:
            self.keys = self.ids = pa.array([], pa.string())
            self.times, self.positions = np.zeros(0), np.zeros(0, np.int64)
            self.sources = np.zeros(0, np.int64)
        else:
            self.keys, self.ids = block.keys.take(self.rows), block.ids.take(self.rows)
            self.times, self.positions = block.event_times[self.rows], block.positions[self.rows]
            self.batch = block.batch()
            self.lengths = np.diff(self.batch.indptr)

    def take(self, rows):
        """(a block of the examples at ``rows``, in that order; the scores they were served
        with), in time proportional to their number (``ExampleBlock.take`` makes the whole
        block's batch first: once per run of examples learned, that grew as runs times the
        input)."""
        at = self.rows[rows]
        b, block = self.batch.take(at, self.lengths), self.block
        return ExampleBlock(block.source, block.positions[at], block.ids.take(at),
                            block.keys.take(at), b.labels, b.weights, b.indptr, b.indices,
                            b.values, block.names, None, block.event_times[at]), self.scores[at]


class _Labels:
    """``joined_in_time_order``'s labels taken [(block, read again)], as one block."""

    def __init__(self, taken):
        self.blocks = [b for b, _ in taken if len(b)]
        self.again = np.array([a for b, again in taken if len(b) for a in again], dtype=bool)
        self.sources = np.repeat(np.arange(len(self.blocks)), [len(b) for b in self.blocks])
        self.source_names = [b.source for b in self.blocks]
        self.starts = np.cumsum([0] + [len(b) for b in self.blocks])
        self.block = ExampleBlock.stacked(self.blocks) if self.blocks else _no_labels()
        self.times = (self.block.event_times if self.block.event_times is not None
                      else np.full(len(self.block), math.inf))

    def in_order(self):
        """The labels not read again, in the order the join takes them: time, file, line."""
        rows = np.flatnonzero(~self.again)
        return rows[np.lexsort((self.block.positions[rows], self.sources[rows],
                                self.times[rows]))]

    def dead(self, n, reason):
        j = int(self.sources[n])
        block, row = self.blocks[j], n - int(self.starts[j])
        return DeadLetter(block.source, int(block.positions[row]), block.raw_record(row), reason)


def _max_by(keys, sources, positions):
    """[(key code, source index, the greatest position)] of each (key, source) present."""
    width = int(sources.max()) + 1 if len(sources) else 1
    unique, inverse = np.unique(np.asarray(keys, np.int64) * width + sources,
                                return_inverse=True)
    greatest = np.full(len(unique), -1, np.int64)
    np.maximum.at(greatest, inverse, positions)
    return list(zip((unique // width).tolist(), (unique % width).tolist(), greatest.tolist()))


def _no_labels():
    return ExampleBlock("", np.zeros(0, np.int64), pa.array([], pa.string()),
                        pa.array([], pa.string()), np.zeros(0), np.zeros(0),
                        np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))


_REASONS = {by_id.NEVER: NEVER_SERVED, by_id.SECOND: SECOND_LABEL, by_id.LATE: LATE_LABEL}


def joined_in_time_order(join: "LabelJoin", features: list[FeaturesInput],
                         labels: list[ExampleBlock], now: Optional[float] = None
                         ) -> tuple[Iterator[ToLearn], list[DeadLetter]]:
    """``join``'s bounded input, whole (``LabelJoin.in_time_order``): every features source's
    records, ``features`` [(source, positions, model keys, record times, served)] as
    ``LabelJoin.features`` takes them, and every labels block, judged example id by example id
    on record time (``labels.by_id``), whatever the order of the records in their files. Returns
    ``Released.result``, each block made as it is taken: each model's examples to learn in
    record-time order (a label's time; an expired example's expiry, after the labels of
    that time), in runs of one labels file or of one features file's expired examples.
    Called once, at the input's end, whose state is cleared once learned: not logged."""
    if join.ordered_once:
        raise RuntimeError("the labels join of a bounded input took its records in two "
                           "parts: it joins them in time order only when it has them all")
    join.ordered_once = True
    out = Released()
    waiting = _waiting_in_order(join, features)
    taken = _Labels([join._labels_taken(block, now, out) for block in labels])
    join.counts["replayed"] += int(taken.again.sum())
    closed = [(k, *j.closed.arrays()[:2]) for k, j in join.models.items()]
    codes = by_id.group_codes(
        pa.concat_arrays([waiting.keys, taken.block.keys, *(
            pa.repeat(pa.scalar(k, pa.string()), len(i)) for k, i, _ in closed)]),
        pa.concat_arrays([waiting.ids, taken.block.ids, *(i for _, i, _ in closed)]))
    nf, nl = len(waiting.keys), len(taken.block)
    order = taken.in_order()
    outcome, joins, joined = by_id.judge(
        codes[:nf], waiting.times, codes[nf:nf + nl][order], taken.times[order],
        cast(float, join.wait),  # (in time order: files with a wait)
        codes[nf + nl:], np.concatenate([np.zeros(0, bool), *(e for _, _, e in closed)]))
    for n in np.flatnonzero(outcome != by_id.JOIN).tolist():
        out.dead.append(taken.dead(int(order[n]), _REASONS[int(outcome[n])]))
    settled = _settle(join, features, waiting, taken, order[outcome == by_id.JOIN],
                      joins[outcome == by_id.JOIN], joined)
    return _learning(join, waiting, taken, settled, [f[0] for f in features]), out.dead


def _waiting_in_order(join, features):
    """``joined_in_time_order``'s served examples with an id (``_Waiting``), in the order
    it takes them (time, file, line), the first of each model key and id only; ``features``'
    lists of them are emptied (one copy of them is enough)."""
    blocks, scores, sources = [], [], []
    for j, (source, _, _, _, served) in enumerate(features):
        for key, block, served_scores in served:
            owed = join._resumed(key)
            owed = owed.waiting.get(source) if owed is not None else None
            if owed:  # (come again: it waits as it did)
                owed.difference_update(block.positions.tolist())
            blocks.append(block)
            scores.append(served_scores)
            sources.append(np.full(len(block), j))
    if not blocks:
        return _Waiting()
    block = ExampleBlock.stacked(blocks)
    for *_, served in features:  # (stacked: the join holds its served examples once)
        served.clear()
    del blocks
    sources = np.concatenate(sources)
    rows = np.flatnonzero(block.ids.is_valid().to_numpy(zero_copy_only=False))
    rows = rows[np.lexsort((block.positions[rows], sources[rows], block.event_times[rows]))]
    rows = rows[by_id.first_of_each(by_id.group_codes(block.keys.take(rows),
                                                      block.ids.take(rows)))]
    return _Waiting(block, rows, np.concatenate(scores), sources[rows])


def _settle(join, features, waiting, taken, joining, joins, joined):
    """What the judgement leaves in each model's join, as the streaming join would have it
    at the end of the input: its labels judged, the ids it closed (all of them: a stream
    forgets those twice the wait behind both of its clocks) and its clocks;
    the examples never joined expire at their time + wait, learned with the expired label,
    or else owed their label (``unlabeled``) where no label of their model came after that.
    Counts what it did.
    Returns the examples to learn, columns (model key code, time, after the labels of that
    time, file, line, labels row or -1, waiting row), and the model keys."""
    features_keys = [pa.array(k, pa.string()) for _, _, k, _, _ in features]
    keys = pc.dictionary_encode(pa.concat_arrays(
        [waiting.keys, taken.block.keys, *features_keys]))
    names = keys.dictionary.to_pylist()
    codes = keys.indices.to_numpy(zero_copy_only=False)
    nw, nl = len(waiting.keys), len(taken.block)
    w_key, l_key, f_key = codes[:nw], codes[nw:nw + nl], codes[nw + nl:]
    clocks = np.full((len(names), 2), -math.inf)
    if len(f_key):
        np.maximum.at(clocks[:, FEATURES], f_key, np.concatenate(
            [np.asarray(t, np.float64) for _, _, _, t, _ in features]))
    np.maximum.at(clocks[:, LABELS], l_key, taken.times)
    judged = ~taken.again
    for code, source, position in _max_by(l_key[judged], taken.sources[judged],
                                          taken.block.positions[judged]):
        model, name = join._of(names[code]), taken.source_names[source]
        model.judged[name] = max(position, model.judged.get(name, -1))

    f_times, ids = waiting.times, waiting.ids
    _close_all(join, names, w_key[joins], ids.take(joins), False, f_times[joins])
    delays = taken.times[joining] - f_times[joins]
    join.delays += delays[np.isfinite(delays)].tolist()
    # (expired while records came, where a label of its model came past it; else at the
    # end of the input: closed with the expired label, else owed its label)
    expired = np.flatnonzero(~joined)
    at = f_times[expired] + join.wait
    join.counts["expired"] += len(expired)
    midway = at < clocks[w_key[expired], LABELS]
    _close_all(join, names, w_key[expired[midway]], ids.take(expired[midway]), True,
               f_times[expired[midway]])
    # (every id closed is kept, however far behind the clocks, unlike a stream's: a
    # resumed run reads its files again, and new ones may be dated before them)
    for code, clock in enumerate(clocks.tolist()):
        join._of(names[code]).clocks = clock
    ended = expired[~midway]
    if join.expired_label is not None:
        _close_all(join, names, w_key[ended], ids.take(ended), True, f_times[ended])
        join.counts["expired_learned"] += len(expired)
    else:
        for r in ended.tolist():
            join._of(names[w_key[r]]).unlabeled.setdefault(
                features[waiting.sources[r]][0], []).append(int(waiting.positions[r]))
        expired = expired[:0]
    learn = np.concatenate([
        np.stack([w_key[joins], taken.times[joining], np.zeros(len(joins)),
                  taken.sources[joining], taken.block.positions[joining], joining, joins]),
        np.stack([w_key[expired], f_times[expired] + join.wait, np.ones(len(expired)),
                  waiting.sources[expired], waiting.positions[expired],
                  np.full(len(expired), -1), expired])], axis=1)
    return learn[:, np.lexsort(learn[4::-1])], names


def _close_all(join, names, key_codes, ids, expired, times):
    """Close ``ids`` (an array) of the models of ``key_codes`` at ``times``."""
    order = np.argsort(key_codes, kind="stable")
    codes, starts = np.unique(key_codes[order], return_index=True)
    for code, rows in zip(codes.tolist(), np.split(order, starts[1:])):
        first = join.seq + 1
        join.seq += len(rows)
        join._of(names[code]).closed.add_columns(
            ids.take(rows), np.full(len(rows), expired), np.arange(first, join.seq + 1),
            times[rows])


def _learning(join, waiting, taken, settled, features_sources):
    """``Released.result`` of ``_settle``'s examples to learn: each model's in order, in
    runs of one labels file or one features file's expired examples (``features_sources``:
    the features files' names), each made as it is learned."""
    learn, names = settled
    if not learn.shape[1]:
        return
    kind = learn[[0, 2, 3]]
    cuts = np.flatnonzero((kind[:, 1:] != kind[:, :-1]).any(axis=0)) + 1
    for run in np.split(learn, cuts, axis=1):
        key, expired, source = names[int(run[0, 0])], bool(run[2, 0]), int(run[3, 0])
        block, scores = waiting.take(run[6].astype(np.int64))
        block.event_times = run[1].copy()
        if expired:
            block.source = features_sources[source]
            block.labels = np.full(len(block), join.expired_label, dtype=np.float64)
        else:
            at = run[5].astype(np.int64)
            block.source = taken.source_names[source]
            block.positions = taken.block.positions[at]
            block.labels = taken.block.labels[at]
        yield key, block, scores, expired


def firsts_in_time_order(join: "LabelJoin", blocks: list[ExampleBlock], now: Optional[float]
                         ) -> dict[str, np.ndarray]:
    """{source: positions}: of a bounded input's features ``blocks`` (a file each, in the
    order given), the first record of each model key's id in record time (then file and
    line), among those neither read again after a resume (``replayed``) nor dated ahead of
    ``now`` (``refuse_ahead``): for ``screen``, which refuses the others."""
    sources: Any
    positions: Any
    keys, ids, times, sources, positions = [], [], [], [], []
    for j, block in enumerate(blocks):
        keep = (~resume.replayed_rows(join, block)
                & block.ids.is_valid().to_numpy(zero_copy_only=False))
        keep[join._ahead(block, now)] = False
        rows = np.flatnonzero(keep)
        keys.append(block.keys.take(rows))
        ids.append(block.ids.take(rows))
        times.append(block.event_times[rows] if block.event_times is not None
                     else np.full(len(rows), math.inf))
        sources.append(np.full(len(rows), j))
        positions.append(block.positions[rows])
    if not blocks:
        return {}
    codes = by_id.group_codes(pa.concat_arrays(keys), pa.concat_arrays(ids))
    sources, positions = np.concatenate(sources), np.concatenate(positions)
    order = np.lexsort((positions, sources, np.concatenate(times)))
    first = order[by_id.first_of_each(codes[order])]
    return {block.source: positions[first[sources[first] == j]]
            for j, block in enumerate(blocks)}
