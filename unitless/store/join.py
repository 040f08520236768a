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
time the model key's records have reached there (``_advance``), not the reader's. An expired
example is dropped, or learned with ``expired_label`` at its expiry time's place among its
model's labels. A bounded input is joined whole at its end, example id by example id on
record time (``joined_in_time_order``, ``labels.by_id``), and a record dated beyond ``max_skew``
after the reader's clock is refused (a wrong clock must not expire what waits). See
docs/delayed-outcomes.md.
"""
import heapq
import itertools
import math
import pickle
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..connectors.records import DeadLetter, ExampleBlock
from ..labels import by_id
from ..labels.closed import ClosedIds
from ..learner.names import merged_names

# dead letter reasons
SECOND_LABEL = "a second label for an example id already learned"
SECOND_FEATURES = "a second features record for an example id already waiting or learned"
NEVER_SERVED = "a label for an example id whose features never came (within --label-wait)"
LATE_LABEL = "a label that came after its example's --label-wait had passed (it expired)"
NO_LABEL = "a labels record without a label"
NO_ID = "a labels record without an example id"
NO_KEY = "a labels record without its model key (--model-key-column)"
AHEAD_OF_CLOCK = ("a record dated more than --max-time-skew after the reader's clock when it was "
                  "read: its clock is wrong, and its time would expire what waits")

FEATURES, LABELS = 0, 1  # the two inputs, as indices of a join's clocks
# begins each part of a logged snapshot, before the part's index (4 bytes, big-endian so that
# the parts sort in order); a logged call's pickle never begins with it
_SNAPSHOT_PART = b"\x00S"


def dated_ahead(block, now, max_skew):
    """The rows of ``block`` dated beyond ``max_skew`` after ``now`` (s; None: no bound): a
    clock that is wrong, not a time that has come."""
    if max_skew is None or now is None or block.event_times is None:
        return []
    return np.flatnonzero(block.event_times > now + max_skew).tolist()


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


class LabelJoin:
    """A model group's join: a ``ModelJoin`` per model key that has anything waiting (``wait``
    None: everything waits for the end of the input)."""
    COMPACT_BELOW = 4  # a block whose waiting rows fall under 1/4 of it is cut down to them
    # (s) a source whose newest record is this much (or the wait, if longer) behind its input's
    # newest no longer holds the input's clock back: a quiet partition must not hold what
    # waits for ever
    SOURCE_LAG = 3600.0

    SNAPSHOT_AFTER = 4 << 20  # bytes logged (beyond twice the last snapshot's) before the next
    # bytes of a snapshot's part: each is a value of its own in Beam state, whose values stay
    # under 1 MiB (a call logged larger is replaced by a snapshot)
    SNAPSHOT_PART = (1 << 20) - 64
    max_skew = None  # (s) a record further ahead of the reader's clock is refused; None: any
    in_time_order = False  # a bounded input's whole join at once (``joined_in_time_order``)
    ordered_once = False  # (``joined_in_time_order`` has been called)
    keyed = False  # records name their model key (--model-key-column): a label without is refused

    def __init__(self, wait=None, expired_label=None, max_skew=None, in_time_order=False,
                 keyed=False):
        self.wait, self.expired_label = wait, expired_label
        self.max_skew, self.in_time_order, self.keyed = max_skew, in_time_order, keyed
        self.ordered_once = False  # (``joined_in_time_order`` has been called)
        self.models = {}
        self.seq = 0
        self.counts = dict(waiting=0, expired=0, expired_learned=0, replayed=0)
        self.delays = []  # label time less example time (s) of each join since ``take_delays``
        # what persists it (``log_entries``): the calls that changed it since the last
        # snapshot, numbered; the bytes of that snapshot (None: none yet) and of the calls
        self.log, self.logged, self.snapshot_bytes, self.log_bytes = [], 0, None, 0
        self.replaying = False

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "log"}

    def _record(self, call, *args):
        """Log a call that changes the join (replayed by ``rebuild``)."""
        if not self.replaying:
            data = pickle.dumps((call, args), protocol=pickle.HIGHEST_PROTOCOL)
            self.logged += 1
            self.log.append(self.logged.to_bytes(8, "little") + data)
            self.log_bytes += len(data)
            if len(data) > self.SNAPSHOT_PART:
                self.snapshot_bytes = None  # (the next ``log_entries`` snapshots, in parts)

    def log_entries(self):
        """(whether to clear the persisted log first, entries to add to it): the calls logged
        since the last call, or, once they outgrow the last snapshot (a served example is
        logged once, not written again with every change), a snapshot of the whole join."""
        if self.snapshot_bytes is None or (self.log_bytes
                                           > self.SNAPSHOT_AFTER + 2 * self.snapshot_bytes):
            data = pickle.dumps(("snapshot", self), protocol=pickle.HIGHEST_PROTOCOL)
            self.log, self.snapshot_bytes, self.log_bytes = [], len(data), 0
            number, step = self.logged.to_bytes(8, "little"), self.SNAPSHOT_PART
            return True, [number + _SNAPSHOT_PART + part.to_bytes(4, "big") + data[at:at + step]
                          for part, at in enumerate(range(0, len(data), step))]
        entries, self.log = self.log, []
        return False, entries

    @staticmethod
    def rebuild(entries):
        """The join that ``log_entries`` persisted as ``entries`` (in any order): its last
        snapshot, then the calls logged since, replayed (their outputs were learned when they
        were made); None for none."""
        join, logged = None, 0
        ordered = sorted((int.from_bytes(e[:8], "little"), e[8:]) for e in entries)
        for number, same in itertools.groupby(ordered, key=lambda entry: entry[0]):
            datas = [data for _, data in same]  # (a snapshot's parts, or one call)
            data = b"".join(part[len(_SNAPSHOT_PART) + 4:] for part in datas
                            ) if datas[0].startswith(_SNAPSHOT_PART) else datas[0]
            call, args = pickle.loads(data)
            if call == "snapshot":
                join, logged = args, 0
                join.replaying, join.snapshot_bytes = True, len(data)
            else:
                getattr(join, call)(*args)
                logged += len(data)
            join.logged = number  # (the calls it logs next are numbered after these)
        if join is not None:
            join.log, join.log_bytes, join.replaying = [], logged, False
            join.counts, join.delays = dict.fromkeys(join.counts, 0), []
        return join

    @property
    def state_bytes(self):
        """Bytes of its persisted log: about what it holds, without walking it (``nbytes``)."""
        return (self.snapshot_bytes or 0) + self.log_bytes

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

    def take_counts(self):
        """The accounting's terms since the last call (``accounting.Tally``): examples that
        started waiting less those that stopped, expired, expired and learned, and records a
        resumed run read again (``replayed``, ``labels``)."""
        counts, self.counts = self.counts, dict.fromkeys(self.counts, 0)
        return counts

    def take_delays(self):
        """The time from each example to its label (s; below 0: the label came first) of the
        examples joined since the last call, where both records have a time."""
        delays, self.delays = self.delays, []
        return delays

    def screen(self, key, block, firsts=None):
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

    def firsts_in_time_order(self, blocks, now):
        """{source: positions}: of a bounded input's features ``blocks`` (a file each, in the
        order given), the first record of each model key's id in record time (then file and
        line), among those neither read again after a resume (``replayed``) nor dated ahead of
        ``now`` (``refuse_ahead``): for ``screen``, which refuses the others."""
        keys, ids, times, sources, positions = [], [], [], [], []
        for j, block in enumerate(blocks):
            keep = ~self._replayed(block) & block.ids.is_valid().to_numpy(zero_copy_only=False)
            keep[self._ahead(block, now)] = False
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

    def refuse_ahead(self, block, now):
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

    def labeled(self, key, block):
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
            self._close(join, i, False, time)

    def features(self, source, positions, keys, times, served):
        """A features block of ``source`` (its rows' ``positions``, model ``keys`` and record
        ``times``, which move the features clock, in position order) and what the group's
        models served of it, ``served`` [(model key, block, scores [n, K])]: each served
        example with an id waits for its label."""
        self._record("features", source, positions, keys, times, served)
        out = Released()
        entries = self._served_entries(source, served)
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
            self._advance(key, self._of(key), FEATURES, source, time, out)
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
            self._expire_due(key, join, out)

    def labels(self, block, now=None):
        """A labels block of the group's model keys -> what its labels let the models learn
        (``Released.result``): a label whose features wait is learned with them, unless labels
        of its model before it still wait for theirs; the others wait (``pending``). A label
        dated beyond ``max_skew`` after ``now`` (the reader's clock) is refused."""
        self._record("labels", block, now)
        out = Released()
        block, again = self._labels_taken(block, now, out)
        rows = Rows(block)
        for q in np.argsort(rows.block.positions, kind="stable").tolist():
            self._label(rows, q, again[q], out)
        return out.result()

    def _labels_taken(self, block, now, out):
        """A labels block's rows the join takes and which of them a resumed run read again
        (``again``); the others are dead letters (in ``out``): without an id, a model key
        (``keyed``: it would wait in the model of no key, for features that never come there)
        or a label, or dated beyond ``max_skew`` after ``now``."""
        again = np.asarray(self._judged(block), dtype=bool)
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
            self._advance(key, join, LABELS, source, rows.time(q), out)
        if again:
            self.counts["replayed"] += 1
            return
        position = int(rows.block.positions[q])
        join.judged[source] = max(position, join.judged.get(source, -1))
        join.pending.append((rows, q))
        join.labeled.setdefault(rows.ids[q], []).append(rows.time(q))
        self._release(key, join, out)

    def joined_in_time_order(self, features, labels, now=None):
        """A bounded input's join, whole (``in_time_order``): every features source's records,
        ``features`` [(source, positions, model keys, record times, served)] as ``features``
        takes them, and every labels block, judged example id by example id on record time
        (``labels.by_id``), whatever the order of the records in their files. Returns
        ``Released.result``, each block made as it is taken: each model's examples to learn in
        record-time order (a label's time; an expired example's expiry, after the labels of
        that time), in runs of one labels file or of one features file's expired examples.
        Called once, at the input's end, whose state is cleared once learned: not logged."""
        if self.ordered_once:
            raise RuntimeError("the labels join of a bounded input took its records in two "
                               "parts: it joins them in time order only when it has them all")
        self.ordered_once = True
        out = Released()
        waiting = self._waiting_in_order(features)
        taken = _Labels([self._labels_taken(block, now, out) for block in labels])
        self.counts["replayed"] += int(taken.again.sum())
        closed = [(k, *j.closed.arrays()[:2]) for k, j in self.models.items()]
        codes = by_id.group_codes(
            pa.concat_arrays([waiting.keys, taken.block.keys, *(
                pa.repeat(pa.scalar(k, pa.string()), len(i)) for k, i, _ in closed)]),
            pa.concat_arrays([waiting.ids, taken.block.ids, *(i for _, i, _ in closed)]))
        nf, nl = len(waiting.keys), len(taken.block)
        order = taken.in_order()
        outcome, joins, joined = by_id.judge(
            codes[:nf], waiting.times, codes[nf:nf + nl][order], taken.times[order], self.wait,
            codes[nf + nl:], np.concatenate([np.zeros(0, bool), *(e for _, _, e in closed)]))
        for n in np.flatnonzero(outcome != by_id.JOIN).tolist():
            out.dead.append(taken.dead(int(order[n]), _REASONS[int(outcome[n])]))
        settled = self._settle(features, waiting, taken, order[outcome == by_id.JOIN],
                               joins[outcome == by_id.JOIN], joined)
        return self._learning(waiting, taken, settled, [f[0] for f in features]), out.dead

    def _waiting_in_order(self, features):
        """``joined_in_time_order``'s served examples with an id (``_Waiting``), in the order
        it takes them (time, file, line), the first of each model key and id only; ``features``'
        lists of them are emptied (one copy of them is enough)."""
        blocks, scores, sources = [], [], []
        for j, (source, _, _, _, served) in enumerate(features):
            for key, block, served_scores in served:
                owed = self._resumed(key)
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

    def _settle(self, features, waiting, taken, joining, joins, joined):
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
            join, name = self._of(names[code]), taken.source_names[source]
            join.judged[name] = max(position, join.judged.get(name, -1))

        f_times, ids = waiting.times, waiting.ids
        self._close_all(names, w_key[joins], ids.take(joins), False, f_times[joins])
        delays = taken.times[joining] - f_times[joins]
        self.delays += delays[np.isfinite(delays)].tolist()
        # (expired while records came, where a label of its model came past it; else at the
        # end of the input: closed with the expired label, else owed its label)
        expired = np.flatnonzero(~joined)
        at = f_times[expired] + self.wait
        self.counts["expired"] += len(expired)
        midway = at < clocks[w_key[expired], LABELS]
        self._close_all(names, w_key[expired[midway]], ids.take(expired[midway]), True,
                        f_times[expired[midway]])
        # (every id closed is kept, however far behind the clocks, unlike a stream's: a
        # resumed run reads its files again, and new ones may be dated before them)
        for code, clock in enumerate(clocks.tolist()):
            self._of(names[code]).clocks = clock
        ended = expired[~midway]
        if self.expired_label is not None:
            self._close_all(names, w_key[ended], ids.take(ended), True, f_times[ended])
            self.counts["expired_learned"] += len(expired)
        else:
            for r in ended.tolist():
                self._of(names[w_key[r]]).unlabeled.setdefault(
                    features[waiting.sources[r]][0], []).append(int(waiting.positions[r]))
            expired = expired[:0]
        learn = np.concatenate([
            np.stack([w_key[joins], taken.times[joining], np.zeros(len(joins)),
                      taken.sources[joining], taken.block.positions[joining], joining, joins]),
            np.stack([w_key[expired], f_times[expired] + self.wait, np.ones(len(expired)),
                      waiting.sources[expired], waiting.positions[expired],
                      np.full(len(expired), -1), expired])], axis=1)
        return learn[:, np.lexsort(learn[4::-1])], names

    def _close_all(self, names, key_codes, ids, expired, times):
        """Close ``ids`` (an array) of the models of ``key_codes`` at ``times``."""
        order = np.argsort(key_codes, kind="stable")
        codes, starts = np.unique(key_codes[order], return_index=True)
        for code, rows in zip(codes.tolist(), np.split(order, starts[1:])):
            first = self.seq + 1
            self.seq += len(rows)
            self._of(names[code]).closed.add_columns(
                ids.take(rows), np.full(len(rows), expired), np.arange(first, self.seq + 1),
                times[rows])

    def _learning(self, waiting, taken, settled, features_sources):
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
                block.labels = np.full(len(block), self.expired_label, dtype=np.float64)
            else:
                at = run[5].astype(np.int64)
                block.source = taken.source_names[source]
                block.positions = taken.block.positions[at]
                block.labels = taken.block.labels[at]
            yield key, block, scores, expired

    def _judged(self, block):
        """Which records of a labels block their models learned or judged before a resume."""
        encoded = pc.dictionary_encode(block.keys)
        done = [-1 if resumed is None else resumed.positions.get(block.source, -1)
                for resumed in map(self._resumed, encoded.dictionary.to_pylist())]
        codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
        return block.positions <= np.array(done + [-1], np.int64)[codes]  # (-1: no key)

    def resume_state(self, key, served):
        """What model ``key``'s checkpoint keeps of its join, for a resumed run (``restore``),
        JSON: given ``served`` ({features source: the last position it served there}), per
        features source the position before its oldest example still waiting (``rejoin``: a
        resumed run reads the source again from there) and the positions of those waiting
        (``waiting``: only they wait again), per labels source the position through which its
        labels were learned or judged (``labels``: only those after come again); and with a
        wait, the ids it joined or let expire that it still knows (``closed``,
        ``ClosedIds.to_json``; without a wait none, ``[]`` as before: the ids read again are
        closed again, ``replayed``)."""
        rejoin, join = dict(served), self.models.get(key)
        if join is None:
            return {"rejoin": rejoin, "waiting": {}, "labels": {},
                    "closed": [] if self.wait is None else ClosedIds().to_json()}
        labels, waiting = dict(join.judged), {}
        for source, owed in (join.resumed.waiting.items() if join.resumed else ()):
            if owed:  # (read again, not yet come)
                waiting[source] = list(owed)
                rejoin[source] = min(rejoin.get(source, math.inf), min(owed) - 1)
        for entry in join.pending:
            if entry[0] is not None:
                source = entry[0].block.source
                labels[source] = min(labels[source], int(entry[0].block.positions[entry[1]]) - 1)
        held = set()
        for rows, r in ([e[:2] for e in join.served.values()]
                        + [e[1][:2] for e in join.pending if e[0] is None]):
            held.add(rows.ids[r])
            source, position = rows.block.source, int(rows.block.positions[r])
            waiting.setdefault(source, []).append(position)
            rejoin[source] = min(rejoin.get(source, position), position - 1)
        for source, positions in join.unlabeled.items():
            waiting.setdefault(source, []).extend(positions)
            rejoin[source] = min(rejoin.get(source, math.inf), min(positions) - 1)
        closed = [] if self.wait is None else join.closed.to_json(held)
        return {"rejoin": rejoin, "waiting": {s: sorted(p) for s, p in waiting.items()},
                "labels": labels, "closed": closed}

    def restore(self, key, saved, positions):
        """A resumed run's model ``key``, whose checkpoint kept ``saved`` of its join
        (``resume_state``) and ``positions`` ({source: the last label it learned or example it
        served there}): what it joined or let expire is known again, and the records of its
        sources read again are told apart (``replayed``, ``served_before``, ``labels``)."""
        self._record("restore", key, saved, positions)
        join = self._of(key)
        closed = list(ClosedIds.from_json(saved["closed"]))
        if self.in_time_order:  # (as columns: a bounded join never forgets them)
            first = self.seq + 1
            self.seq += len(closed)
            join.closed.add_columns(
                pa.array([i for i, _, _ in closed], pa.string()), [e for _, e, _ in closed],
                np.arange(first, self.seq + 1),
                [math.inf if t is None else t for _, _, t in closed])
        else:
            for i, expired, time in closed:
                self._close(join, i, expired, math.inf if time is None else time)
        join.resumed = Resumed({**positions, **saved["labels"]}, dict(saved["rejoin"]),
                               {s: set(p) for s, p in saved["waiting"].items()},
                               bool(saved["labels"]))
        join.judged.update(saved["labels"])

    def replayed(self, key, block):
        """A features block of model ``key`` -> the block without the examples a resumed run
        read again that no longer waited at its checkpoint (counted ``replayed``; without a
        wait their ids are closed again, as the whole input's are)."""
        done = np.flatnonzero(self._replayed(block)).tolist()
        if not done:
            return block
        self.counts["replayed"] += len(done)
        ids = block.ids.to_pylist()
        if self.wait is None:
            self._learned(key, [(ids[r], math.inf) for r in done if ids[r] is not None])
        return block.take(np.setdiff1d(np.arange(len(block)), done))

    def _replayed(self, block):
        """Which records of a features block a resumed run read again that no longer waited
        at their model's checkpoint (``replayed``)."""
        encoded = pc.dictionary_encode(block.keys)
        codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
        done = np.zeros(len(block), dtype=bool)
        for code, key in enumerate(encoded.dictionary.to_pylist()):
            resumed = self._resumed(key)
            if resumed is None or block.source not in resumed.rejoin:
                continue
            rows = codes == code
            positions = block.positions[rows]
            done[rows] = ((positions <= resumed.positions[block.source])
                          & ~np.isin(positions, list(resumed.waiting.get(block.source, ()))))
        return done

    def served_before(self, key, block):
        """A features block of model ``key`` (``replayed`` and ``screen``ed) -> (its examples
        to learn or serve, those it served before a resume, which wait for their labels again
        without being served again: counted ``replayed``; None if none)."""
        resumed = self._resumed(key)
        if resumed is None or block.source not in resumed.rejoin:
            return block, None
        again = block.positions <= resumed.positions[block.source]
        if not again.any():
            return block, None
        self.counts["replayed"] += int(again.sum())
        return block.take(np.flatnonzero(~again)), block.take(np.flatnonzero(again))

    def end(self, key):
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
                    self._expire(key, join, i, rows.time(r) + (self.wait or math.inf))
            self._release(key, join, out, ended=True)
        return out.result()

    def _leave_unlabeled(self, join, i):
        """Example ``i`` expires at the end of the input, unlearned and not closed: its label
        may come in a resumed run."""
        rows, r, _ = join.served.pop(i)
        self._left(join, rows)
        self.counts["waiting"] -= 1
        self.counts["expired"] += 1
        join.unlabeled.setdefault(rows.block.source, []).append(int(rows.block.positions[r]))

    def _advance(self, key, join, side, source, time, out):
        """A record of model ``key`` from ``source`` on input ``side`` at ``time``: the model's
        clock of that input moves to the oldest newest time of the sources it has seen there
        (a source's records are taken to come in time order), or to ``SOURCE_LAG`` before the
        newest when a source lags further (its later records may then find their partners
        expired). What the model waits for on the other input past ``wait`` behind it expires:
        its examples (labels: its head, ``_release``)."""
        newest = join.newest[side]
        if time <= newest.get(source, -math.inf):
            return
        newest[source] = time
        times = newest.values()
        clock = max(join.clocks[side], min(times),
                    max(times) - max(self.wait, self.SOURCE_LAG))
        if clock <= join.clocks[side]:
            return
        join.clocks[side] = clock
        if side == LABELS:
            self._expire_due(key, join, out)
        elif join.pending:  # (its head may be a label no features can reach any more)
            self._release(key, join, out)
        # (by the features' clock alone while no label has come: ids of examples that carried
        # their own label must not pile up in a model that gets none; but not in a resumed
        # model that had labels, whose labels' clock starts again with those read again)
        clocks = [c for c in join.clocks if c > -math.inf
                  or (join.resumed is not None and join.resumed.labeled)]
        forget = min(clocks) if clocks else -math.inf
        while join.closing and join.closing[0][0] < forget:
            item = heapq.heappop(join.closing)
            if join.closed.get(item[2], (None, None))[1] == item[1]:
                if item[2] in join.labeled:  # (a label of it waits: it says which it is)
                    join.parked[item[2]] = item  # (forgotten once that label has gone)
                else:
                    del join.closed[item[2]]

    def _expire_due(self, key, join, out):
        """The model's examples no label can reach any more (the labels' clock is past their
        time + wait) expire, but those with a label within the wait that waits behind others
        (it joins them, ``_release``); then its head moves on."""
        heap, expired = join.expiring, False
        while heap and heap[0][0] < join.clocks[LABELS]:
            item = heapq.heappop(heap)
            entry = join.served.get(item[2])
            # (one with a label within the wait waiting behind others is not looked at again:
            # that label joins it when it reaches the head, or at the end of the input)
            if entry is not None and entry[2] == item[1] and not any(
                    abs(t - item[0] + self.wait) <= self.wait
                    for t in join.labeled.get(item[2], ())):
                self._expire(key, join, item[2], item[0])
                expired = True
        if expired:
            self._release(key, join, out)

    def _close(self, join, i, expired, time):
        seq = self._next()
        join.closed[i] = (expired, seq, time)
        if self.wait is not None and math.isfinite(time):
            heapq.heappush(join.closing, (time + 2 * self.wait, seq, i))

    def _expire(self, key, join, i, at):
        """Model ``key``'s example ``i`` expires at ``at`` (record time): dropped, or learned
        with the expired label among its model's labels by time (before the first waiting label
        later than ``at``)."""
        entry = join.served.pop(i)
        self._left(join, entry[0])
        self.counts["waiting"] -= 1
        self.counts["expired"] += 1
        self._close(join, i, True, entry[0].time(entry[1]))
        if self.expired_label is not None:
            place = len(join.pending)
            while place and _time(join.pending[place - 1]) > at:
                place -= 1
            join.pending.insert(place, (None, entry, at, self.expired_label))

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
                    self._expire(key, join, i, came + self.wait)  # (goes before this label)
                    continue
                if self.wait is not None and came > t + self.wait:
                    out.dead.append(label.dead(q, NEVER_SERVED))
                else:
                    del join.served[i]
                    out.add(key, (rows, r), head)
                    self.counts["waiting"] -= 1
                    if math.isfinite(t - came):
                        self.delays.append(t - came)
                    self._close(join, i, False, came)
                    self._left(join, rows)
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

    def _left(self, join, rows):
        """One of ``rows``' examples no longer waits: the block is cut down to those that do
        once they are few (its memory is held while any does)."""
        rows.waiting -= 1
        n = len(rows.block)
        if rows.waiting and n >= 64 and rows.waiting * self.COMPACT_BELOW < n:
            live = [(r, e[2]) for r, i in enumerate(rows.ids)
                    for e in (join.served.get(i),) if e is not None and e[0] is rows and e[1] == r]
            kept = Rows(rows.block.take([r for r, _ in live]), rows.scores[[r for r, _ in live]])
            for k, (r, seq) in enumerate(live):
                join.served[rows.ids[r]] = (kept, k, seq)

    @property
    def waiting_examples(self):
        return sum(len(j.served) for j in self.models.values())

    @property
    def nbytes(self):
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

    def holds(self, key):
        """Whether model ``key`` has anything waiting."""
        join = self.models.get(key)
        return join is not None and bool(join.served or join.pending)


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
