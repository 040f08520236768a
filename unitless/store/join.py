"""Delayed outcomes: served examples waiting for their labels, joined by id (``--labels``).

Free of Beam: a model group holds one ``LabelJoin`` beside its models; the learning step hands
it the served examples of a features input (``wait``) and the records of a labels input
(``labels``), in the order it learns them, and learns what they give back, in that order. A
model learns its joined examples in its labels' order: a label whose features have not come
waits (``pending``), and the model's later labels wait behind it, so that the result does not
depend on how the two inputs interleave. See docs/delayed-outcomes.md.
"""
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..connectors.records import DeadLetter, ExampleBlock
from ..learner.names import merged_names

# dead letter reasons
SECOND_LABEL = "a second label for an example id already learned"
SECOND_FEATURES = "a second features record for an example id already waiting or learned"
NEVER_SERVED = "a label for an example id whose features never came"
NO_LABEL = "a labels record without a label"
NO_ID = "a labels record without an example id"


class Rows:
    """A block whose rows wait (served examples, with the ``scores`` they were served with; or
    labels), shared by their entries ``(rows, row)``: a waiting example costs an entry, not a
    block of its own. ``waiting``: how many of its rows still do."""

    def __init__(self, block, scores=None):
        self.block, self.scores, self.waiting = block.full(), scores, len(block)
        self.ids, self.keys = block.ids.to_pylist(), block.keys.to_pylist()

    def dead(self, row, reason):
        b = self.block
        return DeadLetter(b.source, int(b.positions[row]), b.raw_record(row), reason)


@dataclass
class ModelJoin:
    """One model key's waiting: its served examples by id, the ids it learned, and its labels
    waiting for features, in label order (entries ``(Rows, row)``)."""
    served: dict = field(default_factory=dict)
    learned: set = field(default_factory=set)
    pending: deque = field(default_factory=deque)


class LabelJoin:
    """A model group's join: a ``ModelJoin`` per model key that has anything waiting."""
    COMPACT_BELOW = 4  # a block whose waiting rows fall under 1/4 of it is cut down to them

    def __init__(self):
        self.models = {}

    def _of(self, key):
        return self.models.setdefault(key, ModelJoin())

    def screen(self, key, block):
        """A features block of model ``key`` -> (the block without the examples whose id is
        already waiting or learned, or came earlier in the block; their dead letters)."""
        join = self.models.get(key, ModelJoin())
        again, seen = [], set()
        for r, i in enumerate(block.ids.to_pylist()):
            if i is not None and (i in seen or i in join.served or i in join.learned):
                again.append((r, SECOND_FEATURES))
            seen.add(i)
        return block.screen(again)

    def labeled(self, key, block):
        """Model ``key`` learns the examples of a features block that carry their own label
        (as in any run): their ids count as learned, so that a label or a features record
        for one of them later is a dead letter (learned once)."""
        ids = [i for i, served in zip(block.ids.to_pylist(), block.served)
               if i is not None and not served]
        if ids:
            self._of(key).learned.update(ids)

    def wait(self, key, block, scores):
        """Model ``key`` served ``block`` (examples without a label) with ``scores`` [n, K]:
        each with an id waits for its label. Returns what that lets the model learn
        (``_release``): its first labels waiting for these."""
        join = self._of(key)
        rows = Rows(block, scores)
        for r, i in enumerate(rows.ids):
            if i is not None and i not in join.served:
                join.served[i] = (rows, r)
            else:
                rows.waiting -= 1
        return self._release(key, join)

    def labels(self, key, block):
        """A labels block of model ``key``, in label order -> (joined, dead letters): joined
        ``[(block, scores)]`` to learn in that order, each block's examples with the scores
        they were served with: a label whose features wait is learned with them, unless labels
        before it still wait for theirs; the others wait (``pending``)."""
        ids = block.ids.to_pylist()
        block, dead = block.screen([(r, NO_ID if ids[r] is None else NO_LABEL)
                                    for r in range(len(block))
                                    if ids[r] is None or np.isnan(block.labels[r])])
        join = self._of(key)
        rows = Rows(block)
        join.pending.extend((rows, q) for q in range(len(block)))
        joined, lost = self._release(key, join)
        return joined, dead + lost

    def end(self, key):
        """The end of the input: model ``key``'s labels still waiting -> (joined blocks,
        dead letters): a label whose features never came is a dead letter, and the labels
        behind it are learned, in order."""
        join = self.models.get(key)
        if join is None:
            return [], []
        joined, dead = [], []
        while join.pending:
            more, lost = self._release(key, join)
            joined += more
            dead += lost
            if join.pending:
                rows, q = join.pending.popleft()
                dead.append(rows.dead(q, NEVER_SERVED))
        self.models.pop(key)
        return joined, dead

    def _release(self, key, join):
        """(joined blocks, dead letters) from the head of ``join.pending`` while its labels'
        features wait: a label for an id learned already is a dead letter."""
        pairs, dead = [], []
        while join.pending:
            label, q = join.pending[0]
            i = label.ids[q]
            if i in join.learned:
                dead.append(label.dead(q, SECOND_LABEL))
            elif i in join.served:
                served = join.served.pop(i)
                pairs.append((served, (label, q)))
                join.learned.add(i)
                self._left(join, served[0])
            else:
                break
            join.pending.popleft()
        if not join.served and not join.pending and not join.learned:
            self.models.pop(key, None)
        return [joined(same) for same in _by_source(pairs)], dead

    def _left(self, join, rows):
        """One of ``rows``' examples no longer waits: the block is cut down to those that do
        once they are few (its memory is held while any does)."""
        rows.waiting -= 1
        n = len(rows.block)
        if rows.waiting and n >= 64 and rows.waiting * self.COMPACT_BELOW < n:
            live = [r for r, i in enumerate(rows.ids) if join.served.get(i) == (rows, r)]
            kept = Rows(rows.block.take(live), rows.scores[live])
            for k, r in enumerate(live):
                join.served[rows.ids[r]] = (kept, k)

    @property
    def nbytes(self):
        """Bytes of the blocks whose examples and labels wait (their columns)."""
        blocks = {id(rows): rows for j in self.models.values()
                  for rows, _ in [*j.served.values(), *j.pending]}
        return sum(r.block.nbytes + (r.scores.nbytes if r.scores is not None else 0)
                   for r in blocks.values())

    def holds(self, key):
        """Whether model ``key`` has anything waiting."""
        join = self.models.get(key)
        return join is not None and bool(join.served or join.pending)


def _by_source(pairs):
    """[(served entry, label entry)] -> runs of consecutive pairs whose labels share a
    source."""
    runs = []
    for pair in pairs:
        if runs and runs[-1][-1][1][0].block.source == pair[1][0].block.source:
            runs[-1].append(pair)
        else:
            runs.append([pair])
    return runs


def joined(pairs):
    """[(served entry, label entry)] of one labels source -> (block, scores): each served
    example's features with its label, weighted as its features record was, at its label's
    place in the labels input (source, position, record time), as a plain run over the joined
    records would learn it; and the scores it was served with, [n, K]."""
    features = [(rows.block, r) for (rows, r), _ in pairs]
    labels = [(rows.block, q) for _, (rows, q) in pairs]
    entries = [(rows, q) for _, (rows, q) in pairs]
    indices = [b.indices[b.indptr[r]:b.indptr[r + 1]] for b, r in features]
    indptr = np.zeros(len(pairs) + 1, dtype=np.int64)
    np.cumsum([len(i) for i in indices], out=indptr[1:])
    times = [b.event_times for b, _ in labels]
    block = ExampleBlock(
        labels[0][0].source, np.array([b.positions[q] for b, q in labels], dtype=np.int64),
        pa.array([rows.ids[q] for rows, q in entries], pa.string()),
        pa.array([rows.keys[q] for rows, q in entries], pa.string()),
        np.array([b.labels[q] for b, q in labels], dtype=np.float64),
        np.array([b.weights[r] for b, r in features], dtype=np.float64), indptr,
        np.concatenate(indices),
        np.concatenate([b.values[b.indptr[r]:b.indptr[r + 1]] for b, r in features]),
        merged_names({id(b): b.names for b, _ in features}.values()), None,
        None if any(t is None for t in times)
        else np.array([b.event_times[q] for b, q in labels], dtype=np.float64))
    return block, np.stack([rows.scores[r] for (rows, r), _ in pairs])
