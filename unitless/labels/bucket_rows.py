"""What a bucket of the join keyed by example id (``buckets.Bucket``) holds of the records that
wait: columns that grow in amortized time (``Columns``), and each input's waiting records by
slot with the blocks they came in (``Waiting``)."""
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

    @property
    def time(self) -> np.ndarray:
        return self.slots.time

    def add(self, block: ExampleBlock, rows: np.ndarray, pairs: list[tuple]) -> np.ndarray:
        """``rows`` of ``block`` start to wait, as one page; returns their slots."""
        page, self.next_page = self.next_page, self.next_page + 1
        self.pages[page] = [block, len(rows)]
        self.pairs += pairs
        return self.slots.append(
            len(rows), page=page, row=rows, position=block.positions[rows], alive=True,
            source=self.sources.setdefault(block.source, len(self.sources)),
            own=~np.isnan(block.labels[rows]), time=block.event_times[rows]
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

    def crossing(self, offset: float, old: float, new: float) -> list[tuple]:
        """The pairs of the records still waiting whose time + ``offset`` a clock moved from
        ``old`` to ``new`` has just passed."""
        at = self.slots.time + offset
        return [self.pairs[s] for s in np.flatnonzero(
            self.slots.alive & (at >= old) & (at < new)).tolist()]

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
        self.slots.keep(live)
        self.pairs = [self.pairs[s] for s in live.tolist()]
        for index in indexes:
            for pair, slots in index.items():
                index[pair] = ([renumber[s] for s in slots] if isinstance(slots, list)
                               else renumber[slots])
