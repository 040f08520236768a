"""Delayed outcomes: served examples waiting for their labels, joined by id (``--labels``).

Free of Beam: a model group holds one ``LabelJoin`` beside its models; the learning step hands
it the served examples of a features input (``wait``) and the records of a labels input
(``labels``), in the order it learns them, and learns what they give back, in that order. A
model learns its joined examples in its labels' order: a label whose features have not come
waits (``pending``), and the model's later labels wait behind it, so that the result does not
depend on how the two inputs interleave. See docs/delayed-outcomes.md.
"""
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..connectors.records import ExampleBlock
from ..learner.names import merged_names

# dead letter reasons
SECOND_LABEL = "a second label for an example id already learned"
SECOND_FEATURES = "a second features record for an example id already waiting or learned"
NEVER_SERVED = "a label for an example id whose features never came"
NO_LABEL = "a labels record without a label"
NO_ID = "a labels record without an example id"


@dataclass
class Served:
    """One served example waiting for its label: its features (a one-row block) and the
    scores it was served with (the model's prediction then)."""
    features: ExampleBlock
    scores: np.ndarray


@dataclass
class ModelJoin:
    """One model key's waiting: its served examples by id, the ids it learned, and its labels
    waiting for features, in label order (one-row blocks)."""
    served: dict = field(default_factory=dict)
    learned: set = field(default_factory=set)
    pending: list = field(default_factory=list)


class LabelJoin:
    """A model group's join: a ``ModelJoin`` per model key that has anything waiting."""

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
        for r, i in enumerate(block.ids.to_pylist()):
            if i is not None and i not in join.served:
                join.served[i] = Served(block.take([r]), scores[r].copy())
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
        join.pending.extend(block.take([r]) for r in range(len(block)))
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
                label = join.pending.pop(0)
                dead += label.screen([(0, NEVER_SERVED)])[1]
        self.models.pop(key)
        return joined, dead

    def _release(self, key, join):
        """(joined blocks, dead letters) from the head of ``join.pending`` while its labels'
        features wait: a label for an id learned already is a dead letter."""
        rows, dead = [], []
        while join.pending:
            label = join.pending[0]
            i = label.ids[0].as_py()
            if i in join.learned:
                dead += label.screen([(0, SECOND_LABEL)])[1]
            elif i in join.served:
                rows.append((join.served.pop(i), label))
                join.learned.add(i)
            else:
                break
            join.pending.pop(0)
        if not join.served and not join.pending and not join.learned:
            self.models.pop(key, None)
        return [(joined(same), np.stack([s.scores for s, _ in same]))
                for same in _by_source(rows)], dead

    def holds(self, key):
        """Whether model ``key`` has anything waiting."""
        join = self.models.get(key)
        return join is not None and bool(join.served or join.pending)


def _by_source(rows):
    """[(served, label)] -> runs of consecutive rows whose labels share a source."""
    runs = []
    for row in rows:
        if runs and runs[-1][-1][1].source == row[1].source:
            runs[-1].append(row)
        else:
            runs.append([row])
    return runs


def joined(rows):
    """[(Served, one-row label block)] of one labels source -> one block to learn: each served
    example's features with its label, weighted as its features record was, at its label's
    place in the labels input (source, position, record time), as a plain run over the joined
    records would learn it."""
    features = [s.features.full() for s, _ in rows]
    labels = [label for _, label in rows]
    lengths = np.array([len(f.indices) for f in features], dtype=np.int64)
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    times = [label.event_times for label in labels]
    return ExampleBlock(
        labels[0].source, np.concatenate([label.positions for label in labels]),
        pa.concat_arrays([label.ids for label in labels]),
        pa.concat_arrays([label.keys for label in labels]),
        np.concatenate([label.labels for label in labels]),
        np.concatenate([f.weights for f in features]), indptr,
        np.concatenate([f.indices for f in features]),
        np.concatenate([f.values for f in features]),
        merged_names(f.names for f in features), None,
        None if any(t is None for t in times) else np.concatenate(times))
