"""Delayed outcomes: served examples waiting for their labels, joined by id (``--labels``).

Free of Beam: a model group holds one ``LabelJoin`` beside its models; the learning step hands
it a features input's served examples (``features``) and a labels input's records
(``labels``), block by block in the order it learns them, and learns what they give back, each
model key's in that order. A model learns its joined examples in its labels' order: a label
whose features have not come waits (``pending``), and the model's later labels wait behind it,
so that the result does not depend on how the two inputs interleave.

With ``wait`` (``--label-wait``, seconds of the records' own time) an example and its label
join only when the label's time is at most ``wait`` after the example's, or the example's at
most ``wait`` after the label's; and what waits longer expires, on each input's clock: the
time the model key's records have reached there (``expiry.advance``), not the reader's. An expired
example is dropped, or learned with ``expired_label`` at its expiry time's place among its
model's labels. A bounded input is joined whole at its end, example id by example id on
record time (``joined_in_time_order``, ``labels.by_id``), and a record dated beyond ``max_skew``
after the reader's clock is refused (a wrong clock must not expire what waits). See
docs/delayed-outcomes.md.
"""
import heapq
import math
from typing import Any, Iterable, Iterator, Mapping, Optional

import numpy as np
import pyarrow.compute as pc

from ..parse.records import DeadLetter, ExampleBlock
from . import bounded, expiry, in_bulk, resume
from .call_log import CallLog
from .reasons import (AHEAD_OF_CLOCK, LATE_LABEL, NEVER_SERVED, NO_ID, NO_KEY,  # noqa: F401
                      NO_LABEL, SECOND_FEATURES, SECOND_LABEL, dated_ahead)
from .waiting import (FEATURES, LABELS, FeaturesInput, ModelJoin, Released, Rows, ServedBlocks,
                      ToLearn)



class LabelJoin:
    """A model group's join: a ``ModelJoin`` per model key that has anything waiting (``wait``
    None: everything waits for the end of the input)."""
    # (s) a source whose newest record is this much (or the wait, if longer) behind its input's
    # newest no longer holds the input's clock back: a quiet partition must not hold what
    # waits for ever
    SOURCE_LAG = 3600.0
    # a block whose records can only wait or join is taken in array operations (``in_bulk``);
    # False: every record one by one (the tests compare the two)
    IN_BULK = True

    max_skew = None  # (s) a record further ahead of the reader's clock is refused; None: any
    in_time_order = False  # a bounded input's whole join at once (``joined_in_time_order``)
    ordered_once = False  # (``joined_in_time_order`` has been called)
    keyed = False  # records name their model key (--model-key-column): a label without is refused
    delays: list[float]

    def __init__(self, wait: Optional[float] = None, expired_label: Optional[float] = None,
                 max_skew: Optional[float] = None, in_time_order: bool = False,
                 keyed: bool = False) -> None:
        self.wait, self.expired_label = wait, expired_label
        self.max_skew, self.in_time_order, self.keyed = max_skew, in_time_order, keyed
        self.ordered_once = False  # (``joined_in_time_order`` has been called)
        self.models: dict[str, ModelJoin] = {}
        self.seq = 0
        self.counts = dict(waiting=0, expired=0, expired_learned=0, replayed=0)
        self.delays = []  # label time less example time (s) of each join since ``take_delays``
        self.log = CallLog()  # (what persists it: ``log_entries``)

    def _record(self, call, *args):
        """Log a call that changes the join (replayed by ``rebuild``)."""
        self.log.record(call, args)

    def log_entries(self) -> tuple[bool, list[bytes]]:
        """(whether to clear the persisted log first, entries to add to it): ``CallLog``."""
        return self.log.entries(self)

    @staticmethod
    def rebuild(entries: Iterable[bytes]) -> Optional["LabelJoin"]:
        """The join that ``log_entries`` persisted as ``entries`` (in any order), None for none:
        its calls replayed, whose outputs were learned when they were made, counted then."""
        join = CallLog.rebuild(entries)
        if join is not None:
            join.counts, join.delays = dict.fromkeys(join.counts, 0), []
        return join

    @property
    def state_bytes(self) -> int:
        """Bytes of its persisted log: about what it holds, without walking it (``nbytes``)."""
        return self.log.nbytes

    def _of(self, key):
        join = self.models.get(key)
        if join is None:
            join = self.models[key] = ModelJoin()
        return join

    def _resumed(self, key):
        """What model ``key`` did before a resume (``Resumed``), None if it was not resumed."""
        join = self.models.get(key)
        return join.resumed if join is not None else None

    def _next(self):
        self.seq += 1
        return self.seq

    def take_counts(self) -> dict[str, int]:
        """The accounting's terms since the last call (``accounting.Tally``): examples that
        started waiting less those that stopped, expired, expired and learned, and records a
        resumed run read again (``replayed``, ``labels``)."""
        counts, self.counts = self.counts, dict.fromkeys(self.counts, 0)
        return counts

    def take_delays(self) -> list[float]:
        """The time from each example to its label (s; below 0: the label came first) of the
        examples joined since the last call, where both records have a time."""
        delays, self.delays = self.delays, []
        return delays

    def screen(self, key: str, block: ExampleBlock, firsts: Optional[dict[str, np.ndarray]] = None
               ) -> tuple[ExampleBlock, list[DeadLetter]]:
        """A features block of model ``key`` -> (the block without the examples whose id is
        already waiting or learned, or came earlier in the block; their dead letters).
        Earlier is in record time with ``in_time_order``, else in the block; with ``firsts``
        (``firsts_in_time_order``: every source's first record of each id) a record that is
        not its id's first is refused."""
        join = self.models.get(key, ModelJoin())
        order = np.asarray(self._order(block), np.int64)
        encoded = pc.dictionary_encode(block.ids.take(order))
        ids = encoded.dictionary.to_pylist()
        codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
        # (index -1, no id: never again)
        known = np.append(np.array([i in join.served for i in ids], dtype=bool)
                          | join.closed.contains(ids), False)
        first = codes < 0
        if firsts is None:
            first[np.unique(codes, return_index=True)[1]] = True
        else:
            first |= np.isin(block.positions[order], firsts.get(block.source, ()))
        again = np.sort(order[~first | known[codes]])
        return block.screen([(r, SECOND_FEATURES) for r in again.tolist()])

    def refuse_ahead(self, block: ExampleBlock, now: Optional[float]
                     ) -> tuple[ExampleBlock, list[DeadLetter]]:
        """A features block -> (the block without its records dated beyond ``max_skew`` after
        ``now``, the reader's clock; their dead letters)."""
        return block.screen([(r, AHEAD_OF_CLOCK) for r in self._ahead(block, now)])

    def _ahead(self, block, now):
        return dated_ahead(block, now, self.max_skew)

    def _order(self, block):
        """The rows of ``block`` in the order the join takes them: by record time (then
        position) with ``in_time_order``, else as the block holds them."""
        if self.in_time_order and block.event_times is not None:
            return np.lexsort((block.positions, block.event_times)).tolist()
        return range(len(block))

    def labeled(self, key: str, block: ExampleBlock) -> None:
        """Model ``key`` learns the examples of a features block that carry their own label
        (as in any run): their ids count as learned, so that a label or a features record
        for one of them later is a dead letter (learned once)."""
        rows = np.flatnonzero(~block.served)
        ids = block.ids.to_pylist()
        done = [(ids[r], float(block.event_times[r]) if block.event_times is not None
                 else math.inf) for r in rows if ids[r] is not None]
        if done:
            self._learned(key, done)

    def _learned(self, key, done):
        self._record("_learned", key, done)
        join = self._of(key)
        for i, time in done:
            expiry.close(self, join, i, False, time)

    def features(self, source: str, positions: np.ndarray, keys: list[str],
                 times: Optional[np.ndarray], served: ServedBlocks
                 ) -> tuple[list[ToLearn], list[DeadLetter]]:
        """A features block of ``source`` (its rows' ``positions``, model ``keys`` and record
        ``times``, which move the features clock, in position order) and what the group's
        models served of it, ``served`` [(model key, block, scores [n, K])]: each served
        example with an id waits for its label."""
        self._record("features", source, positions, keys, times, served)
        out = Released()
        entries = self._served_entries(source, served)
        if self.IN_BULK and in_bulk.features(self, source, positions, keys, times, entries):
            return out.result()
        at = positions.tolist()
        for n in np.argsort(positions, kind="stable").tolist():
            self._feature(source, keys[n], None if times is None else float(times[n]),
                          entries.get(at[n]), out)
        return out.result()

    def _served_entries(self, source, served):
        """{position: (model key, Rows, row)} of what the group's models served of a features
        block of ``source`` (``features``)."""
        entries = {}
        for key, rows_block, scores in served:
            rows = Rows(rows_block, scores)
            owed = self._resumed(key)
            owed = owed.waiting.get(source) if owed is not None else None
            for r, p in enumerate(rows_block.positions.tolist()):
                entries[p] = (key, rows, r)
                if owed:  # (come again: it waits as it did)
                    owed.discard(p)
        return entries

    def _feature(self, source, key, time, entry, out):
        """A features record of model ``key`` at ``time``: it moves the features clock, and
        its served example (``entry``, None if none) waits."""
        if self.wait is not None:
            expiry.advance(self, key, self._of(key), FEATURES, source, time, out)
        if entry is not None:
            self._wait(*entry, out)

    def _wait(self, key, rows, r, out):
        i = rows.ids[r]
        join = self._of(key)
        if i is None or i in join.served:  # (no id: served only, it cannot be joined)
            rows.waiting -= 1
            return
        seq = self._next()
        join.served[i] = (rows, r, seq)
        self.counts["waiting"] += 1
        if self.wait is not None:
            heapq.heappush(join.expiring, (rows.time(r) + self.wait, seq, i))
        self._release(key, join, out)
        if self.wait is not None:  # (the labels' clock may be past it already)
            expiry.expire_due(self, key, join, out)

    def labels(self, block: ExampleBlock, now: Optional[float] = None
               ) -> tuple[list[ToLearn], list[DeadLetter]]:
        """A labels block of the group's model keys -> what its labels let the models learn
        (``Released.result``): a label whose features wait is learned with them, unless labels
        of its model before it still wait for theirs; the others wait (``pending``). A label
        dated beyond ``max_skew`` after ``now`` (the reader's clock) is refused."""
        self._record("labels", block, now)
        out = Released()
        block, again = self._labels_taken(block, now, out)
        rows = Rows(block)
        if self.IN_BULK and in_bulk.labels(self, rows, again, out):
            return out.result()
        for q in np.argsort(rows.block.positions, kind="stable").tolist():
            self._label(rows, q, again[q], out)
        return out.result()

    def _labels_taken(self, block, now, out):
        """A labels block's rows the join takes and which of them a resumed run read again
        (``again``); the others are dead letters (in ``out``): without an id, a model key
        (``keyed``: it would wait in the model of no key, for features that never come there)
        or a label, or dated beyond ``max_skew`` after ``now``."""
        again = np.asarray(resume.judged_before(self, block), dtype=bool)
        reasons = np.full(len(block), None, dtype=object)
        reasons[np.isnan(block.labels)] = NO_LABEL
        if self.keyed:
            reasons[~pc.fill_null(pc.greater(pc.utf8_length(block.keys), 0), False)
                    .to_numpy(zero_copy_only=False)] = NO_KEY
        reasons[block.ids.is_null().to_numpy(zero_copy_only=False)] = NO_ID
        reasons[self._ahead(block, now)] = AHEAD_OF_CLOCK
        reasons[again] = None
        refused = [(r, reasons[r]) for r in np.flatnonzero(reasons != None).tolist()]  # noqa: E711
        block, dead = block.screen(refused)
        out.dead += dead
        return block, np.delete(again, [r for r, _ in refused]).tolist()

    def _label(self, rows, q, again, out):
        """Label ``q`` of ``rows``: it moves the labels clock, and waits in its model's queue
        (read ``again`` after a resume: counted, nothing else)."""
        key, source = rows.keys[q], rows.block.source
        join = self._of(key)
        if self.wait is not None:
            expiry.advance(self, key, join, LABELS, source, rows.time(q), out)
        if again:
            self.counts["replayed"] += 1
            return
        position = int(rows.block.positions[q])
        join.judged[source] = max(position, join.judged.get(source, -1))
        join.pending.append((rows, q))
        join.labeled.setdefault(rows.ids[q], []).append(rows.time(q))
        self._release(key, join, out)

    def joined_in_time_order(self, features: list[FeaturesInput], labels: list[ExampleBlock],
                             now: Optional[float] = None
                             ) -> tuple[Iterator[ToLearn], list[DeadLetter]]:
        """A bounded input's join, whole (``in_time_order``): ``labels.bounded``."""
        return bounded.joined_in_time_order(self, features, labels, now)

    def resume_state(self, key: str, served: Mapping[str, int]) -> dict[str, Any]:
        """What model ``key``'s checkpoint keeps of its join, JSON: ``resume.resume_state``."""
        return resume.resume_state(self, key, served)

    def restore(self, key: str, saved: dict[str, Any], positions: dict[str, int]) -> None:
        """A resumed run's model ``key`` (``resume.restore``), logged: a rebuilt join restores
        it again."""
        self._record("restore", key, saved, positions)
        resume.restore(self, key, saved, positions)

    def replayed(self, key: str, block: ExampleBlock) -> ExampleBlock:
        """A features block without what a resumed run read again (``resume.replayed``)."""
        return resume.replayed(self, key, block)

    def served_before(self, key: str, block: ExampleBlock
                      ) -> tuple[ExampleBlock, Optional[ExampleBlock]]:
        """A features block's examples to learn or serve, and those served before a resume
        (``resume.served_before``)."""
        return resume.served_before(self, key, block)

    def firsts_in_time_order(self, blocks: list[ExampleBlock], now: Optional[float]
                             ) -> dict[str, np.ndarray]:
        """{source: positions} of each id's first features record (``bounded``)."""
        return bounded.firsts_in_time_order(self, blocks, now)

    def end(self, key: str) -> tuple[list[ToLearn], list[DeadLetter]]:
        """The end of the input: model ``key``'s labels still waiting for features are dead
        letters (those behind them learned), and then its examples still waiting expire (no
        label can come in this run); returns what that lets it learn (``Released.result``).
        Without an expired label they are owed their label still (``unlabeled``): a resumed
        run with more labels joins them, as it would have had they come in this run."""
        out = Released()
        join = self.models.get(key)  # (kept: a checkpoint at the end keeps what it judged)
        if join is not None:
            self._release(key, join, out, ended=True)  # (each label joins, or never can)
            for i, (rows, r, seq) in sorted(join.served.items(),
                                            key=lambda e: (e[1][0].time(e[1][1]), e[1][2])):
                if self.expired_label is None:
                    self._leave_unlabeled(join, i)
                else:
                    expiry.expire(self, key, join, i, rows.time(r) + (self.wait or math.inf))
            self._release(key, join, out, ended=True)
        return out.result()

    def _leave_unlabeled(self, join, i):
        """Example ``i`` expires at the end of the input, unlearned and not closed: its label
        may come in a resumed run."""
        rows, r, _ = join.served.pop(i)
        join.left(rows)
        self.counts["waiting"] -= 1
        self.counts["expired"] += 1
        join.unlabeled.setdefault(rows.block.source, []).append(int(rows.block.positions[r]))

    def _release(self, key, join, out, ended=False):
        """Learn from the head of ``join.pending`` while its labels' features wait: a label for
        an id learned or expired already is a dead letter, as is one whose features did not come
        within the wait (or by the end of the input)."""
        pending = join.pending
        while pending:
            head = pending[0]
            if head[0] is None:  # an expired example, learned with the expired label
                out.add(key, head[1], head)
                self.counts["expired_learned"] += 1
                pending.popleft()
                continue
            label, q = head
            i, t = label.ids[q], label.time(q)
            if i in join.closed:
                out.dead.append(label.dead(q, LATE_LABEL if join.closed[i][0] else SECOND_LABEL))
            elif i in join.served:
                rows, r, _ = join.served[i]
                came = rows.time(r)
                if self.wait is not None and t > came + self.wait:
                    expiry.expire(self, key, join, i, came + self.wait)  # (goes before this label)
                    continue
                if self.wait is not None and came > t + self.wait:
                    out.dead.append(label.dead(q, NEVER_SERVED))
                else:
                    del join.served[i]
                    out.add(key, (rows, r), head)
                    self.counts["waiting"] -= 1
                    if math.isfinite(t - came):
                        self.delays.append(t - came)
                    expiry.close(self, join, i, False, came)
                    join.left(rows)
            elif ended or (self.wait is not None and t + self.wait < join.clocks[FEATURES]):
                out.dead.append(label.dead(q, NEVER_SERVED))
            else:
                break
            pending.popleft()
            times = join.labeled[i]
            times.remove(t)
            if not times:
                del join.labeled[i]
                if i in join.parked:
                    heapq.heappush(join.closing, join.parked.pop(i))

    @property
    def waiting_examples(self) -> int:
        return sum(len(j.served) for j in self.models.values())

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks whose examples and labels wait (their columns)."""
        blocks = {}
        for j in self.models.values():
            for rows, *_ in j.served.values():
                blocks[id(rows)] = rows
            for entry in j.pending:
                rows = entry[0] if entry[0] is not None else entry[1][0]
                blocks[id(rows)] = rows
        return sum(r.block.nbytes + (r.scores.nbytes if r.scores is not None else 0)
                   for r in blocks.values())

    def holds(self, key: str) -> bool:
        """Whether model ``key`` has anything waiting."""
        join = self.models.get(key)
        return join is not None and bool(join.served or join.pending)
