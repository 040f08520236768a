"""What the labels join holds while examples and labels wait for each other: the blocks whose
rows wait (``Rows``), a model key's waiting (``ModelJoin``), what a resumed run did before
(``Resumed``), and what a call gives back to learn (``Released``)."""
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..connectors.records import DeadLetter, ExampleBlock
from ..learner.names import merged_names
from .closed import ClosedIds

FEATURES, LABELS = 0, 1  # the two inputs, as indices of a join's clocks


class Rows:
    """A block whose rows wait (served examples, with the ``scores`` they were served with; or
    labels), shared by their entries: a waiting example costs an entry, not a block of its own.
    ``waiting``: how many of its rows still do."""

    def __init__(self, block, scores=None):
        self.block, self.scores, self.waiting = block.full(), scores, len(block)
        self.ids, self.keys = block.ids.to_pylist(), block.keys.to_pylist()
        self.times = block.event_times  # record times (s), None where the source has none

    def time(self, row):
        return float(self.times[row]) if self.times is not None else math.inf

    def dead(self, row, reason):
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
    s: ``LabelJoin._advance``), each input's sources' newest times, and heaps of (deadline,
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
    resumed: Resumed = None
    # features source -> positions of its examples whose label had not come when the input
    # ended (dropped, not learned): still owed one, so a resumed run's labels can join them
    unlabeled: dict = field(default_factory=dict)


class Released:
    """What a call gives back: each model key's examples to learn, in order, and dead letters."""

    def __init__(self):
        self.pairs, self.dead = {}, []

    def add(self, key, served, label):
        self.pairs.setdefault(key, []).append((served, label))

    def result(self):
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


def joined(pairs):
    """[(served entry, pending entry)] of one labels source -> (block, scores): each served
    example's features with its label, weighted as its features record was, at its label's
    place in the labels input (source, position, record time), as a plain run over the joined
    records would learn it; and the scores it was served with, [n, K]. Expired examples
    (pending entries ``(None, entry, at, label)``, of one features source) keep their features
    record's source and position, with the expired label and their expiry time."""
    features = [(rows.block, r) for (rows, r, *_), _ in pairs]
    if pairs[0][1][0] is None:
        labels = np.array([value for _, (_, _, _, value) in pairs], dtype=np.float64)
        source = features[0][0].source
        positions = [b.positions[r] for b, r in features]
        times = [at for _, (_, _, at, _) in pairs]
    else:
        labels_at = [(rows.block, q) for _, (rows, q) in pairs]
        labels = np.array([b.labels[q] for b, q in labels_at], dtype=np.float64)
        source = labels_at[0][0].source
        positions = [b.positions[q] for b, q in labels_at]
        times = [None if b.event_times is None else b.event_times[q] for b, q in labels_at]
    entries = [(rows, r) for (rows, r, *_), _ in pairs]
    indices = [b.indices[b.indptr[r]:b.indptr[r + 1]] for b, r in features]
    indptr = np.zeros(len(pairs) + 1, dtype=np.int64)
    np.cumsum([len(i) for i in indices], out=indptr[1:])
    block = ExampleBlock(
        source, np.array(positions, dtype=np.int64),
        pa.array([rows.ids[r] for rows, r in entries], pa.string()),
        pa.array([rows.keys[r] for rows, r in entries], pa.string()),
        labels, np.array([b.weights[r] for b, r in features], dtype=np.float64), indptr,
        np.concatenate(indices),
        np.concatenate([b.values[b.indptr[r]:b.indptr[r + 1]] for b, r in features]),
        merged_names({id(b): b.names for b, _ in features}.values()), None,
        None if any(t is None or not math.isfinite(t) for t in times)
        else np.array(times, dtype=np.float64))
    return block, np.stack([rows.scores[r] for (rows, r, *_), _ in pairs])
