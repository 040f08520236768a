"""A keyed step that hands each key's example blocks on in input order, on every runner:
``InOrder``, the waiting, release and marks shared by the learning step (``train.LearnBlocks``)
and the shard sequencer (``rounds.CutRounds``), which it is given."""
import itertools
import pickle
from typing import Any, Callable, Iterable, List, Optional, Tuple

import apache_beam as beam
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (BagStateSpec, ReadModifyWriteStateSpec, TimerSpec,
                                              on_timer)
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Duration, Timestamp

from .. import pickles
from ..parse.records import ExampleBlock
from ..runtime.beam_patches import weigh_state_without_scanning_modules
from ..runtime.bundles import KeyGuard, new_step
from .order_handler import OrderHandler


LEARNED = "learned"  # ends the header of a mark: a block learned on arrival, not waiting


def waiting_entry(header: tuple, block: Optional[ExampleBlock]) -> bytes:
    """A block as it waits in Beam state: bytes holding its header (timestamp µs, source,
    first and last position) apart from the block, so that ordering reads no block."""
    head = pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)
    return len(head).to_bytes(4, "little") + head + pickle.dumps(block,
                                                                 protocol=pickle.HIGHEST_PROTOCOL)


def waiting_entries(header: tuple, block: Optional[ExampleBlock]) -> List[bytes]:
    """A block as it waits in Beam state: ``waiting_entry``s of its consecutive parts, whose
    columns hold about ``WAITING_COLUMNS_BYTES`` at most (cut by rows, whose sizes vary), each
    with the names of the features its rows use, so that no state value grows with a reader's
    block. A source's part has its own positions in its header; the user's own records (no
    source, no positions) keep theirs, so that their parts keep the order they came in."""
    if block is None or block.nbytes <= WAITING_COLUMNS_BYTES:
        return [waiting_entry(header, block)]
    entries = []
    for part in block.parts(max(1, len(block) * WAITING_COLUMNS_BYTES // block.nbytes)):
        part.names = part.names.only(part.indices)
        first_last = ((int(part.positions.min()), int(part.positions.max())) if header[1]
                      else header[2:4])
        entries.append(waiting_entry((*header[:2], *first_last, *header[4:]), part))
    return entries


def due(header: tuple) -> int:
    """When a waiting entry is released (µs): a block when the watermark reaches its stamp; a
    mark once the watermark is past it: the next millisecond (timers fire at whole ones)."""
    return (header[0] // 1000 + 1) * 1000 if header[4:] == (LEARNED,) else header[0]


def waiting_header(data: bytes) -> tuple:
    return pickles.loads(data[4:4 + int.from_bytes(data[:4], "little")])


def waiting_block(data: bytes) -> Optional[ExampleBlock]:
    return pickles.loads(data[4 + int.from_bytes(data[:4], "little"):])


def learning_order(ready: Iterable[Tuple[tuple, bytes]]) -> List[List[bytes]]:
    """Waiting entries [(header, data)] sorted by (timestamp, source, first position) -> lists
    of entries' data, learned list after list: a source's blocks whose position ranges
    interleave (gathered blocks, see KeyByModel, may) form one list, to be merged in position
    order; the user's own records (no source) come one block at a time, as they came."""
    out = []
    for (_, source), same in itertools.groupby(ready, key=lambda b: b[0][:2]):
        end = None
        for (_, _, first, last, *_), data in same:
            if source != "" and end is not None and first < end:
                out[-1].append(data)
                end = max(end, last)
            else:
                out.append([data])
                end = last
    return out



# every value this step writes to Beam state, in bytes (a runner's state backend may bound a
# value: RocksDB on Flink, 2 GiB): what the run's summary reports as the largest
STATE_VALUE_BYTES = "state_value_bytes"
# a block waits in state in parts whose columns hold about this many bytes at most, so that
# each part with its header and feature names stays within 1 MiB (``waiting_entries``)
WAITING_COLUMNS_BYTES = 896 << 10


class Stored:
    """A key's handler state in Beam state: its encoded state (``read``, ``write``, ``clear``)
    and ``log``, a bag of bytes beside it that the handler may append to (``append``) instead
    of rewriting (cleared with it); ``weigh`` is given the size of each value written."""

    def __init__(self, state: Any, log: Any, weigh: Callable[[int], Any]) -> None:
        self.state, self.log, self.weigh = state, log, weigh

    def read(self) -> Optional[bytes]:
        return self.state.read()

    def write(self, data: bytes) -> None:
        self.weigh(len(data))
        self.state.write(data)

    def append(self, data: bytes) -> None:
        self.weigh(len(data))
        self.log.add(data)

    def clear(self) -> None:
        self.state.clear()
        self.log.clear()


class InOrder(beam.DoFn):
    """(key, ExampleBlock) -> what its ``handler`` makes of each key's blocks, handed to it in
    input order; the key's state is the handler's (a model group, a model's rounds).

    Each source's blocks are handed on in input order however the runner delivers them (why:
    docs/design.md, "Order").

    The handler is an ``order_handler.OrderHandler`` (what it must have, and what it may:
    an idle timer, an expiry timer, the released blocks at once, Beam's bundle calls). This
    step holds the keys of its bundle (``KeyGuard``): a second bundle of a key at once is
    refused.
    """
    MODEL = ReadModifyWriteStateSpec("model", BytesCoder())
    # waiting_entry bytes (a header and the pickled block), which Beam's state cache weighs at
    # once, where it walks the whole object graph of a block as an object
    WAITING = BagStateSpec("waiting", BytesCoder())
    EARLIEST = ReadModifyWriteStateSpec("earliest", PickleCoder())  # the RELEASE timer's time
    RELEASE = TimerSpec("release", TimeDomain.WATERMARK)
    END = TimerSpec("end_of_input", TimeDomain.WATERMARK)
    IDLE = TimerSpec("idle", TimeDomain.WATERMARK)
    EXPIRE = TimerSpec("expire", TimeDomain.WATERMARK)
    EXPIRE_AT = ReadModifyWriteStateSpec("expire_at", PickleCoder())  # the EXPIRE timer's time
    # the handler's log beside its state (``Stored.log``: --labels' waiting examples)
    LOG = BagStateSpec("log", BytesCoder())

    def __init__(self, handler: OrderHandler):
        self.handler = handler
        ttl = getattr(handler, "ttl_seconds", None)
        self.ttl = int(ttl * 1e6) if ttl else 0  # µs
        self.step = new_step()
        self.on_arrival = Metrics.counter("unitless", "blocks_learned_on_arrival")
        self.state_value = Metrics.distribution("unitless", STATE_VALUE_BYTES)

    def setup(self):
        weigh_state_without_scanning_modules()
        self.keys = KeyGuard(self.step)
        self._call("setup")

    def teardown(self):
        self.keys.release()
        self._call("teardown")

    def start_bundle(self):
        self._call("start_bundle")

    def finish_bundle(self):
        self._call("finish_bundle")
        self.keys.release()

    def _call(self, hook):
        method = getattr(self.handler, hook, None)
        if method is not None:
            method()

    def process(self, element, timestamp=beam.DoFn.TimestampParam,
                stored=beam.DoFn.StateParam(MODEL), waiting=beam.DoFn.StateParam(WAITING),
                earliest=beam.DoFn.StateParam(EARLIEST),
                release=beam.DoFn.TimerParam(RELEASE), end=beam.DoFn.TimerParam(END),
                idle=beam.DoFn.TimerParam(IDLE), expire_at=beam.DoFn.StateParam(EXPIRE_AT),
                expire=beam.DoFn.TimerParam(EXPIRE), log=beam.DoFn.StateParam(LOG)):
        key, block = element
        stored = self._stored(stored, log)
        self.keys.hold(key)
        end.set(GlobalWindow().max_timestamp())
        if not len(block):
            return
        if block.source is not None:
            self._idle_after(timestamp, idle)
            if self.ttl and expire_at.read() is None:
                self._expire_at(timestamp.micros + self.ttl, expire_at, expire)
        on_arrival = self.handler.learns_on_arrival and block.span is not None
        self.handler.enter_source(key, block, stored)
        learned = False
        if on_arrival:
            state = self.handler.state(key, stored)
            # nothing it needs first can be waiting
            learned = self.handler.continues(state, block)
            if learned:
                self.on_arrival.inc()
                yield from self.handler.learn(state, block, at=timestamp.micros)
                self.handler.store(key, state, stored)
                if not block.restarts_midway:
                    return
        # the user's own records have no source and no positions: they keep arrival order
        # (the sort is stable), which is all the order they have
        first, last = ((int(block.positions.min()), int(block.positions.max()))
                       if block.source is not None else (-1, -1))
        header = (timestamp.micros, block.source or "", first, last)
        # a partition's block learned on arrival waits as a mark: where a resumed run may
        # restart the partition moves past it once the watermark passes it (KeyedModel.restart)
        if learned:
            header += (LEARNED,)
        elif self.ttl:  # (its model keys, which hold their models in state: ``expire_idle``)
            header += (tuple(block.keys.unique().to_pylist()),)
        for entry in waiting_entries(header, block if not learned else None):
            self.state_value.update(len(entry))
            waiting.add(entry)
        release_at = earliest.read()
        if release_at is None or due(header) < release_at:
            earliest.write(due(header))
            release.set(Timestamp(micros=due(header)))

    @on_timer(RELEASE)
    def release_waiting(self, key=beam.DoFn.KeyParam, fired=beam.DoFn.TimestampParam,
                        stored=beam.DoFn.StateParam(MODEL),
                        waiting=beam.DoFn.StateParam(WAITING),
                        earliest=beam.DoFn.StateParam(EARLIEST),
                        release=beam.DoFn.TimerParam(RELEASE),
                        idle=beam.DoFn.TimerParam(IDLE),
                        expire_at=beam.DoFn.StateParam(EXPIRE_AT),
                        expire=beam.DoFn.TimerParam(EXPIRE), log=beam.DoFn.StateParam(LOG)):
        """The watermark passed ``fired``: hand on the blocks waiting up to it, in order."""
        self.keys.hold(key)
        stored = self._stored(stored, log)
        state, sourced = yield from self._release(key, fired.micros, stored, waiting, earliest,
                                                  release)
        if state is not None:
            yield from self.handler.released(key, state)
            self.handler.store(key, state, stored)
            if sourced:
                self._idle_after(fired, idle)
                # (the EXPIRE timer may have fired with nothing learned yet, and stopped)
                if self.ttl and expire_at.read() is None:
                    self._expire_at(fired.micros + self.ttl, expire_at, expire)

    def _stored(self, state, log):
        return Stored(state, log, self.state_value.update)

    def _idle_after(self, timestamp, idle):
        # (set again on every element: it fires only once the key has gone quiet). Only for
        # blocks of sources, stamped by their readers' clocks as the watermark is: the user's
        # own records may be stamped anywhere behind it, and would set it off at once
        seconds = getattr(self.handler, "idle_seconds", None)
        if seconds:
            idle.set(min(timestamp + Duration(seconds), GlobalWindow().max_timestamp()))

    @on_timer(IDLE)
    def went_idle(self, key=beam.DoFn.KeyParam, fired=beam.DoFn.TimestampParam,
                  stored=beam.DoFn.StateParam(MODEL), log=beam.DoFn.StateParam(LOG),
                  idle=beam.DoFn.TimerParam(IDLE)):
        self.keys.hold(key)
        stored = self._stored(stored, log)
        if stored.read() is None:  # (its input ended and it left state)
            return
        state = self.handler.state(key, stored)
        changed, again = self.handler.idle(key, state)
        if changed:
            self.handler.store(key, state, stored)
        if again is not None:
            idle.set(min(fired + Duration(again), GlobalWindow().max_timestamp()))

    def _expire_at(self, micros, expire_at, expire):
        micros = min(micros, GlobalWindow().max_timestamp().micros)
        expire_at.write(micros)
        expire.set(Timestamp(micros=micros))

    @on_timer(EXPIRE)
    def expire_idle(self, key=beam.DoFn.KeyParam, fired=beam.DoFn.TimestampParam,
                    stored=beam.DoFn.StateParam(MODEL), waiting=beam.DoFn.StateParam(WAITING),
                    expire_at=beam.DoFn.StateParam(EXPIRE_AT),
                    expire=beam.DoFn.TimerParam(EXPIRE), log=beam.DoFn.StateParam(LOG)):
        """The watermark passed the time the key's least recently seen model would have been
        idle for ``ttl_seconds``: the handler's ``expire`` (see the class docstring)."""
        self.keys.hold(key)
        stored = self._stored(stored, log)
        expire_at.clear()
        if stored.read() is None:  # (its input ended and it left state)
            return
        state = self.handler.state(key, stored)
        held = set()  # the model keys of blocks still waiting (marks hold no examples)
        for data in waiting.read():
            header = waiting_header(data)
            if header[4:] == (LEARNED,):
                continue
            # (the header carries them; a block that waited since before it did does not)
            held.update(header[4] if len(header) > 4
                        else waiting_block(data).keys.unique().to_pylist())
        due = yield from self.handler.expire(key, state, fired.micros, held)
        self.handler.store(key, state, stored)
        if due is not None:
            self._expire_at(max(due, fired.micros + 1000), expire_at, expire)

    @on_timer(END)
    def end_of_input(self, key=beam.DoFn.KeyParam, stored=beam.DoFn.StateParam(MODEL),
                     waiting=beam.DoFn.StateParam(WAITING),
                     earliest=beam.DoFn.StateParam(EARLIEST),
                     release=beam.DoFn.TimerParam(RELEASE), log=beam.DoFn.StateParam(LOG)):
        self.keys.hold(key)
        stored = self._stored(stored, log)
        state = None
        if earliest.read() is not None:  # (set whenever anything waits: else nothing to read)
            state, _ = yield from self._release(key, None, stored, waiting, earliest, release)
        yield from self.handler.input_ended(key, state, stored)

    def _learn_released(self, state, blocks, at):
        """Hand the released ``blocks`` (an iterator, in order) to the handler: all at once
        if it takes them so (``learn_released``), else one by one (``learn``)."""
        whole = getattr(self.handler, "learn_released", None)
        if whole is not None:
            yield from whole(state, blocks, at=at)
        else:
            for block in blocks:
                yield from self.handler.learn(state, block, at=at)

    def _release(self, key, upto, stored, waiting, earliest, release):
        """Hand on the waiting blocks stamped at or before ``upto`` (None: all), in (timestamp,
        source, position) order; the others wait on, the timer set for the earliest of them.
        Returns the key's state when it took blocks (for the caller to store), else None, and
        whether any of them came from a source."""
        entries = [(waiting_header(data), data) for data in waiting.read()]
        released = sorted(((h, data) for h, data in entries if upto is None or due(h) <= upto),
                          key=lambda b: b[0][:3])
        later = [(h, data) for h, data in entries if upto is not None and due(h) > upto]
        state = None
        if released:
            state = self.handler.state(key, stored)
            ready = [(h, data) for h, data in released if h[4:] != (LEARNED,)]
            blocks = (ExampleBlock.concat([waiting_block(data) for data in lists])
                      for lists in learning_order(ready))
            yield from self._learn_released(state, blocks, upto)
            # what the watermark is past, not just at (another key's element stamped ``upto``
            # may still be in flight): blocks and marks; blocks learned at ``upto`` get marks
            at = [h for h, _ in ready if upto is not None and h[0] >= upto]
            for h in self.handler.watermark_passed(
                    state, [h for h, _ in released if upto is None or h[0] < upto], at):
                mark = h[:4] + (LEARNED,)
                later.append((mark, waiting_entry(mark, None)))
        waiting.clear()
        earliest.clear()
        for _, data in later:
            waiting.add(data)
        if later:
            first = min(due(h) for h, _ in later)
            earliest.write(first)
            release.set(Timestamp(micros=first))
        return state, any(h[1] for h, _ in released)
