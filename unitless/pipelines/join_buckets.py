"""The labels join as a step keyed by example id (docs/delayed-outcomes.md, "Waiting examples
spread by id"): served examples and labels keyed by the bucket of their (model key, id)
(``by_bucket``), so that what waits spreads over every worker; each input's record-time clock
made from the readers' newest record times (``Clocks``) and sent to every bucket; and each
bucket (``labels.buckets.Bucket``) held in Beam state by ``JoinBuckets``, which hands on its
answers.

A clock must be safe where it is applied: no record of its input dated before it may still be
on its way to the bucket. Beam orders nothing between two paths (the records', the clock's),
but its watermark says what has arrived: a clock is sent stamped with the newest reader's
stamp of the blocks it was made from, and a bucket applies it once the watermark is past that
stamp, when every block read by then (and so every record dated before the clock, its sources
being read in time order) has reached it."""
import math
import pickle
import uuid
from typing import Any, Iterable, Iterator, Optional

import apache_beam as beam
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (BagStateSpec, ReadModifyWriteStateSpec, TimerSpec,
                                              on_timer)
from apache_beam.transforms.window import GlobalWindow, TimestampedValue
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..labels.buckets import Answers, Bucket
from ..labels.reasons import LATE_LABEL
from ..labels.waiting import FEATURES, LABELS
from ..parse.records import ExampleBlock
from ..store.groups import group_numbers
from .ordering import STATE_VALUE_BYTES

KINDS = ("features", "labels")  # (the inputs, in the order of their clocks' indices)
CLOCK = "clock"  # an element that moves a bucket's clocks
# what ``JoinBuckets`` hands on: ``Answers``' joined, expired and own examples, dead letters
JOINED, EXPIRED, OWN, DEAD = "joined", "expired", "own", "dead"
MAX_TICKS = 16  # clocks a bucket holds waiting for the watermark (more: every other dropped)


def bucket_numbers(keys: pa.Array, ids: pa.Array, buckets: int) -> np.ndarray:
    """The bucket (0 to ``buckets`` - 1) of each (model key, id) of two string arrays: CRC-32 of
    the key, a unit separator and the id (``group_numbers``), the same in every process."""
    pairs = pc.binary_join_element_wise(keys.fill_null(""), ids.fill_null(""), "\x1f")
    return group_numbers(pairs, buckets)


def bucket_key(number: int, buckets: int) -> str:
    return f"{number}/{buckets}"


def by_bucket(block: ExampleBlock, kind: str, buckets: int) -> Iterator[tuple[str, tuple]]:
    """A features or labels block -> (bucket key, (kind, the block's records of its pairs,
    with their raw records)). A features record without an id is served only: it joins
    nothing. Labels come screened (``LabelJoin``'s reasons: each has an id, a label and, with
    --model-key-column, a model key)."""
    has_id = block.ids.is_valid().to_numpy(zero_copy_only=False)
    if kind == KINDS[LABELS] and not has_id.all():
        raise ValueError("labels without an id reach the join: they are dead letters before")
    numbers = bucket_numbers(block.keys, block.ids, buckets)
    for number in sorted(set(numbers[has_id].tolist())):
        rows = (has_id & (numbers == number)).nonzero()[0]
        piece = block.take(rows).compact()  # (held and logged by its bucket: fewer bytes)
        piece.raw = None if block.raw is None else [block.raw[r] for r in rows.tolist()]
        yield bucket_key(number, buckets), (kind, piece)


class ByBucket(beam.DoFn):
    """A features or labels block -> ``by_bucket``'s pieces, the blocks of one source a bundle
    holds gathered first, until they hold ``ROWS_PER_BUCKET`` records a bucket or
    ``GATHER_BYTES``: a bucket's call costs about the same whatever its piece's length
    (benchmarks/results/label_join.md), and a reader's block cut over many buckets leaves
    pieces a few rows long. A gathered piece is stamped with the earliest stamp of its blocks:
    the bundle holds the step's output watermark there until it ends, so no piece comes behind
    the watermark, and a clock stamped with any of its blocks' stamps is applied after it."""
    ROWS_PER_BUCKET = 512
    GATHER_BYTES = 64 << 20

    def __init__(self, kind: str, buckets: int) -> None:
        self.kind, self.buckets = kind, buckets

    def start_bundle(self) -> None:
        self.gathered: dict[tuple, list] = {}  # (source, window) -> [blocks, rows, bytes, stamp]

    def process(self, block, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam):
        group = (block.source, window)
        entry = self.gathered.setdefault(group, [[], 0, 0, timestamp])
        entry[0].append(block)
        entry[1] += len(block)
        entry[2] += block.nbytes
        entry[3] = min(entry[3], timestamp)
        if entry[1] >= self.ROWS_PER_BUCKET * self.buckets or entry[2] >= self.GATHER_BYTES:
            yield from self._split(group, self.gathered.pop(group))

    def finish_bundle(self):
        while self.gathered:
            group = next(iter(self.gathered))
            yield from self._split(group, self.gathered.pop(group))

    def _split(self, group: tuple, entry: list) -> Iterator[WindowedValue]:
        blocks, _, _, stamp = entry
        block = blocks[0]
        if len(blocks) > 1:
            block = ExampleBlock.stacked(blocks)
            raws = [b.raw for b in blocks]
            block.raw = None if any(r is None for r in raws) else [r for raw in raws for r in raw]
        for keyed in by_bucket(block, self.kind, self.buckets):
            yield WindowedValue(keyed, stamp, (group[1],))


def newest_time(block: ExampleBlock, kind: str) -> Iterator[tuple[str, tuple]]:
    """A block -> (the clocks' key, (input index, source, its newest record time)), if timed."""
    if block.event_times is not None and len(block):
        yield "", (KINDS.index(kind), block.source, float(block.event_times.max()))


class Clocks(beam.DoFn):
    """(the one key, (input index, source, newest record time)), stamped by its reader ->
    each input's clock, when either moves, to every one of ``buckets`` buckets: the oldest of
    its ``sources``' newest times (one not seen yet counting as -inf), but never more than
    ``lag`` behind the newest of them (a quiet source, or one not read yet, must not hold what
    waits for ever: its records then come behind the clock, judged as they come and counted,
    ``Bucket.behind``). Stamped with the newest stamp of the blocks seen, never moved back."""
    NEWEST = ReadModifyWriteStateSpec("newest", PickleCoder())

    def __init__(self, sources: dict[str, list[str]], buckets: int, lag: float) -> None:
        self.sources, self.buckets, self.lag = sources, buckets, lag

    def process(self, element, timestamp=beam.DoFn.TimestampParam,
                newest=beam.DoFn.StateParam(NEWEST)):
        _, (side, source, time) = element
        held = newest.read() or {"times": [{}, {}], "stamp": timestamp.micros,
                                 "clocks": [-math.inf, -math.inf]}
        times = held["times"][side]
        times[source] = max(time, times.get(source, -math.inf))
        held["stamp"] = max(held["stamp"], timestamp.micros)
        clocks = [self._clock(held["times"][s], self.sources[kind])
                  for s, kind in enumerate(KINDS)]
        clocks = [max(old, new) for old, new in zip(held["clocks"], clocks)]
        moved = clocks != held["clocks"]
        held["clocks"] = clocks
        newest.write(held)
        if moved:
            stamp = Timestamp(micros=held["stamp"])
            for number in range(self.buckets):
                yield TimestampedValue((bucket_key(number, self.buckets), (CLOCK, clocks)),
                                       stamp)

    def _clock(self, times: dict, sources: list[str]) -> float:
        if not times:
            return -math.inf
        known = [times.get(s, -math.inf) for s in sources] or list(times.values())
        return max(min(known), max(times.values()) - self.lag)


class JoinBuckets(beam.DoFn):
    """(bucket key, (kind, payload)) -> the bucket's answers, tagged: ``JOINED`` (block,
    scores, example times), ``EXPIRED`` (block, scores, expiry times), ``OWN`` (block, scores,
    times), ``DEAD`` (dead letters).

    The bucket persists as its log (``Bucket.log_entries``: each value under 1 MiB) and a token
    written with each change, by which a worker that holds it decoded knows it is the one in
    state (after a failed bundle, or on another worker, it is rebuilt from the log). Clocks
    wait for the watermark to pass their stamp (``TICKS``, at most ``MAX_TICKS``: one dropped
    is applied with the next, later); the end of the input ends it. Counted as the learning
    step counts its join (Beam metrics): examples waiting (starts less stops, summed over
    workers), expired, late labels, each joined example's label delay, records that came dated
    behind their input's clock, and each value written to state (``STATE_VALUE_BYTES``)."""
    LOG = BagStateSpec("log", BytesCoder())
    TOKEN = ReadModifyWriteStateSpec("token", BytesCoder())
    TICKS = ReadModifyWriteStateSpec("ticks", PickleCoder())  # [(stamp µs, clocks)] waiting
    TICK = TimerSpec("tick", TimeDomain.WATERMARK)
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def __init__(self, wait: Optional[float]) -> None:
        self.wait = wait
        self.waiting = Metrics.counter("unitless", "examples_waiting_for_labels")
        self.expired = Metrics.counter("unitless", "examples_expired_without_label")
        self.late = Metrics.counter("unitless", "late_labels")
        self.label_delay = Metrics.distribution("unitless", "label_delay_ms")
        self.behind = Metrics.counter("unitless", "records_behind_join_clock")
        self.state_value = Metrics.distribution("unitless", STATE_VALUE_BYTES)

    def setup(self) -> None:
        self.held: dict[str, tuple[bytes, Bucket]] = {}  # key -> (token, the bucket decoded)

    def process(self, element, log=beam.DoFn.StateParam(LOG),
                token=beam.DoFn.StateParam(TOKEN), ticks=beam.DoFn.StateParam(TICKS),
                tick=beam.DoFn.TimerParam(TICK), end=beam.DoFn.TimerParam(END),
                timestamp=beam.DoFn.TimestampParam):
        key, (kind, payload) = element
        end.set(GlobalWindow().max_timestamp())
        if kind == CLOCK:
            waiting = sorted((ticks.read() or []) + [(timestamp.micros, payload)])
            if len(waiting) > MAX_TICKS:  # (a later clock is past an earlier one)
                waiting = waiting[(len(waiting) - 1) % 2::2]  # (the last kept)
            self.state_value.update(len(pickle.dumps(waiting)))
            ticks.write(waiting)
            # (past the stamp, not at it: another block stamped so may still be on its way)
            tick.set(Timestamp(micros=waiting[0][0] + 1000))
            return
        bucket = self._bucket(key, log, token)
        counts = bucket.waiting, bucket.behind
        answers = bucket.features(payload) if kind == KINDS[FEATURES] else bucket.labels(payload)
        self._store(key, bucket, log, token)
        yield from self._answered(answers, bucket, counts)

    @on_timer(TICK)
    def clocks_passed(self, key=beam.DoFn.KeyParam, fired=beam.DoFn.TimestampParam,
                      log=beam.DoFn.StateParam(LOG), token=beam.DoFn.StateParam(TOKEN),
                      ticks=beam.DoFn.StateParam(TICKS), tick=beam.DoFn.TimerParam(TICK)):
        waiting = ticks.read() or []
        due = [clocks for stamp, clocks in waiting if stamp + 1000 <= fired.micros]
        later = [(stamp, clocks) for stamp, clocks in waiting if stamp + 1000 > fired.micros]
        ticks.write(later)
        if later:
            tick.set(Timestamp(micros=min(s for s, _ in later) + 1000))
        if due:
            bucket = self._bucket(key, log, token)
            counts = bucket.waiting, bucket.behind
            answers = bucket.advance(max(c[FEATURES] for c in due), max(c[LABELS] for c in due))
            self._store(key, bucket, log, token)
            yield from self._answered(answers, bucket, counts)

    @on_timer(END)
    def input_ended(self, key=beam.DoFn.KeyParam, log=beam.DoFn.StateParam(LOG),
                    token=beam.DoFn.StateParam(TOKEN), ticks=beam.DoFn.StateParam(TICKS)):
        bucket = self._bucket(key, log, token)
        counts = bucket.waiting, bucket.behind
        answers = bucket.end()
        log.clear()
        token.clear()
        ticks.clear()
        yield from self._answered(answers, bucket, counts)

    def _bucket(self, key: str, log: Any, token: Any) -> Bucket:
        """The key's bucket as in state: the one this worker holds decoded if its token is the
        one in state, else rebuilt from the log. Taken out of ``held`` until stored again (a
        call that fails midway leaves it changed, and a retry must not use it)."""
        held, stored = self.held.pop(key, None), token.read()
        if held is not None and stored is not None and held[0] == stored:
            return held[1]
        return (Bucket.rebuild(log.read()) if stored is not None else None) or Bucket(self.wait)

    def _store(self, key: str, bucket: Bucket, log: Any, token: Any) -> None:
        clear, entries = bucket.log_entries()
        if clear:
            log.clear()
        for entry in entries:
            self.state_value.update(len(entry))
            log.add(entry)
        written = uuid.uuid4().bytes
        token.write(written)
        self.held[key] = (written, bucket)


    def _answered(self, answers: Answers, bucket: Bucket, counts: tuple[int, int]
                  ) -> Iterable[Any]:
        """The answers, tagged, and counted (``counts``: the bucket's examples waiting and
        records behind its clocks before the call)."""
        self.waiting.inc(bucket.waiting - counts[0])
        self.behind.inc(bucket.behind - counts[1])
        self.expired.inc(sum(len(block) for block, _, _ in answers.expired))
        self.late.inc(sum(d.reason == LATE_LABEL for d in answers.dead))
        for block, _, came in answers.joined:
            if block.event_times is not None:
                for delay in (block.event_times - came)[np.isfinite(came)].tolist():
                    self.label_delay.update(int(delay * 1000))
        yield from _tagged(answers)


def _tagged(answers: Answers) -> Iterable[Any]:
    for joined in answers.joined:
        yield beam.pvalue.TaggedOutput(JOINED, joined)
    for own in answers.own:
        yield beam.pvalue.TaggedOutput(OWN, own)
    for expired in answers.expired:
        yield beam.pvalue.TaggedOutput(EXPIRED, expired)
    if answers.dead:
        yield beam.pvalue.TaggedOutput(DEAD, answers.dead)


class JoinById(beam.PTransform):
    """{"features": served blocks, "labels": labels blocks} (PCollections of ExampleBlock,
    stamped by their readers) -> {JOINED, EXPIRED, OWN, DEAD}: ``JoinBuckets`` over
    ``buckets`` buckets, each input's clock over its ``sources``."""

    def __init__(self, wait: Optional[float], buckets: int, sources: dict[str, list[str]],
                 lag: float = 3600.0) -> None:
        super().__init__()
        self.wait, self.buckets, self.sources = wait, buckets, sources
        self.lag = max(lag, wait or 0.0)

    def expand(self, inputs):
        keyed, times = [], []
        for kind in KINDS:
            blocks = inputs[kind]
            keyed.append(blocks | f"By bucket ({kind})" >> beam.ParDo(
                ByBucket(kind, self.buckets)))
            times.append(blocks | f"Newest ({kind})" >> beam.FlatMap(newest_time, kind=kind))
        clocks = (tuple(times) | "Times" >> beam.Flatten()
                  | "Clocks" >> beam.ParDo(Clocks(self.sources, self.buckets, self.lag)))
        return ((*keyed, clocks) | "To buckets" >> beam.Flatten()
                | "Join buckets" >> beam.ParDo(JoinBuckets(self.wait)).with_outputs(
                    JOINED, EXPIRED, OWN, DEAD))

