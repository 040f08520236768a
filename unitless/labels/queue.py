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
import itertools
import math
from typing import Optional

import numpy as np

from ..parse.records import ExampleBlock
from .bucket_rows import Columns, mostly_gone, name_ranks
from .buckets import Answers, record_times
from .call_log import CallLog, Logged
from .reasons import LATE_LABEL, NEVER_SERVED, SECOND_LABEL
from .waiting import ToLearn

_LABEL_REASONS = {NEVER_SERVED, SECOND_LABEL, LATE_LABEL}


class LabelQueue(Logged):
    """A model group's labels waiting for their answers, and the answers waiting for their
    labels to reach their queue's head: rows of columns, changed many at a time (each
    model's queue its labels' rows in the order they came, ``rows``)."""

    def __init__(self, expired_label: Optional[float] = None) -> None:
        self.expired_label = expired_label
        self.keys: dict[str, int] = {}  # model key -> its number, in order of first sight
        self.sources: dict[str, int] = {}  # source -> its number
        # the labels queued, in order: model key, source, position, time, its answer (the
        # block's number in ``blocks``, -1 none yet; its row, -1 for a dead letter), alive
        self.rows = Columns(key=np.int64, source=np.int64, position=np.int64, time=np.float64,
                            block=np.int64, row=np.int64, alive=bool)
        self.places: dict[int, int] = {}  # place (``_place``) of each label queued -> its row
        self.answers: dict[int, tuple[int, int]] = {}  # place -> answer, its label not queued yet
        # the expired examples waiting for their place: model key, expiry time, source,
        # position, the order they came in, their block's number and row
        self.expiring = Columns(key=np.int64, time=np.float64, source=np.int64,
                                position=np.int64, taken=np.int64, block=np.int64,
                                row=np.int64, alive=bool)
        self.blocks: dict[int, list] = {}  # number -> [block, scores, rows answered by it]
        self.next_block = 0
        self.taken = 0  # (a tie-break among expiries: the order they came in)
        self.clock = -math.inf
        self.log = CallLog()  # (what persists it in Beam state: ``log_entries``)

    @property
    def waiting(self) -> int:
        """Labels queued and not learned yet."""
        return int(self.rows.alive.sum())

    def _codes(self, names: list, codes: dict) -> np.ndarray:
        for name in dict.fromkeys(names):
            codes.setdefault(name, len(codes))
        return np.fromiter(map(codes.__getitem__, names), np.int64, len(names))

    def _place(self, source: str, positions: np.ndarray) -> np.ndarray:
        """A number for each (source, position): the same for the same."""
        return self._codes([source], self.sources)[0] << 44 | positions

    def labels(self, block: ExampleBlock) -> None:
        """A labels block, as the learning step hands it on (each label with an id and a
        label; in order within its source): each queued in its model's queue."""
        self.log.record("labels", (block,))
        places = self._place(block.source, block.positions)
        new = np.fromiter(map(self.places.get, places.tolist(), itertools.repeat(-1)),
                          np.int64, len(places)) < 0  # (a label handed on twice: once)
        places = places[new]
        # (answers that came before their labels)
        answers = np.array(list(map(self.answers.pop, places.tolist(),
                                    itertools.repeat((-1, -2)))), np.int64).reshape(-1, 2)
        rows = self.rows.append(
            len(places), key=self._codes(block.keys.to_pylist(), self.keys)[new],
            source=self.sources[block.source], position=block.positions[new],
            time=record_times(block)[new], alive=True, block=answers[:, 0], row=answers[:, 1])
        self.places.update(zip(places.tolist(), rows.tolist()))

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
            self._joined(block, scores)
        for dead in mine.dead:
            self._dead(int(self._place(dead.source, np.array([dead.position]))[0]))
        for block, scores, at in mine.expired:
            number = self._hold(block, scores, len(block))
            self.expiring.append(
                len(block), key=self._codes(block.keys.to_pylist(), self.keys), time=at,
                source=self._codes([block.source], self.sources)[0], position=block.positions,
                taken=np.arange(self.taken, self.taken + len(block)), block=number,
                row=np.arange(len(block)), alive=True)
            self.taken += len(block)

    def _hold(self, block: ExampleBlock, scores: Optional[np.ndarray], rows: int) -> int:
        number, self.next_block = self.next_block, self.next_block + 1
        self.blocks[number] = [block, scores, rows]
        return number

    def _joined(self, block: ExampleBlock, scores: Optional[np.ndarray]) -> None:
        """Joined examples, each the answer at its label's place (whatever was answered there
        before: a dead letter, or the same handed on twice)."""
        number = self._hold(block, scores, len(block))
        places = self._place(block.source, block.positions).tolist()
        at = np.fromiter(map(self.places.get, places, itertools.repeat(-1)), np.int64,
                         len(places))
        queued = at >= 0
        self._drop(self.rows.block[at[queued]])
        self.rows.block[at[queued]] = number
        self.rows.row[at[queued]] = np.flatnonzero(queued)
        early = np.flatnonzero(~queued)  # (their labels not queued yet)
        places = np.asarray(places, np.int64)[early].tolist()
        before = list(map(self.answers.get, places, itertools.repeat((-1, -1))))
        self._drop(np.array(before, np.int64).reshape(-1, 2)[:, 0])
        self.answers.update(zip(places, zip(itertools.repeat(number), early.tolist())))

    def _dead(self, place: int) -> None:
        """A dead letter is the answer at ``place`` unless one came there before."""
        at = self.places.get(place)
        if at is None:
            self.answers.setdefault(place, (-1, -1))
        elif self.rows.row[at] == -2:
            self.rows.block[at], self.rows.row[at] = -1, -1

    def _drop(self, numbers: np.ndarray) -> None:
        """One answer fewer of each block ``numbers`` (-1: none) held, each time named."""
        numbers, counts = np.unique(numbers[numbers >= 0], return_counts=True)
        for number, n in zip(numbers.tolist(), counts.tolist()):
            held = self.blocks[number]
            held[2] -= n
            if not held[2]:
                del self.blocks[number]

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
        names = {code: key for key, code in self.keys.items()}
        labels, expired = _by_key(self.rows), _by_key(self.expiring)
        passed = False
        for key in sorted(labels.keys() | expired.keys()):
            items, key_passed = self._released(labels.get(key, _NONE), expired.get(key, _NONE),
                                               ended)
            passed |= key_passed
            is_expired, source = items[0], items[1]
            cuts = np.flatnonzero((is_expired[1:] != is_expired[:-1])
                                  | (source[1:] != source[:-1])) + 1
            for run in np.split(np.arange(len(source)), cuts) if len(source) else ():
                out.append(self._run(names[key], [column[run] for column in items]))
            self._drop(items[2])
        if passed:  # (logged once done: replayed, it does the same)
            self.log.record("release", (ended,))
            self._compact()
        return out

    def _released(self, labels: np.ndarray, expired: np.ndarray, ended: bool
                  ) -> tuple[tuple[np.ndarray, ...], bool]:
        """One model's items to learn now, columns (expired, source, block number, row,
        time), from its queued ``labels`` (rows, in order) and ``expired`` examples, and
        whether any label or expiry was passed. Its labels and expiries are merged as two
        queues are: an expiry goes before the first label not passed yet dated after it (the
        first whose time, or an earlier label's, is after it). Each is passed in that order
        until one that must wait: a label not answered yet; with ``expired_label`` (but at the
        end), a label not before the clock or an expiry not before it (one before it may
        still come)."""
        rows, expiring = self.rows, self.expiring
        gated = self.expired_label is not None and not ended
        rank = name_ranks(self.sources)
        expired = expired[np.lexsort((expiring.taken[expired], expiring.position[expired],
                                      rank[expiring.source[expired]], expiring.time[expired]))]
        l_time, e_time = rows.time[labels], expiring.time[expired]
        nl = len(labels)
        before = np.searchsorted(np.maximum.accumulate(l_time), e_time, side="right") if nl \
            else np.zeros(len(expired), np.int64)
        # (items: labels 0 to nl - 1, then expiries; in the merged order)
        order = np.lexsort((np.r_[np.zeros(nl), np.arange(len(expired))],
                            np.r_[np.ones(nl), np.zeros(len(expired))],
                            np.r_[np.arange(nl), before]))
        waits = np.r_[(rows.row[labels] == -2) | (gated & ~(l_time <= self.clock)),
                      gated & ~(e_time < self.clock)][order]
        order = order[:int(np.argmax(waits)) if waits.any() else len(order)]
        took, gone = labels[order[order < nl]], expired[order[order >= nl] - nl]
        rows.alive[took] = False
        expiring.alive[gone] = False
        for place in self._places(took).tolist():
            del self.places[place]
        # (the labels answered a dead letter are passed, not learned)
        learned = np.r_[rows.row[labels] >= 0, np.ones(len(expired), bool)][order]
        order = order[learned]
        is_label = order < nl
        r, e = labels[order[is_label]], expired[order[~is_label] - nl]

        def merged(of_labels, of_expired):
            column = np.empty(len(order), np.result_type(of_labels, of_expired))
            column[is_label], column[~is_label] = of_labels, of_expired
            return column

        items = (~is_label, merged(rows.source[r], expiring.source[e]),
                 merged(rows.block[r], expiring.block[e]), merged(rows.row[r], expiring.row[e]),
                 merged(rows.time[r], expiring.time[e]))
        return items, bool(len(took) or len(gone))

    def _places(self, rows: np.ndarray) -> np.ndarray:
        return self.rows.source[rows] << 44 | self.rows.position[rows]

    def _compact(self) -> None:
        """Drop the labels and expiries passed once they are most of them."""
        for columns in (self.rows, self.expiring):
            alive = columns.alive
            if mostly_gone(len(alive), int(alive.sum())):
                columns.keep(np.flatnonzero(alive))
                if columns is self.rows:
                    self.places = dict(zip(self._places(np.arange(columns.n)).tolist(),
                                           range(columns.n)))

    def _run(self, key: str, items: list[np.ndarray]) -> ToLearn:
        """One block of consecutive items of one kind and source (columns: expired, source,
        block number, row, time), and their scores: one take per block, put back in order."""
        expired, source, numbers, rows, times = items
        by_block = np.argsort(numbers, kind="stable")
        starts = np.flatnonzero(np.r_[True, numbers[by_block][1:] != numbers[by_block][:-1]])
        parts, part_scores = [], []
        for at in np.split(by_block, starts[1:]):
            block, scores, _ = self.blocks[int(numbers[at[0]])]
            parts.append(block.take(rows[at]))
            part_scores.append(None if scores is None else scores[rows[at]])
        taken = parts[0] if len(parts) == 1 else ExampleBlock.stacked(parts)
        order = np.argsort(by_block, kind="stable")
        if (order != np.arange(len(order))).any():
            taken = taken.take(order)
        got = [s for s in part_scores if s is not None]
        scores = np.concatenate(got)[order] if len(got) == len(part_scores) else None
        if expired[0]:
            taken.labels = np.full(len(taken), self.expired_label, dtype=np.float64)
            taken.event_times = times.astype(np.float64)
        taken.source = next(name for name, code in self.sources.items() if code == source[0])
        return key, taken, scores, bool(expired[0])


_NONE = np.zeros(0, np.int64)


def _by_key(columns: Columns) -> dict[int, np.ndarray]:
    """{model key's number: its rows alive, in order}."""
    alive = np.flatnonzero(columns.alive)
    order = alive[np.argsort(columns.key[alive], kind="stable")]
    keys = columns.key[order]
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    if not len(order):
        return {}
    return {int(keys[at]): rows for at, rows in zip(np.r_[0, cuts], np.split(order, cuts))}
