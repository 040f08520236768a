"""What the labels join holds while examples and labels wait for each other: the blocks whose
rows wait (``Rows``), a model key's waiting (``ModelJoin``), what a resumed run did before
(``Resumed``), and what a call gives back to learn (``Released``)."""
import heapq
import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from ..parse.records import DeadLetter, ExampleBlock
from .closed import ClosedIds

FEATURES, LABELS = 0, 1  # the two inputs, as indices of a join's clocks
ServedBlocks = list[tuple[str, ExampleBlock, np.ndarray]]
FeaturesInput = tuple[str, np.ndarray, list[str], Optional[np.ndarray], ServedBlocks]
ToLearn = tuple[str, ExampleBlock, Optional[np.ndarray], bool]


class Rows:
    """A block whose rows wait (served examples, with the ``scores`` they were served with; or
    labels), shared by their entries: a waiting example costs an entry, not a block of its own.
    ``waiting``: how many of its rows still do."""

    def __init__(self, block: ExampleBlock, scores: Optional[np.ndarray] = None) -> None:
        self.block, self.scores, self.waiting = block.full(), scores, len(block)
        self.ids, self.keys = block.ids.to_pylist(), block.keys.to_pylist()
        self.times = block.event_times  # record times (s), None where the source has none

    def time(self, row: int) -> float:
        return float(self.times[row]) if self.times is not None else math.inf

    def dead(self, row: int, reason: str) -> DeadLetter:
        b = self.block
        return DeadLetter(b.source, int(b.positions[row]), b.raw_record(row), reason)


@dataclass
class Resumed:
    """What a resumed run's model key did before (its checkpoint, ``LabelJoin.restore``):
    ``positions``, per source, the last label it learned or judged there (a dead letter), or
    the last example it served; ``rejoin``, per features source, the position before its oldest
    example there still waiting; ``waiting``, per features source, the positions of those
    waiting that have not come again yet (until they do, its checkpoints keep them); and
    ``labeled``, whether it had labels."""
    positions: dict
    rejoin: dict
    waiting: dict
    labeled: bool  # whether it had labels


@dataclass
class ModelJoin:
    """One model key's waiting: its served examples by id (entries ``(Rows, row, seq)``), the
    ids it learned or let expire (``ClosedIds``: id -> (expired, seq, the example's time); a
    stream keeps them for twice ``wait`` past that time, for ever without one: a label or
    features record later than that is told apart by its time alone; a bounded input keeps
    them all), and its labels in label order, waiting for features
    (``(Rows, row)``), among them the expired examples to learn with the expired label
    (``(None, entry, expiry time, label)``). With a wait: the two inputs' clocks (record time,
    s: ``expiry.advance``), each input's sources' newest times, and heaps of (deadline,
    seq, id): of served examples, expiring once the labels' clock passes it, and of ids
    closed, forgotten once both clocks do. ``resumed``: what it did before a resume."""
    served: dict = field(default_factory=dict)
    closed: ClosedIds = field(default_factory=ClosedIds)
    pending: deque = field(default_factory=deque)
    labeled: dict = field(default_factory=dict)  # id -> the times of its labels in ``pending``
    parked: dict = field(default_factory=dict)  # id -> its ``closing`` entry, while labeled
    clocks: list = field(default_factory=lambda: [-math.inf, -math.inf])
    newest: tuple = field(default_factory=lambda: ({}, {}))
    expiring: list = field(default_factory=list)
    closing: list = field(default_factory=list)
    judged: dict = field(default_factory=dict)  # labels source -> the last position it took
    resumed: Optional[Resumed] = None
    # features source -> positions of its examples whose label had not come when the input
    # ended (dropped, not learned): still owed one, so a resumed run's labels can join them
    unlabeled: dict = field(default_factory=dict)

    COMPACT_BELOW = 4  # a block whose waiting rows fall under 1/4 of it is cut down to them

    def left(self, rows: Rows, n: int = 1) -> None:
        """``n`` of ``rows``' examples no longer wait: the block is cut down to those that do
        once they are few (its memory is held while any does)."""
        rows.waiting -= n
        size = len(rows.block)
        if rows.waiting and size >= 64 and rows.waiting * self.COMPACT_BELOW < size:
            live = [(r, e[2]) for r, i in enumerate(rows.ids)
                    for e in (self.served.get(i),) if e is not None and e[0] is rows and e[1] == r]
            assert rows.scores is not None
            kept = Rows(rows.block.take([r for r, _ in live]), rows.scores[[r for r, _ in live]])
            for k, (r, seq) in enumerate(live):
                self.served[rows.ids[r]] = (kept, k, seq)

    def forget_at(self, labels_clock: float) -> float:
        """The time below which it forgets closed ids once its labels clock is
        ``labels_clock``: its clocks' oldest (the features clock alone while no label has
        come: ids of examples that carried their own label must not pile up in a model that
        gets none; but not in a resumed model that had labels, whose labels clock starts again
        with those read again)."""
        clocks = [c for c in (self.clocks[FEATURES], labels_clock) if c > -math.inf
                  or (self.resumed is not None and self.resumed.labeled)]
        return min(clocks) if clocks else -math.inf

    def forget(self) -> None:
        """Forget the closed ids due by its clocks (a label of one still queued parks it:
        forgotten once that label has gone)."""
        forget = self.forget_at(self.clocks[LABELS])
        while self.closing and self.closing[0][0] < forget:
            item = heapq.heappop(self.closing)
            if self.closed.get(item[2], (None, None))[1] == item[1]:
                if item[2] in self.labeled:
                    self.parked[item[2]] = item
                else:
                    del self.closed[item[2]]


class Released:
    """What a call gives back: each model key's examples to learn, in order, and dead letters."""
    pairs: dict[str, list[tuple[tuple, tuple]]]
    dead: list[DeadLetter]

    def __init__(self) -> None:
        self.pairs, self.dead = {}, []

    def add(self, key: str, served: tuple, label: tuple) -> None:
        self.pairs.setdefault(key, []).append((served, label))

    def result(self) -> tuple[list[ToLearn], list[DeadLetter]]:
        """([(model key, block, the scores its examples were served with, expired)], dead
        letters): each key's runs of consecutive pairs of one labels source (or expired) as one
        block (``joined``)."""
        out = []
        for key, pairs in self.pairs.items():
            for run in _runs(pairs):
                out.append((key, *joined(run), run[0][1][0] is None))
        return out, self.dead


def _time(entry):
    """A pending entry's record time: a label's, or an expired example's expiry."""
    return entry[2] if entry[0] is None else entry[0].time(entry[1])


def _runs(pairs):
    """[(served entry, pending entry)] -> runs of consecutive pairs whose pending entries share
    a labels source, or are expired examples of one features source."""
    def kind(pair):
        label = pair[1]
        return (True, pair[0][0].block.source) if label[0] is None else (
            False, label[0].block.source)
    runs = []
    for pair in pairs:
        if runs and kind(runs[-1][-1]) == kind(pair):
            runs[-1].append(pair)
        else:
            runs.append([pair])
    return runs


def joined(pairs: list[tuple[tuple, tuple]]) -> tuple[ExampleBlock, Optional[np.ndarray]]:
    """[(served entry, pending entry)] of one labels source -> (block, scores): each served
    example's features with its label, weighted as its features record was, at its label's
    place in the labels input (source, position, record time), as a plain run over the joined
    records would learn it; and the scores it was served with, [n, K]. Expired examples
    (pending entries ``(None, entry, at, label)``, of one features source) keep their features
    record's source and position, with the expired label and their expiry time."""
    features, scores = _taken([(rows, r) for (rows, r, *_), _ in pairs])
    times: Optional[np.ndarray]
    if pairs[0][1][0] is None:
        labels = np.array([value for _, (_, _, _, value) in pairs], dtype=np.float64)
        source, positions = features.source, features.positions
        times = np.array([at for _, (_, _, at, _) in pairs], dtype=np.float64)
    else:
        taken, _ = _taken([(rows, q) for _, (rows, q) in pairs])
        labels, source, positions = taken.labels, taken.source, taken.positions
        times = taken.event_times
    if times is not None and not np.isfinite(times).all():
        times = None
    return replace(features, source=source, positions=positions, labels=labels,
                   event_times=times, restarts_midway=False, served_scores=None), scores


def _taken(entries):
    """[(Rows, row)] -> (a block of those rows in that order, the scores they were served with
    [n, K] or None): one ``take`` per block they come from, not one per row."""
    groups = {}
    for n, (rows, r) in enumerate(entries):
        group = groups.get(id(rows))
        if group is None:
            group = groups[id(rows)] = (rows, [], [])
        group[1].append(n)
        group[2].append(r)
    groups = list(groups.values())
    parts = [rows.block.take(at) for rows, _, at in groups]
    block = parts[0] if len(parts) == 1 else ExampleBlock.stacked(parts)
    scores = (None if groups[0][0].scores is None
              else np.concatenate([rows.scores[at] for rows, _, at in groups]))
    order = np.concatenate([np.asarray(ns, np.int64) for _, ns, _ in groups])
    if (order != np.arange(len(order))).any():
        back = np.argsort(order)
        block = block.take(back)
        scores = None if scores is None else scores[back]
    return block, scores
