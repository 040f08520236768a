"""One bucket of a join keyed by example id (docs/delayed-outcomes.md, "Waiting examples spread
by id"): the served examples and the labels of the (model key, id) pairs that hash to it
(``pipelines.join_buckets.bucket_numbers``), each pair judged by its own records as they come
(``by_id``'s rules), and answered once.

Free of Beam, and of the learning step's order: a bucket answers each label and each example
once its outcome is certain, whatever order its records come in, by two record-time clocks
its caller passes (``advance``), each safe: no record of that input still to come is dated
before it. A pair's first features record (in time, then source and position) is certain once
the features clock is past it, and the others are seconds; then, as ``by_id.judge`` says:

* the first label within the wait of it joins it (``joined``), once the labels clock is past
  that label (no label before it can come), and the labels after it are seconds;
* a label dated more than the wait before it, or of a pair whose features never came once
  the features clock is past the label's time + the wait, was never served;
* an example no label joined expires once the labels clock is past its time + the wait
  (``expired``), and the labels after that are late;
* a pair whose first record carries its own label is joined by it (answered as it is, ``own``);
* a pair's records dated more than twice the wait after its example are of a later example
  of the id, judged apart, so that a bucket need not keep a pair for ever: it forgets a
  closed pair once both clocks are past that; until then the pair's records are seconds (or
  late labels, if it expired; or never served, dated more than the wait before it).

So the answers are ``by_id.judge``'s over the whole input (but for a pair's records more than
twice the wait after its example), however the records are ordered, interleaved or spread
over buckets (tests/unit/test_label_buckets.py); a record dated behind its input's clock (a
source read out of time order, or lagging by more than the clocks allow) is judged as it
comes, and counted (``behind``). Nothing is per model: a model's labels' queue and what it
learns are the learning step's.
"""
import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Optional

import numpy as np

from ..parse.records import DeadLetter, ExampleBlock
from . import by_id
from .bucket_rows import Chains, Closures, PairCodes, Waiting
from .call_log import CallLog, Logged
from .reasons import LATE_LABEL, NEVER_SERVED, SECOND_FEATURES, SECOND_LABEL

_REASONS = {by_id.NEVER: NEVER_SERVED, by_id.SECOND: SECOND_LABEL, by_id.LATE: LATE_LABEL}


@dataclass
class Answers:
    """What a bucket's call answers. ``joined``: per labels source, (a block of the examples
    joined, each with its label at the label's place: source, position and time, the scores
    it was served with [n, K] or None, its features record's time); ``expired``: per features
    source, (a block of the examples expired, at their own place and time, their scores, the
    time they expired: time + wait); ``own``: per features source, (a block of the examples
    that carried their own label, as they are, their scores, their times); ``dead``: labels
    never served, second or late, and second features records."""
    joined: list = field(default_factory=list)
    expired: list = field(default_factory=list)
    own: list = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)


class Bucket(Logged):
    """The examples and labels of one bucket's pairs that wait for each other, and the pairs it
    closed; ``wait`` in seconds of record time (None: everything waits for ``end``). Each pair
    is a number (``PairCodes``), and what it holds of it columns (bucket_rows.py)."""

    def __init__(self, wait: Optional[float] = None) -> None:
        self.wait = math.inf if wait is None else float(wait)
        self.served, self.queued = Waiting(), Waiting()
        self.codes = PairCodes()
        self.first = np.full(16, -1, np.int64)  # pair -> its earliest features record's slot
        self.others_of = Chains()  # pair -> its later features records' slots
        self.labels_of = Chains()  # pair -> its labels' slots
        self.closed = Closures()  # pair -> its closures, in order
        self.waiting = 0  # pairs whose features came and that are not answered yet
        self.live = 0  # (pairs numbered when ``_forget_pairs`` last dropped those gone)
        self.clocks = [-math.inf, -math.inf]
        self.ended = False
        self.behind = 0  # records that came dated behind their input's clock (not safe)
        self.log = CallLog()  # (what persists it in Beam state: ``log_entries``)

    def _horizon(self, time: Any) -> Any:
        """The last time a record of a pair whose example is dated ``time`` is of that example
        (twice the wait after it): a later one is of a later example of the id."""
        return time + 2 * self.wait

    def _codes(self, block: ExampleBlock) -> np.ndarray:
        """The numbers of the pairs of a block's records, with room for each."""
        codes = self.codes.codes(block)
        n = len(self.codes)
        if n > len(self.first):
            self.first = np.append(self.first, np.full(max(n, 2 * len(self.first))
                                                       - len(self.first), -1, np.int64))
        for chains in (self.others_of, self.labels_of, self.closed.of_pair):
            chains.room(n)
        return codes

    def features(self, block: ExampleBlock) -> Answers:
        """A features block of the bucket's pairs (each with an id; served examples with their
        ``served_scores``, if any, and examples that carry their own label): each waits, but
        one of a closed pair, a second (dead letter)."""
        self.log.record("features", (block,))
        out = Answers()
        codes, times = self._codes(block), record_times(block)
        self.behind += int((times < self.clocks[0]).sum())
        closed = self.closed.of(codes, times) >= 0
        out.dead += [DeadLetter(block.source, int(block.positions[r]), block.raw_record(r),
                                SECOND_FEATURES) for r in np.flatnonzero(closed).tolist()]
        rows = np.flatnonzero(~closed)
        if len(rows):
            slots = self.served.add(block, rows, codes[rows])
            self._place(codes[rows], slots)
            # (a record dated at or after the features clock makes nothing certain: only one
            # from a source that lags, or after the end)
            behind = self.ended | (self.served.time[slots] < self.clocks[0])
            self._judge(_in_order(codes[rows][behind]), out)
        return out

    def _place(self, codes: np.ndarray, slots: np.ndarray) -> None:
        """New features records ``slots`` of pairs ``codes``: each pair's earliest record (in
        the join's order) is its first, the others its later ones."""
        old = self.first[codes]
        had = np.unique(codes[old >= 0])
        # (the first so far before the new: of two records that tie, a record read twice,
        # the one that came first stays)
        candidates = np.concatenate([self.first[had], slots])
        owners = np.concatenate([had, codes])
        order = np.lexsort((self.served.order_rank(candidates), owners))
        owners, candidates = owners[order], candidates[order]
        earliest = np.r_[True, owners[1:] != owners[:-1]]
        self.waiting += len(np.unique(codes)) - len(had)
        self.first[owners[earliest]] = candidates[earliest]
        self.others_of.push(owners[~earliest], candidates[~earliest])

    def labels(self, block: ExampleBlock) -> Answers:
        """A block of labels of the bucket's pairs (each with an id and a label): each waits
        until its outcome is certain, but one of a closed pair: a second, late, or never
        served if dated more than the wait before its example (dead letters)."""
        self.log.record("labels", (block,))
        out = Answers()
        codes, times = self._codes(block), record_times(block)
        self.behind += int((times < self.clocks[1]).sum())
        closure = self.closed.of(codes, times)
        rows = self.closed.rows
        for r in np.flatnonzero(closure >= 0).tolist():
            c = int(closure[r])
            out.dead.append(DeadLetter(
                block.source, int(block.positions[r]), block.raw_record(r),
                NEVER_SERVED if rows.time[c] > times[r] + self.wait else
                LATE_LABEL if rows.expired[c] else SECOND_LABEL))
        kept = np.flatnonzero(closure < 0)
        if len(kept):
            slots = self.queued.add(block, kept, codes[kept])
            self.labels_of.push(codes[kept], slots)
            # (nor does a label dated at or after the labels clock, unless the features clock
            # is past it by the wait: what else it could settle the clocks settled already)
            time = self.queued.time[slots]
            f_clock, l_clock = self.clocks
            behind = self.ended | (time < l_clock) | (time + self.wait < f_clock)
            self._judge(_in_order(codes[kept][behind]), out)
        return out

    def advance(self, features_clock: float, labels_clock: float) -> Answers:
        """Each input's clock (record time, s: no record of it still to come is dated
        before), never moved back: the pairs whose outcome that makes certain are answered,
        and closed pairs both clocks are twice the wait past are forgotten."""
        (f_old, l_old), out = self.clocks, Answers()
        f_new, l_new = max(f_old, features_clock), max(l_old, labels_clock)
        if (f_new, l_new) == (f_old, l_old):
            return out
        self.log.record("advance", (features_clock, labels_clock))
        self.clocks = [f_new, l_new]
        wait = self.wait
        due = _in_order(np.concatenate([  # (in slot order: the same when its log is replayed)
            self.served.crossing(0, f_old, f_new),  # (its first record certain)
            self.served.crossing(wait, l_old, l_new),  # (no label within can come)
            self.queued.crossing(0, l_old, l_new),  # (no label before it can come)
            self.queued.crossing(wait, f_old, f_new)]))  # (no features within can come)
        self._judge(due, out)
        self.closed.forget(min(self.clocks))
        self._forget_pairs()
        return out

    def end(self) -> Answers:
        """The end of the input: every outcome is certain. Examples no label joined expire (at
        their time + the wait, infinite without one), labels without their example were
        never served."""
        self.log.record("end", ())
        self.ended = True
        out = Answers()
        n = len(self.codes)
        self._judge(np.flatnonzero((self.first[:n] >= 0) | (self.labels_of.head[:n] >= 0)), out)
        return out

    def _judge(self, pairs: np.ndarray, out: Answers) -> None:
        """``_judged`` if there are any, and again those a later example of took the place of
        the one they closed (``_stop_features``)."""
        while len(pairs):
            pairs = self._judged(pairs, out)

    def _judged(self, pairs: np.ndarray, out: Answers) -> np.ndarray:
        """Judge ``pairs`` (none closed) by the records of theirs that came (``by_id.judge``;
        a pair whose earliest features record carries its own label is joined by it), and
        answer what the clocks make certain: a pair's first features record once the features
        clock is past it (no earlier one can come); a label joining it once the labels clock
        is past the label (no label before it can come), and the labels after that one; a
        label never served once the features clock is past its time + the wait; an example
        expired, and its late labels, once the labels clock is past its time + the wait."""
        e_code, e_slot, e_certain, own_done, l_slot, l_code = self._records(pairs)
        wait, ended, (f_clock, l_clock) = self.wait, self.ended, self.clocks
        l_time, e_time = self.queued.time[l_slot], self.served.time[e_slot]
        outcome, _, joined = by_id.judge(e_code, e_time, l_code, l_time, wait)

        def of_pairs(codes):
            marked = np.zeros(len(pairs), bool)
            marked[codes] = True
            return marked

        joins = ((outcome == by_id.JOIN) & of_pairs(e_code[e_certain])[l_code]
                 & (ended | (l_time < l_clock)))
        code_joined = of_pairs(l_code[joins])
        expires = ~joined & e_certain & (ended | (e_time + wait < l_clock))
        final = (joins | ((outcome == by_id.SECOND) & code_joined[l_code])
                 | ((outcome == by_id.NEVER) & (ended | (l_time + wait < f_clock)))
                 | ((outcome == by_id.LATE) & of_pairs(e_code[expires])[l_code]))
        if joins.any():
            e_of = e_slot[np.searchsorted(e_code, l_code[joins])]
            self._answer_joined(l_slot[joins], e_of, out)
            self._close(pairs[l_code[joins]], False, self.served.time[e_of])
        if expires.any():
            self._answer_expired(e_slot[expires], out)
            self._close(pairs[e_code[expires]], True, e_time[expires])
        for n in np.flatnonzero(final & ~joins).tolist():
            out.dead.append(self._label_dead(int(l_slot[n]), _REASONS[int(outcome[n])]))
        if len(own_done):
            self._answer_own(own_done, out)
        self._stop_labels(l_slot[final])
        return self._stop_features(e_slot[code_joined[e_code] | expires], own_done,
                                   e_slot[e_certain], out)

    def _records(self, pairs: np.ndarray) -> tuple[np.ndarray, ...]:
        """The records of ``pairs`` that came: (the indices in ``pairs`` of those with a first
        features record, its slot and whether it is certain, but for those that carry their
        own label: of them, the slots of the certain; the slots of their labels and their
        pairs' indices, in the join's order)."""
        served = self.served
        firsts = self.first[pairs]
        e_code = np.flatnonzero(firsts >= 0)
        e_slot = firsts[e_code]
        certain = self.ended | (served.time[e_slot] < self.clocks[0])
        own = served.slots.own[e_slot]
        own_done = e_slot[own & certain]
        code_own = np.zeros(len(pairs), bool)
        code_own[e_code[own]] = True
        l_slot, l_code = self.labels_of.items(pairs)
        # (a label dated more than twice the wait after its pair's first features record is
        # of a later example of the id: not judged with this one, ``Closures.of``)
        horizon = np.full(len(pairs), math.inf)
        horizon[e_code] = self._horizon(served.time[e_slot])
        mine = ~code_own[l_code] & (self.queued.time[l_slot] <= horizon[l_code])
        l_slot, l_code = l_slot[mine], l_code[mine]
        order = self.queued.order(l_slot)
        return e_code[~own], e_slot[~own], certain[~own], own_done, l_slot[order], l_code[order]

    def _stop_features(self, answered: np.ndarray, own_done: np.ndarray, certain: np.ndarray,
                       out: Answers) -> np.ndarray:
        """The first features records ``answered`` and ``own_done`` stop waiting, their pairs'
        too; so do the other records of the pairs whose first is ``certain`` (seconds), but
        those dated more than twice the wait after it: the earliest of those is a later example
        of the id, its pair's first once the first closed. Returns the pairs closed that have
        such a record, or labels of such an example, to judge again."""
        served = self.served
        stopped = np.concatenate([answered, own_done])
        stopped_pairs = served.slots.code[stopped]
        self.first[stopped_pairs] = -1
        self.waiting -= len(stopped)
        again = np.zeros(0, np.int64)
        if self.others_of:
            firsts = np.concatenate([certain, own_done])
            others, at = self.others_of.items(served.slots.code[firsts])
            seconds = others[~(served.time[others] > self._horizon(served.time[firsts[at]]))]
            self.others_of.remove(served.slots.code[seconds], seconds)
            later, at = self.others_of.items(stopped_pairs)
            if len(later):
                order = np.lexsort((served.order_rank(later), at))
                earliest = order[np.r_[True, at[order][1:] != at[order][:-1]]]
                promoted, again = later[earliest], stopped_pairs[at[earliest]]
                self.others_of.remove(again, promoted)
                self.first[again] = promoted
                self.waiting += len(promoted)
            out.dead += [self._dead(served, slot, SECOND_FEATURES) for slot in seconds.tolist()]
            stopped = np.concatenate([stopped, seconds])
        # (and those whose labels of a later example wait still, without it)
        left = served.slots.code[stopped]
        left = left[(self.labels_of.head[left] >= 0) & (self.first[left] < 0)]
        if len(stopped):
            served.stop(stopped)
        self._compact()
        return _in_order(np.concatenate([again, left]))

    def _compact(self) -> None:
        """Drop the slots that stopped waiting once they are most of them."""
        numbers = self.served.compact()
        if numbers is not None:
            held = self.first >= 0
            self.first[held] = numbers[self.first[held]]
            self.others_of.renumber_items(numbers)
        numbers = self.queued.compact()
        if numbers is not None:
            self.labels_of.renumber_items(numbers)

    def _answer_own(self, slots: np.ndarray, out: Answers) -> None:
        """Pairs whose first features record carries its own label: answered joined as they
        are, closed, and their labels seconds (or never served, those dated more than the
        wait before)."""
        times = self.served.time[slots]
        for source, rows, part in _by_source(*self.served.taken(slots)):
            out.own.append((replace(part, source=source, served_scores=None,
                                    restarts_midway=False), part.served_scores, times[rows]))
        pairs = self.served.slots.code[slots]
        self._close(pairs, False, times)
        labels, at = self.labels_of.items(pairs)
        label_times = self.queued.time[labels]
        mine = label_times <= self._horizon(times[at])  # (else of a later example of the id)
        never = times[at] > label_times + self.wait
        for slot, was_never in zip(labels[mine].tolist(), never[mine].tolist()):
            out.dead.append(self._label_dead(slot, NEVER_SERVED if was_never else SECOND_LABEL))
        if mine.any():
            self._stop_labels(labels[mine])

    def _stop_labels(self, slots: np.ndarray) -> None:
        if len(slots):
            self.labels_of.remove(self.queued.slots.code[slots], slots)
            self.queued.stop(slots)

    def _label_dead(self, slot: int, reason: str) -> DeadLetter:
        return self._dead(self.queued, slot, reason)

    @staticmethod
    def _dead(waiting: Waiting, slot: int, reason: str) -> DeadLetter:
        block, row = waiting.block_of(slot)
        return DeadLetter(block.source, int(block.positions[row]), block.raw_record(row), reason)

    def _answer_joined(self, l_slots: np.ndarray, e_slots: np.ndarray, out: Answers) -> None:
        """Joined: each example's features with its label, at the label's place, per labels
        source."""
        features, _ = self.served.taken(e_slots)
        came = self.served.time[e_slots]
        for source, rows, label in _by_source(*self.queued.taken(l_slots)):
            part = features if len(rows) == len(features) else features.take(rows)
            out.joined.append((replace(part, source=source, positions=label.positions,
                                       labels=label.labels, event_times=label.event_times,
                                       served_scores=None, restarts_midway=False),
                               part.served_scores, came[rows]))

    def _answer_expired(self, e_slots: np.ndarray, out: Answers) -> None:
        at = self.served.time[e_slots] + self.wait
        for source, rows, part in _by_source(*self.served.taken(e_slots)):
            out.expired.append((replace(part, source=source, served_scores=None,
                                        restarts_midway=False),
                                part.served_scores, at[rows]))

    def _close(self, pairs: np.ndarray, expired: bool, times: np.ndarray) -> None:
        self.closed.add(pairs, expired, times, self._horizon(times))

    def _forget_pairs(self) -> None:
        """Drop the numbers of the pairs it holds nothing of (no record waiting, no closure),
        once they are most of those numbered."""
        n = len(self.codes)
        if n < 1024 or n < 4 * self.live:
            return
        live = np.flatnonzero((self.first[:n] >= 0) | (self.others_of.head[:n] >= 0)
                              | (self.labels_of.head[:n] >= 0)
                              | (self.closed.of_pair.head[:n] >= 0))
        numbers = self.codes.keep(live)
        self.live = len(live)
        for codes in (self.served.slots.code, self.queued.slots.code, self.closed.rows.code):
            held = codes >= 0  # (a record or closure gone may be of a pair dropped before)
            codes[held] = numbers[codes[held]]
        self.first = self.first[live]
        self.others_of.renumber_owners(live)
        self.labels_of.renumber_owners(live)
        self.closed.of_pair.renumber_owners(live)


def record_times(block: ExampleBlock) -> np.ndarray:
    """A block's record times (s), infinite where its source has none."""
    return block.event_times if block.event_times is not None else np.full(len(block), math.inf)


def _by_source(block: ExampleBlock, of: list[str]
               ) -> Iterator[tuple[str, np.ndarray, ExampleBlock]]:
    """(source, rows, the block of those rows) for each source ``of`` the block's rows."""
    sources = set(of)
    if len(sources) == 1:
        yield of[0], np.arange(len(block)), block
        return
    named = np.array(of, dtype=object)
    for source in dict.fromkeys(of):
        rows = np.flatnonzero(named == source)
        yield source, rows, block.take(rows)


def _in_order(codes: np.ndarray) -> np.ndarray:
    """``codes`` each once, in the order of its first place."""
    _, first = np.unique(codes, return_index=True)
    return codes[np.sort(first)]
