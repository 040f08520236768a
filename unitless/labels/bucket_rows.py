"""What a bucket of the join keyed by example id (``buckets.Bucket``) holds, as columns changed
many rows at a time, none a row at a time in Python: columns that grow in amortized time
(``Columns``); each (model key, id) pair as a number (``PairCodes``); each input's waiting
records by slot with the blocks they came in (``Waiting``); records in record-time order
(``InTime``), so that a clock costs what it passes, not what waits; each pair's records of a
kind as a list (``Chains``); and the pairs closed (``Closures``)."""
import itertools
import math
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


class PairCodes:
    """A number for each (model key, id) pair a bucket holds anything of, from 0 in order of
    first sight; those of pairs it holds nothing of any more are dropped (``keep``)."""

    def __init__(self) -> None:
        self.code_of: dict[str, int] = {}  # "key length:model key:id" -> its number
        self.names: list[str] = []

    def __len__(self) -> int:
        return len(self.names)

    def codes(self, block: ExampleBlock) -> np.ndarray:
        """The number of each record's pair (new pairs numbered next)."""
        keys = block.keys.fill_null("")
        # (the key's length first: no key and id run together as another pair's)
        names = pc.binary_join_element_wise(pc.cast(pc.utf8_length(keys), pa.string()), keys,
                                            block.ids.fill_null(""), ":"
                                            ).to_numpy(zero_copy_only=False)
        codes = np.fromiter(map(self.code_of.get, names, itertools.repeat(-1)), np.int64,
                            len(names))
        new = codes < 0
        if new.any():
            fresh = list(dict.fromkeys(names[new].tolist()))
            self.code_of.update(zip(fresh, range(len(self.names), len(self.names) + len(fresh))))
            self.names += fresh
            codes[new] = np.fromiter(map(self.code_of.__getitem__, names[new]), np.int64,
                                     int(new.sum()))
        return codes

    def keep(self, live: np.ndarray) -> np.ndarray:
        """Keep the pairs numbered ``live`` (ascending), numbered again from 0; returns each old
        number's new one (-1: dropped)."""
        numbers = np.full(len(self.names), -1, np.int64)
        numbers[live] = np.arange(len(live))
        self.names = [self.names[c] for c in live.tolist()]
        self.code_of = dict(zip(self.names, range(len(self.names))))
        return numbers


class Chains:
    """Lists of items (numbers from 0: slots, rows) by owner (a pair's number), linked through
    arrays: each owner's first and last item, each item's next; changed many at a time."""

    def __init__(self) -> None:
        self.head = np.full(16, -1, np.int64)
        self.tail = np.full(16, -1, np.int64)
        self.next = np.full(16, -1, np.int64)
        self.held = 0  # (items in lists)

    def __bool__(self) -> bool:
        return self.held > 0

    def room(self, owners: int, items: int = 0) -> None:
        """Room for owners numbered below ``owners`` and items below ``items``."""
        if owners > len(self.head):
            grow = max(2 * len(self.head), owners) - len(self.head)
            self.head = np.append(self.head, np.full(grow, -1, np.int64))
            self.tail = np.append(self.tail, np.full(grow, -1, np.int64))
        if items > len(self.next):
            grow = max(2 * len(self.next), items) - len(self.next)
            self.next = np.append(self.next, np.full(grow, -1, np.int64))

    def push(self, owners: np.ndarray, items: np.ndarray) -> None:
        """Append ``items`` (each new) to their ``owners``' lists."""
        if not len(items):
            return
        self.room(int(owners.max()) + 1, int(items.max()) + 1)
        self.held += len(items)
        order = np.lexsort((items, owners))
        owners, items = owners[order], items[order]
        last = np.r_[owners[1:] != owners[:-1], True]
        first = np.r_[True, last[:-1]]
        self.next[items] = -1
        self.next[items[~last]] = items[1:][~last[:-1]]
        groups, tails = owners[first], self.tail[owners[first]]
        has = tails >= 0
        self.next[tails[has]] = items[first][has]
        self.head[groups[~has]] = items[first][~has]
        self.tail[groups] = items[last]

    def items(self, owners: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the items of ``owners`` (each once), the index in ``owners`` of each one's owner),
        by owner, then item."""
        got, at = [], []
        index = np.arange(len(owners))
        item = self.head[owners] if len(owners) else np.zeros(0, np.int64)
        while len(item):
            live = item >= 0
            item, index = item[live], index[live]
            got.append(item)
            at.append(index)
            item = self.next[item]
        if not got:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        items, owner = np.concatenate(got), np.concatenate(at)
        order = np.lexsort((items, owner))
        return items[order], owner[order]

    def remove(self, owners: np.ndarray, items: np.ndarray) -> None:
        """Take ``items`` (of ``owners``, each's) out of their lists."""
        if not len(items):
            return
        owners = np.unique(owners)
        held, at = self.items(owners)
        kept = ~np.isin(held, items)
        self.head[owners] = self.tail[owners] = -1
        self.held -= len(held)
        self.push(owners[at[kept]], held[kept])

    def renumber_items(self, numbers: np.ndarray) -> None:
        """Each item ``i`` is ``numbers[i]`` now (none dropped is in a list)."""
        self.room(0, len(numbers))
        for ends in (self.head, self.tail):
            held = ends >= 0
            ends[held] = numbers[ends[held]]
        live = np.flatnonzero(numbers >= 0)
        following = self.next[live]
        self.next = np.full(max(16, len(live)), -1, np.int64)
        self.next[:len(live)] = np.where(following >= 0, numbers[following], -1)

    def renumber_owners(self, live: np.ndarray) -> None:
        """Only the owners ``live`` (ascending, each with its list), numbered again from 0."""
        self.head, self.tail = self.head[live], self.tail[live]
        self.room(16)


class Waiting:
    """A bucket's records of one input that wait, by slot: columns (page, row, record time,
    position, source, whether it carries its own label, alive, its pair's number); their pages
    (the blocks they came in, held while any of their rows waits) and sources."""

    def __init__(self) -> None:
        self.slots = Columns(page=np.int64, row=np.int64, time=np.float64, position=np.int64,
                              source=np.int64, own=bool, alive=bool, code=np.int64)
        self.pages: dict[int, list] = {}  # page -> [block, rows of it waiting]
        self.next_page = 0
        self.sources: dict[str, int] = {}  # source -> its code (in order of first sight)
        self.in_time = InTime()
        self.live = 0  # (slots alive)

    @property
    def time(self) -> np.ndarray:
        return self.slots.time

    def add(self, block: ExampleBlock, rows: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """``rows`` of ``block`` (of the pairs numbered ``codes``) start to wait, as one page;
        returns their slots."""
        page, self.next_page = self.next_page, self.next_page + 1
        self.pages[page] = [block, len(rows)]
        slots = self.slots.append(
            len(rows), page=page, row=rows, position=block.positions[rows], alive=True,
            code=codes,
            source=self.sources.setdefault(block.source, len(self.sources)),
            own=~np.isnan(block.labels[rows]), time=block.event_times[rows]
            if block.event_times is not None else math.inf)
        self.in_time.add(self.slots.time[slots], slots, self.slots.alive)
        self.live += len(slots)
        return slots

    def stop(self, slots: np.ndarray) -> None:
        """The records at ``slots`` no longer wait (their pages go once none of theirs does)."""
        self.live -= int(self.slots.alive[slots].sum())
        self.slots.alive[slots] = False
        pages, counts = np.unique(self.slots.page[slots], return_counts=True)
        for page, n in zip(pages.tolist(), counts.tolist()):
            held = self.pages[page]
            held[1] -= n
            if not held[1]:
                del self.pages[page]

    def crossing(self, offset: float, old: float, new: float) -> np.ndarray:
        """The pairs' numbers of the records still waiting whose time + ``offset`` a clock
        moved from ``old`` to ``new`` has just passed, in slot order (as they came)."""
        slots = self.in_time.crossing(offset, old, new)
        return self.slots.code[np.sort(slots[self.slots.alive[slots]])]

    def order(self, slots: np.ndarray) -> np.ndarray:
        """The order of ``slots`` by (time, source, position): the order the join takes them."""
        rank = name_ranks(self.sources)
        return np.lexsort((self.slots.position[slots], rank[self.slots.source[slots]],
                           self.slots.time[slots]))

    def order_rank(self, slots: np.ndarray) -> np.ndarray:
        """Each of ``slots``' rank in the join's order (``order``)."""
        rank = np.empty(len(slots), np.int64)
        rank[self.order(slots)] = np.arange(len(slots))
        return rank

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

    def compact(self) -> Optional[np.ndarray]:
        """Drop the slots that stopped waiting once they are most of them; returns each old
        slot's new number (-1: dropped), None if none was."""
        return _compact(self.slots, self.in_time, self.live)


def name_ranks(numbers: dict[str, int]) -> np.ndarray:
    """For each name's number (``numbers``: name -> 0, 1, ...), its rank among the names
    sorted: sources are ordered by name, wherever they are numbered."""
    names = sorted(numbers, key=numbers.__getitem__)
    return np.argsort(np.argsort(np.array(names, dtype=object)))


def mostly_gone(rows: int, alive: int) -> bool:
    """Whether rows of which ``alive`` are still alive are worth compacting: most are gone."""
    return rows >= 1024 and alive * 4 <= rows


def _compact(rows: Columns, in_time: "InTime", alive_rows: int) -> Optional[np.ndarray]:
    """Drop the rows no longer ``alive`` (``alive_rows`` of them are) once they are most of
    them (and from ``in_time``); returns each old row's new number (-1: dropped), None if none
    was."""
    alive = rows.alive
    if not mostly_gone(len(alive), alive_rows):
        return None
    live = np.flatnonzero(alive)
    numbers = np.full(len(alive), -1, np.int64)
    numbers[live] = np.arange(len(live))
    in_time.renumber(numbers)
    rows.keep(live)
    return numbers


class Closures:
    """The closures of a bucket's pairs: rows (the pair's number, whether it expired, its
    example's time, the time after which no record falls under it, alive), each pair's in the
    order they closed (``of_pair``), forgotten once a clock is past that time (``forget``)."""

    def __init__(self) -> None:
        self.rows = Columns(code=np.int64, expired=bool, time=np.float64, horizon=np.float64,
                            alive=bool)
        self.of_pair = Chains()
        self.in_time = InTime()
        self.forgotten_to = -math.inf  # (the clock of the last ``forget``)
        self.overdue = np.zeros(0, np.int64)  # (rows closed behind it already)

    def add(self, codes: np.ndarray, expired: bool, times: np.ndarray, horizons: np.ndarray
            ) -> None:
        rows = self.rows.append(len(codes), code=codes, expired=expired, time=times,
                                horizon=horizons, alive=True)
        self.of_pair.push(codes, rows)
        self.in_time.add(horizons, rows, self.rows.alive)
        self.overdue = np.append(self.overdue, rows[horizons < self.forgotten_to])

    def of(self, codes: np.ndarray, times: np.ndarray) -> np.ndarray:
        """For each record (its pair's number, its time): the first closure of its pair whose
        horizon it is not after (the row), -1 if none."""
        found = np.full(len(codes), -1, np.int64)
        self.of_pair.room(int(codes.max()) + 1 if len(codes) else 0)
        records = np.flatnonzero(self.of_pair.head[codes] >= 0)
        if not len(records):
            return found
        owners, owner = np.unique(codes[records], return_inverse=True)
        rows, at = self.of_pair.items(owners)  # (a pair's in the order they closed)
        starts, counts = np.searchsorted(at, np.arange(len(owners))), np.bincount(at)
        times, horizon = times[records], self.rows.horizon
        for k in range(int(counts.max())):
            open_ = (found[records] < 0) & (k < counts[owner])
            row = rows[starts[owner[open_]] + k]
            under = times[open_] <= horizon[row]
            found[records[open_][under]] = row[under]
        return found

    def forget(self, clock: float) -> None:
        """Forget the closures ``clock`` is past the horizon of (no record still to come falls
        under them): those closed behind it already too (``overdue``)."""
        rows, self.overdue = self.overdue, np.zeros(0, np.int64)
        if clock > self.forgotten_to:
            rows = np.concatenate([self.in_time.crossing(0.0, self.forgotten_to, clock), rows])
            self.forgotten_to = clock
        rows = rows[self.rows.alive[rows]]
        if not len(rows):
            return
        self.rows.alive[rows] = False
        self.of_pair.remove(self.rows.code[rows], rows)
        numbers = _compact(self.rows, self.in_time, self.of_pair.held)
        if numbers is not None:
            self.of_pair.renumber_items(numbers)


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
