"""What a bucket of the join keyed by example id (``buckets.Bucket``) holds of the records that
wait: columns that grow in amortized time (``Columns``), each input's waiting records by slot
with the blocks they came in (``Waiting``), and their slots in record-time order (``InTime``),
so that a clock costs what it passes, not what waits."""
import math

import numpy as np

from ..parse.records import ExampleBlock


class Columns:
    """Columns that grow by appending, in amortized time (room doubled when full): ``n`` rows
    of each of ``names``."""

    def __init__(self, **dtypes: type) -> None:
        self.n = 0
        self.columns: dict[str, np.ndarray] = {name: np.zeros(16, dtype)
                                               for name, dtype in dtypes.items()}

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][name][:self.__dict__["n"]]
        except KeyError:
            raise AttributeError(name) from None

    def append(self, k: int, **values: object) -> np.ndarray:
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


class Waiting:
    """A bucket's records of one input that wait, by slot: columns (page, row, record time,
    position, source, whether it carries its own label, alive) and the pair each is of; their
    pages (the blocks they came in, held while any of their rows waits) and sources."""

    def __init__(self) -> None:
        self.slots = Columns(page=np.int64, row=np.int64, time=np.float64, position=np.int64,
                              source=np.int64, own=bool, alive=bool)
        self.pairs: list[tuple] = []
        self.pages: dict[int, list] = {}  # page -> [block, rows of it waiting]
        self.next_page = 0
        self.sources: dict[str, int] = {}  # source -> its code (in order of first sight)
        self.in_time = InTime()

    @property
    def time(self) -> np.ndarray:
        return self.slots.time

    def add(self, block: ExampleBlock, rows: np.ndarray, pairs: list[tuple]) -> np.ndarray:
        """``rows`` of ``block`` start to wait, as one page; returns their slots."""
        page, self.next_page = self.next_page, self.next_page + 1
        self.pages[page] = [block, len(rows)]
        self.pairs += pairs
        slots = self.slots.append(
            len(rows), page=page, row=rows, position=block.positions[rows], alive=True,
            source=self.sources.setdefault(block.source, len(self.sources)),
            own=~np.isnan(block.labels[rows]), time=block.event_times[rows]
            if block.event_times is not None else math.inf)
        self.in_time.add(self.slots.time[slots], slots, self.slots.alive)
        return slots

    def stop(self, slots: np.ndarray) -> None:
        """The records at ``slots`` no longer wait (their pages go once none of theirs does)."""
        self.slots.alive[slots] = False
        pages, counts = np.unique(self.slots.page[slots], return_counts=True)
        for page, n in zip(pages.tolist(), counts.tolist()):
            held = self.pages[page]
            held[1] -= n
            if not held[1]:
                del self.pages[page]

    def crossing(self, offset: float, old: float, new: float) -> list[tuple]:
        """The pairs of the records still waiting whose time + ``offset`` a clock moved from
        ``old`` to ``new`` has just passed."""
        slots = self.in_time.crossing(offset, old, new)
        slots = np.sort(slots[self.slots.alive[slots]])  # (in slot order, as they came)
        return [self.pairs[s] for s in slots.tolist()]

    def order(self, slots: np.ndarray) -> np.ndarray:
        """The order of ``slots`` by (time, source, position): the order the join takes them."""
        names = sorted(self.sources, key=self.sources.__getitem__)
        rank = np.argsort(np.argsort(np.array(names, dtype=object)))
        return np.lexsort((self.slots.position[slots], rank[self.slots.source[slots]],
                           self.slots.time[slots]))

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

    def compact(self, *indexes: dict) -> None:
        """Drop the slots that stopped waiting once they are most of them (``indexes``: pair ->
        slot or slots, renumbered)."""
        alive = self.slots.alive
        if len(alive) < 1024 or alive.sum() * 4 > len(alive):
            return
        live = np.flatnonzero(alive)
        renumber = {int(s): n for n, s in enumerate(live.tolist())}
        numbers = np.full(len(alive), -1, np.int64)
        numbers[live] = np.arange(len(live))
        self.in_time.renumber(numbers)
        self.slots.keep(live)
        self.pairs = [self.pairs[s] for s in live.tolist()]
        for index in indexes:
            for pair, slots in index.items():
                index[pair] = ([renumber[s] for s in slots] if isinstance(slots, list)
                               else renumber[slots])


class InTime:
    """Slots in record-time order: the newest in a tail (at most ``TAIL``, in the order they
    came), the others in runs sorted by time, each less than half the one before it (a new run
    merged with the last while that is not longer, as a binary counter's digits carry), so
    that finding the slots whose time a clock passed costs a search per run, not a look at
    every slot, and adding a slot costs about log(slots) moves."""
    TAIL = 2048

    def __init__(self) -> None:
        self.runs: list[tuple[np.ndarray, np.ndarray]] = []  # (times ascending, their slots)
        self.tail_times, self.tail_slots = np.zeros(0), np.zeros(0, np.int64)

    def add(self, times: np.ndarray, slots: np.ndarray, alive: np.ndarray) -> None:
        """``slots`` at ``times`` (``alive``: every slot's, for those a merge may drop)."""
        self.tail_times = np.concatenate([self.tail_times, times])
        self.tail_slots = np.concatenate([self.tail_slots, slots])
        if len(self.tail_slots) <= self.TAIL:
            return
        run = _sorted(self.tail_times, self.tail_slots, alive)
        self.tail_times, self.tail_slots = np.zeros(0), np.zeros(0, np.int64)
        while self.runs and len(self.runs[-1][0]) <= len(run[0]):
            times, slots = self.runs.pop()
            run = _sorted(np.concatenate([times, run[0]]), np.concatenate([slots, run[1]]),
                          alive)
        if len(run[0]):
            self.runs.append(run)

    def crossing(self, offset: float, old: float, new: float) -> np.ndarray:
        """The slots (some maybe no longer alive) whose time + ``offset`` is at least ``old``
        and below ``new``, compared as the sum is rounded."""
        at = self.tail_times + offset
        parts = [self.tail_slots[(at >= old) & (at < new)]]
        for times, slots in self.runs:
            parts.append(slots[_first_at(times, offset, old):_first_at(times, offset, new)])
        return np.concatenate(parts)

    def renumber(self, numbers: np.ndarray) -> None:
        """Each slot ``s`` is ``numbers[s]`` now, or gone where that is below 0."""
        def kept(times, slots):
            new = numbers[slots]
            return times[new >= 0], new[new >= 0]
        self.tail_times, self.tail_slots = kept(self.tail_times, self.tail_slots)
        self.runs = [run for run in (kept(*run) for run in self.runs) if len(run[0])]


def _sorted(times: np.ndarray, slots: np.ndarray, alive: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """(times ascending, their slots) of the slots still alive."""
    keep = alive[slots]
    times, slots = times[keep], slots[keep]
    order = np.argsort(times, kind="stable")
    return times[order], slots[order]


def _first_at(times: np.ndarray, offset: float, bound: float) -> int:
    """The first index of ascending ``times`` whose time + ``offset`` (rounded: not
    decreasing, as the times do not) is at least ``bound``; their length if none. A search for
    ``bound - offset``, checked around the place found, else (a rounding far off, infinities)
    every time compared."""
    n = len(times)
    with np.errstate(invalid="ignore"):
        guess = int(np.searchsorted(times, bound - offset))
    lo, hi = max(guess - 2, 0), min(guess + 2, n)
    window = times[lo:hi] + offset >= bound
    if (lo == 0 or not window[0]) and (hi == n or window[-1]):
        return lo + int(np.argmax(window)) if window.any() else hi
    reached = times + offset >= bound
    return int(np.argmax(reached)) if reached.any() else n
