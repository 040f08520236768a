"""One bucket of a join keyed by example id (docs/delayed-outcomes.md, "Waiting examples spread
by id"): the served examples and the labels of the (model key, id) pairs that hash to it
(``pipelines.join_buckets.bucket_numbers``), each pair judged by its own records as they come
(``by_id``'s rules), and answered once.

Free of Beam, and of the learning step's order: a bucket answers each label and each example
as soon as its outcome is certain, against each input's record-time clock that its caller
passes (``advance``: safe clocks, that no later record of that input is dated before), and a
learning step puts the answers in its models' label order. An outcome is certain when

* a label finds its example waiting within the wait: joined (``joined``), and the pair closed;
* a label is dated more than the wait before its example: never served;
* a label comes after its example's wait and the labels' clock is past it too (so no label
  within the wait can come any more): the example expires (``expired``) and the label is late;
* the features' clock is past a label's time + wait and its example has not come: never served;
* the labels' clock is past an example's time + wait and no label joined it: it expires;
* a pair is closed already: a label is a second (or late, if it expired), a features record a
  second; closed pairs are forgotten once both clocks are twice the wait past the example.

With safe clocks the answers do not depend on how the two inputs interleave, nor on how the
pairs are spread over buckets: each pair's outcome follows from its own records, as
``by_id.judge`` gives it for a bounded input (tests/unit/test_label_buckets.py), when each
pair's labels come in time order. Nothing here is per model: a model's clocks, its labels'
queue and what it learns are the learning step's.
"""
import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Optional

import numpy as np

from ..parse.records import DeadLetter, ExampleBlock
from . import by_id
from .call_log import CallLog
from .reasons import LATE_LABEL, NEVER_SERVED, SECOND_FEATURES, SECOND_LABEL
from .waiting import FEATURES, LABELS

_REASONS = {by_id.NEVER: NEVER_SERVED, by_id.SECOND: SECOND_LABEL, by_id.LATE: LATE_LABEL}


@dataclass
class Answers:
    """What a bucket's call answers. ``joined``: per labels source, (a block of the examples
    joined, each with its label at the label's place: source, position and time, the scores
    it was served with [n, K] or None, its features record's time); ``expired``: per features
    source, (a block of the examples expired, at their own place and time, their scores, the
    time they expired: time + wait); ``dead``: labels never served, second or late, and second
    features records."""
    joined: list = field(default_factory=list)
    expired: list = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)


class _Columns:
    """Columns that grow by appending, in amortized time (room doubled when full): ``n`` rows
    of each of ``names``."""

    def __init__(self, **dtypes) -> None:
        self.n = 0
        self.columns = {name: np.zeros(16, dtype) for name, dtype in dtypes.items()}

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][name][:self.__dict__["n"]]
        except KeyError:
            raise AttributeError(name) from None

    def append(self, k: int, **values) -> np.ndarray:
        """Append ``k`` rows (each column's values, or one for all); returns their indices."""
        room = len(next(iter(self.columns.values())))
        if self.n + k > room:
            room = max(2 * room, self.n + k)
            for name, column in self.columns.items():
                grown = np.zeros(room, column.dtype)
                grown[:self.n] = column[:self.n]
                self.columns[name] = grown
        for name, column in self.columns.items():
            column[self.n:self.n + k] = values[name]
        self.n += k
        return np.arange(self.n - k, self.n)

    def keep(self, rows: np.ndarray) -> None:
        """Only ``rows``, in that order."""
        for name, column in self.columns.items():
            self.columns[name] = column[:self.n][rows].copy()
        self.n = len(rows)


class _Waiting:
    """A bucket's records of one input that wait: columns (page, row, record time, alive) and
    the pair each is of, by slot; their pages (the blocks they came in, held while any of
    their rows waits)."""

    def __init__(self) -> None:
        self.slots = _Columns(page=np.int64, row=np.int64, time=np.float64, alive=bool)
        self.pairs: list[tuple] = []
        self.pages: dict[int, list] = {}  # page -> [block, rows of it waiting]
        self.next_page = 0

    @property
    def time(self) -> np.ndarray:
        return self.slots.time

    def add(self, block: ExampleBlock, rows: np.ndarray, pairs: list[tuple]) -> np.ndarray:
        """``rows`` of ``block`` start to wait, as one page; returns their slots."""
        page, self.next_page = self.next_page, self.next_page + 1
        self.pages[page] = [block, len(rows)]
        self.pairs += pairs
        return self.slots.append(
            len(rows), page=page, row=rows, alive=True, time=block.event_times[rows]
            if block.event_times is not None else math.inf)

    def stop(self, slots: np.ndarray) -> None:
        """The records at ``slots`` no longer wait (their pages go once none of theirs does)."""
        self.slots.alive[slots] = False
        pages, counts = np.unique(self.slots.page[slots], return_counts=True)
        for page, n in zip(pages.tolist(), counts.tolist()):
            held = self.pages[page]
            held[1] -= n
            if not held[1]:
                del self.pages[page]

    def due(self, wait: float, clock: float) -> np.ndarray:
        """The slots still waiting whose time + ``wait`` the ``clock`` is past."""
        return np.flatnonzero(self.slots.alive & (self.slots.time + wait < clock))

    def alive(self) -> np.ndarray:
        return np.flatnonzero(self.slots.alive)

    def block_of(self, slot: int) -> tuple[ExampleBlock, int]:
        """(the block a slot's record came in, its row there)"""
        return self.pages[int(self.slots.page[slot])][0], int(self.slots.row[slot])

    def taken(self, slots: np.ndarray) -> tuple[ExampleBlock, list[str]]:
        """(one block of the records at ``slots``, in that order, one take per page; the source
        of each)."""
        pages = self.slots.page[slots]
        order = np.argsort(pages, kind="stable")
        parts, starts = [], np.flatnonzero(np.r_[True, pages[order][1:] != pages[order][:-1]])
        for at, stop in zip(starts.tolist(), starts[1:].tolist() + [len(order)]):
            rows = order[at:stop]
            parts.append(self.pages[int(pages[rows[0]])][0].take(self.slots.row[slots[rows]]))
        block = parts[0] if len(parts) == 1 else ExampleBlock.stacked(parts)
        if len(order) and (order != np.arange(len(order))).any():
            block = block.take(np.argsort(order, kind="stable"))
        return block, [self.pages[page][0].source for page in pages.tolist()]

    def compact(self, index: dict) -> None:
        """Drop the slots that stopped waiting once they are most of them (``index``: pair ->
        slot or slots, renumbered)."""
        alive = self.slots.alive
        if len(alive) < 1024 or alive.sum() * 4 > len(alive):
            return
        live = np.flatnonzero(alive)
        renumber = {int(s): n for n, s in enumerate(live.tolist())}
        self.slots.keep(live)
        self.pairs = [self.pairs[s] for s in live.tolist()]
        for pair, slots in index.items():
            index[pair] = ([renumber[s] for s in slots] if isinstance(slots, list)
                           else renumber[slots])


class Bucket:
    """The examples and labels of one bucket's pairs that wait for each other, and the pairs it
    closed; ``wait`` in seconds of record time (None: everything waits for ``end``)."""

    def __init__(self, wait: Optional[float] = None) -> None:
        self.wait = math.inf if wait is None else float(wait)
        self.served, self.queued = _Waiting(), _Waiting()
        self.example_of: dict[tuple, int] = {}  # pair -> its example's slot
        self.labels_of: dict[tuple, list[int]] = {}  # pair -> its labels' slots
        # pair -> (whether it expired, else joined; its example's time)
        self.closed: dict[tuple, tuple[bool, float]] = {}
        # the time each closed pair is forgotten, and the pair (None once forgotten)
        self.closing = _Columns(at=np.float64)
        self.closing_pairs: list[tuple] = []
        self.clocks = [-math.inf, -math.inf]
        self.ended = False
        self.log = CallLog()  # (what persists it in Beam state: ``log_entries``)

    def log_entries(self) -> tuple[bool, list[bytes]]:
        """(whether to clear the persisted log first, entries to add to it): ``CallLog``."""
        return self.log.entries(self)

    @staticmethod
    def rebuild(entries: Iterable[bytes]) -> Optional["Bucket"]:
        """The bucket ``log_entries`` persisted (None for none): its calls replayed, whose
        answers were given when they were made."""
        return CallLog.rebuild(entries)

    @property
    def waiting(self) -> int:
        """Examples waiting for their label."""
        return len(self.example_of)

    def features(self, block: ExampleBlock) -> Answers:
        """A features block of the bucket's pairs (each with an id): each served example
        (its ``served_scores``, if any, kept with it) waits for its label, or joins one
        waiting; one that carries its own label is answered joined as it is; but a second
        record of its pair (closed, waiting, or after the first of the block in time, then
        position) is a dead letter."""
        self.log.record("features", (block,))
        out = Answers()
        times = block.event_times if block.event_times is not None else np.zeros(len(block))
        order = np.lexsort((block.positions, times)).tolist()
        pairs = list(zip(block.keys.to_pylist(), block.ids.to_pylist()))
        taken, firsts, seen = [], [], set()
        for r in order:
            pair = pairs[r]
            if pair in seen or pair in self.closed or pair in self.example_of:
                out.dead.append(DeadLetter(block.source, int(block.positions[r]),
                                           block.raw_record(r), SECOND_FEATURES))
            else:
                seen.add(pair)
                taken.append(r)
                firsts.append(pair)
        rows = np.asarray(taken, np.int64)
        own = ~np.isnan(block.labels[rows])  # (learned with their own label, as in any run)
        if own.any():
            self._learned(block, rows[own], [p for p, o in zip(firsts, own.tolist()) if o], out)
        if not own.all():
            firsts = [p for p, o in zip(firsts, own.tolist()) if not o]
            slots = self.served.add(block, rows[~own], firsts)
            self.example_of.update(zip(firsts, slots.tolist()))
            self._judge(firsts, out)
        return out

    def _learned(self, block, rows, pairs, out):
        """Examples that carry their own label: answered joined at their own place, their
        pairs closed, and the labels of theirs already waiting seconds (or never served,
        those dated more than the wait before them)."""
        times = (block.event_times[rows] if block.event_times is not None
                 else np.full(len(rows), math.inf))
        part = block.take(rows)
        out.joined.append((replace(part, served_scores=None, restarts_midway=False),
                           part.served_scores, times))
        self._close(pairs, False, times)
        waiting = []
        for pair, time in zip(pairs, times.tolist()):
            for slot in self.labels_of.pop(pair, ()):
                waiting.append(slot)
                # (as ``by_id.judge``: one dated more than the wait before it never joins it)
                out.dead.append(self._label_dead(slot, NEVER_SERVED if time > float(
                    self.queued.time[slot]) + self.wait else SECOND_LABEL))
        if waiting:
            self.queued.stop(np.asarray(waiting, np.int64))

    def _label_dead(self, slot, reason):
        block, row = self.queued.block_of(slot)
        return DeadLetter(block.source, int(block.positions[row]), block.raw_record(row), reason)

    def labels(self, block: ExampleBlock) -> Answers:
        """A block of labels of the bucket's pairs (each with an id and a label): each joins its
        example, waits for it, or is a dead letter (a closed pair's: a second, late, or never
        served if dated more than the wait before its example)."""
        self.log.record("labels", (block,))
        out = Answers()
        pairs = list(zip(block.keys.to_pylist(), block.ids.to_pylist()))
        rows, taken = [], []
        times = (block.event_times if block.event_times is not None
                 else np.full(len(block), math.inf)).tolist()
        for r, pair in enumerate(pairs):
            closed = self.closed.get(pair)
            if closed is not None:
                expired, came = closed
                # (as ``by_id.judge``: dated more than the wait before its example, it never
                # joined it, whatever did)
                out.dead.append(DeadLetter(
                    block.source, int(block.positions[r]), block.raw_record(r),
                    NEVER_SERVED if came > times[r] + self.wait else
                    LATE_LABEL if expired else SECOND_LABEL))
            else:
                rows.append(r)
                taken.append(pair)
        if rows:
            slots = self.queued.add(block, np.asarray(rows, np.int64), taken)
            for pair, slot in zip(taken, slots.tolist()):
                self.labels_of.setdefault(pair, []).append(slot)
            self._judge(list(dict.fromkeys(taken)), out)
        return out

    def advance(self, features_clock: float, labels_clock: float) -> Answers:
        """Each input's clock (record time, s: no later record of it is dated before),
        never moved back: what either is past answers (examples expired, labels never
        served), and closed pairs both are twice the wait past are forgotten."""
        clocks, out = self.clocks, Answers()
        if features_clock <= clocks[FEATURES] and labels_clock <= clocks[LABELS]:
            return out
        self.log.record("advance", (features_clock, labels_clock))
        clocks[FEATURES] = max(clocks[FEATURES], features_clock)
        clocks[LABELS] = max(clocks[LABELS], labels_clock)
        due = {self.served.pairs[s] for s in self.served.due(self.wait, clocks[LABELS])}
        due.update(self.queued.pairs[s] for s in self.queued.due(self.wait, clocks[FEATURES]))
        if due:
            self._judge(sorted(due, key=str), out)
        self._forget()
        return out

    def end(self) -> Answers:
        """The end of the input: every example still waiting expires (at its time + the wait,
        infinite without one), every label still waiting was never served."""
        self.log.record("end", ())
        self.ended = True
        out = Answers()
        self._judge(list(self.example_of)
                    + [p for p in self.labels_of if p not in self.example_of], out)
        return out

    def _judge(self, pairs: list[tuple], out: Answers) -> None:
        """Judge ``pairs`` (none closed) by their waiting records (``by_id.judge``), and answer
        what is certain (the module's docstring)."""
        examples = np.array([self.example_of.get(p, -1) for p in pairs], np.int64)
        has_example = examples >= 0
        e_code = np.flatnonzero(has_example)
        e_slot = examples[has_example]
        l_slot = np.array([s for p in pairs for s in self.labels_of.get(p, ())], np.int64)
        l_code = np.repeat(np.arange(len(pairs)), [len(self.labels_of.get(p, ())) for p in pairs])
        labels = self.queued
        l_time = labels.time[l_slot]
        order = np.lexsort((labels.slots.row[l_slot], labels.slots.page[l_slot], l_time))
        l_slot, l_code, l_time = l_slot[order], l_code[order], l_time[order]
        outcome, joins, joined = by_id.judge(e_code, self.served.time[e_slot], l_code, l_time,
                                             self.wait)
        ended, wait = self.ended, self.wait
        f_clock, l_clock = self.clocks
        # (an example no label joined expires once no label within the wait can come)
        expires = ~joined & (ended | (self.served.time[e_slot] + wait < l_clock))
        expired_codes = e_code[expires]
        final = ((outcome == by_id.JOIN) | (outcome == by_id.SECOND)
                 | ((outcome == by_id.NEVER) & (has_example[l_code]
                                                | ended | (l_time + wait < f_clock)))
                 | ((outcome == by_id.LATE) & np.isin(l_code, expired_codes)))
        join_at = np.flatnonzero(outcome == by_id.JOIN)
        if len(join_at):
            e_of = np.searchsorted(e_code, l_code[join_at])
            self._answer_joined(l_slot[join_at], e_slot[e_of], out)
            self._close([pairs[c] for c in l_code[join_at].tolist()], False,
                         self.served.time[e_slot[e_of]])
        if expires.any():
            self._answer_expired(e_slot[expires], out)
            self._close([pairs[c] for c in expired_codes.tolist()], True,
                        self.served.time[e_slot[expires]])
        for n in np.flatnonzero(final & (outcome != by_id.JOIN)).tolist():
            out.dead.append(self._label_dead(int(l_slot[n]), _REASONS[int(outcome[n])]))
        stopped_examples = np.concatenate([e_slot[joined], e_slot[expires]])
        for slot in stopped_examples.tolist():
            del self.example_of[self.served.pairs[slot]]
        if len(stopped_examples):
            self.served.stop(stopped_examples)
        stopped_labels = l_slot[final]
        for slot in stopped_labels.tolist():
            pair = labels.pairs[slot]
            left = self.labels_of[pair]
            left.remove(slot)
            if not left:
                del self.labels_of[pair]
        if len(stopped_labels):
            labels.stop(stopped_labels)
        self.served.compact(self.example_of)
        labels.compact(self.labels_of)

    def _answer_joined(self, l_slots: np.ndarray, e_slots: np.ndarray, out: Answers) -> None:
        """Joined: each example's features with its label, at the label's place, per labels
        source, in the labels' order."""
        features, _ = self.served.taken(e_slots)
        labels, of = self.queued.taken(l_slots)
        came = self.served.time[e_slots]
        sources = np.array(of, dtype=object)
        for source in dict.fromkeys(of):
            rows = np.flatnonzero(sources == source)
            part, label = features.take(rows), labels.take(rows)
            times = label.event_times
            out.joined.append((replace(part, source=source, positions=label.positions,
                                       labels=label.labels, event_times=times,
                                       served_scores=None, restarts_midway=False),
                               part.served_scores, came[rows]))

    def _answer_expired(self, e_slots: np.ndarray, out: Answers) -> None:
        block, of = self.served.taken(e_slots)
        at = self.served.time[e_slots] + self.wait
        sources = np.array(of, dtype=object)
        for source in dict.fromkeys(of):
            rows = np.flatnonzero(sources == source)
            part = block.take(rows)
            out.expired.append((replace(part, source=source, served_scores=None,
                                        restarts_midway=False),
                                part.served_scores, at[rows]))

    def _close(self, pairs: list[tuple], expired: bool, times: np.ndarray) -> None:
        for pair, time in zip(pairs, times.tolist()):
            self.closed[pair] = (expired, time)
        self.closing.append(len(pairs), at=times + 2 * self.wait)
        self.closing_pairs += pairs

    def _forget(self) -> None:
        """Forget the closed pairs both clocks are twice the wait past (the features clock
        alone while no label has come)."""
        clocks = [c for c in self.clocks if c > -math.inf]
        if not clocks or not self.closing.n:
            return
        gone = self.closing.at < min(clocks)
        if not gone.any():
            return
        for n in np.flatnonzero(gone).tolist():
            del self.closed[self.closing_pairs[n]]
        kept = np.flatnonzero(~gone)
        self.closing.keep(kept)
        self.closing_pairs = [self.closing_pairs[n] for n in kept.tolist()]
