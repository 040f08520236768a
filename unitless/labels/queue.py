"""The learning step's half of the join keyed by example id (docs/delayed-outcomes.md, "Waiting
examples spread by id"): a model group's labels queued in label order, each model learning its
queue's head once the buckets (``buckets.Bucket``) have answered it, so that what it learns is
its joined records in label order however the answers come.

The learning step hands its labels on in order (``InOrder``) and passes on the buckets' answers
as they come; a label answered joined is learned with its example's features, one answered a
dead letter is passed. With ``expired_label`` an expired example is learned too, at its expiry
time's place among its model's labels (before the first label dated after it), which the
answers alone cannot give: they come from every bucket, each when its clock passes them. So
then the queue learns only what the labels clock is past (``advance``: every expiry before it
answered, every label before it queued), labels and expiries merged by time, a label before an
expiry of the same time. Free of Beam.
"""
import heapq
import math
from collections import deque
from typing import Optional

import numpy as np

from ..parse.records import ExampleBlock
from .buckets import Answers, record_times
from .call_log import CallLog, Logged
from .reasons import LATE_LABEL, NEVER_SERVED, SECOND_LABEL
from .waiting import ToLearn

_LABEL_REASONS = {NEVER_SERVED, SECOND_LABEL, LATE_LABEL}


class LabelQueue(Logged):
    """A model group's labels waiting for their answers, and the answers waiting for their
    labels to reach their queue's head."""

    def __init__(self, expired_label: Optional[float] = None) -> None:
        self.expired_label = expired_label
        self.queues: dict[str, deque] = {}  # model key -> (source, position, time) in order
        self.places: set[tuple] = set()  # (source, position) of the labels queued
        # (label source, position) -> (answer block, row, scores), None for a dead letter
        self.answers: dict[tuple, Optional[tuple]] = {}
        # model key -> heap of (expiry time, source, position, n, block, row, scores)
        self.expiring: dict[str, list] = {}
        self.clock = -math.inf
        self.taken = 0  # (a tie-break in the heaps: the order expiries came in)
        self.log = CallLog()  # (what persists it in Beam state: ``log_entries``)

    @property
    def waiting(self) -> int:
        """Labels queued and not learned yet."""
        return sum(len(q) for q in self.queues.values())

    def labels(self, block: ExampleBlock) -> None:
        """A labels block, as the learning step hands it on (each label with an id and a
        label; in order within its source): each queued in its model's queue."""
        self.log.record("labels", (block,))
        times = record_times(block).tolist()
        for key, position, time in zip(block.keys.to_pylist(), block.positions.tolist(), times):
            if (block.source, position) not in self.places:  # (a label handed on twice: once)
                self.places.add((block.source, position))
                self.queues.setdefault(key, deque()).append((block.source, position, time))

    def answered(self, answers: Answers) -> None:
        """The buckets' answers: joined examples kept for their labels; dead letters of labels
        mark theirs passed; expired examples (with ``expired_label``) wait for their place.
        (Examples that carried their own label, ``Answers.own``, are not the queue's; a label
        answered joined and a dead letter, handed on twice, is joined.)"""
        mine = Answers(joined=answers.joined,
                       dead=[d for d in answers.dead if d.reason in _LABEL_REASONS],
                       expired=answers.expired if self.expired_label is not None else [])
        if not (mine.joined or mine.expired or mine.dead):
            return
        self.log.record("answered", (mine,))
        for block, scores, _ in mine.joined:
            for r, position in enumerate(block.positions.tolist()):
                self.answers[(block.source, position)] = (block, r, scores)
        for dead in mine.dead:
            self.answers.setdefault((dead.source, dead.position), None)
        for block, scores, at in mine.expired:
            for r, (key, position, time) in enumerate(zip(
                    block.keys.to_pylist(), block.positions.tolist(), at.tolist())):
                self.taken += 1
                heapq.heappush(self.expiring.setdefault(key, []),
                               (time, block.source, position, self.taken, block, r, scores))

    def advance(self, labels_clock: float) -> None:
        """Every expiry before ``labels_clock`` is answered and every label dated before it
        queued."""
        if labels_clock > self.clock:
            self.log.record("advance", (labels_clock,))
            self.clock = labels_clock

    def release(self, ended: bool = False) -> list[ToLearn]:
        """What each model learns now, in order: [(model key, block, the scores its examples
        were served with, expired)], runs of one labels source or of expired examples of one
        features source (``ended``: the input's end, every answer come)."""
        out: list[ToLearn] = []
        changed = False
        for key in list(dict.fromkeys([*self.queues, *self.expiring])):
            items, passed = self._released(key, ended)
            changed |= passed
            start = 0
            for n in range(1, len(items) + 1):
                if n == len(items) or items[n][:2] != items[start][:2]:
                    out.append(self._run(key, items[start:n]))
                    start = n
            if not self.queues.get(key, True):
                del self.queues[key]
            if not self.expiring.get(key, True):
                del self.expiring[key]
        if changed:  # (logged once done: replayed, it does the same)
            self.log.record("release", (ended,))
        return out

    def _released(self, key: str, ended: bool) -> tuple[list[tuple], bool]:
        """Model ``key``'s items to learn now, (expired, source, block, row, scores, time), and
        whether any label or expiry was passed."""
        queue, expiring = self.queues.get(key, deque()), self.expiring.get(key, [])
        gated = self.expired_label is not None and not ended
        items, passed = [], False
        while queue or expiring:
            label = queue[0] if queue else None
            if expiring and (label is None or expiring[0][0] < label[2]):
                at, source, _, _, block, row, scores = expiring[0]
                if gated and not at < self.clock:  # (a label before it may still come)
                    break
                heapq.heappop(expiring)
                items.append((True, source, block, row, scores, at))
                passed = True
                continue
            assert label is not None
            if gated and not label[2] <= self.clock:  # (an expiry before it may still come)
                break
            if label[:2] not in self.answers:
                break
            answer = self.answers.pop(label[:2])
            queue.popleft()
            self.places.discard(label[:2])
            passed = True
            if answer is not None:
                block, row, scores = answer
                items.append((False, label[0], block, row, scores, label[2]))
        return items, passed

    def _run(self, key: str, items: list[tuple]) -> ToLearn:
        """One block of consecutive items of one kind and source, and their scores."""
        blocks: dict[int, tuple] = {}
        for n, (_, _, block, row, scores, _) in enumerate(items):
            blocks.setdefault(id(block), (block, scores, [], []))[2].append(row)
            blocks[id(block)][3].append(n)
        parts = [block.take(rows) for block, _, rows, _ in blocks.values()]
        part_scores = [None if scores is None else scores[rows]
                       for _, scores, rows, _ in blocks.values()]
        taken = parts[0] if len(parts) == 1 else ExampleBlock.stacked(parts)
        order = np.argsort(np.concatenate([ns for *_, ns in blocks.values()]), kind="stable")
        taken = taken.take(order)
        got = [s for s in part_scores if s is not None]
        scores = np.concatenate(got)[order] if len(got) == len(part_scores) else None
        expired, source = items[0][:2]
        if expired:
            taken.labels = np.full(len(taken), self.expired_label, dtype=np.float64)
            taken.event_times = np.array([item[5] for item in items], dtype=np.float64)
        taken.source = source
        return key, taken, scores, expired
