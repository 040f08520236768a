"""Where each feature's state lives: a compiled open-addressing table from feature index to slot.

A learner keeps state only for the features examples have carried. Feature i's state is column
``slot`` of V (and row and column ``slot`` of M); ``slot_index[slot]`` is i. Slots are handed out
in order of first appearance. The table has twice as many entries as there are slots (load ≤ ½,
linear probing from a multiplicative hash of i); an entry packs i (feature indices are below
2^32) and its slot into one int64, i << 32 | slot, so a probe reads one word; -1 is empty.
"""
import numpy as np
from numba import njit

EMPTY = -1
_SLOT = np.int64(0xFFFFFFFF)  # the low 32 bits of an entry
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / φ: Fibonacci hashing spreads nearby indices


@njit(cache=True, inline="always")
def _home(i, shift):
    """The table entry where the probe for feature i starts: the top bits of i · 2^64/φ."""
    return np.int64((np.uint64(i) * _GOLDEN) >> np.uint64(shift))


@njit(cache=True)
def assign(table: np.ndarray, shift: int, slot_index: np.ndarray, n_slots: int,
           indices: np.ndarray, out: np.ndarray) -> tuple[int, int]:
    """out[j] = the slot of feature indices[j], giving each feature not yet in the table the next
    free slot. Stops at the first new feature when every slot is taken (the caller grows the
    arrays and goes on from there): returns (how many of ``indices`` were mapped, n_slots)."""
    mask = table.shape[0] - 1
    capacity = slot_index.shape[0]
    for j in range(indices.shape[0]):
        i = indices[j]
        h = _home(i, shift)
        while True:
            entry = table[h]
            if entry == EMPTY:
                if n_slots == capacity:
                    return j, n_slots
                table[h] = (i << 32) | n_slots
                slot_index[n_slots] = i
                out[j] = n_slots
                n_slots += 1
                break
            if (entry >> 32) & _SLOT == i:
                out[j] = entry & _SLOT
                break
            h = (h + 1) & mask
    return indices.shape[0], n_slots


@njit(cache=True)
def find(table: np.ndarray, shift: int, indices: np.ndarray, out: np.ndarray) -> None:
    """out[j] = the slot of feature indices[j], or -1 when it has none."""
    mask = table.shape[0] - 1
    for j in range(indices.shape[0]):
        i = indices[j]
        h = _home(i, shift)
        out[j] = EMPTY
        while table[h] != EMPTY:
            if (table[h] >> 32) & _SLOT == i:
                out[j] = table[h] & _SLOT
                break
            h = (h + 1) & mask


@njit(cache=True)
def rebuild(table: np.ndarray, shift: int, slot_index: np.ndarray, n_slots: int) -> None:
    """Fill the (empty) table with slots 0..n_slots-1."""
    mask = table.shape[0] - 1
    for s in range(n_slots):
        i = slot_index[s]
        h = _home(i, shift)
        while table[h] != EMPTY:
            h = (h + 1) & mask
        table[h] = (i << 32) | s


def new_table(capacity: int) -> tuple[np.ndarray, int]:
    """An empty table for ``capacity`` slots (a power of two): (table, shift)."""
    size = 2 * capacity
    return np.full(size, EMPTY, dtype=np.int64), 64 - (size.bit_length() - 1)


# --- many models' slots in one arena (``many.py``) ---------------------------------------------
# Each model row r has a table of its own, as above, laid in one shared array: entries
# base[r] .. base[r] + 2^bits[r] - 1 (shift[r] = 64 - bits[r]; bits 0: no table yet). A row's
# table and its slots stay together in memory, so an example's lookups touch a few cache lines
# of its own model's, not one line of a big table per feature. A table that passes ¾ full moves
# to a twice larger one at the array's end ``used`` (the old one is left ``dead``; the caller
# compacts the array now and then, ``move_tables``).


@njit(cache=True)
def assign_rows(table: np.ndarray, used: int, dead: int, base: np.ndarray, shift: np.ndarray,
                count: np.ndarray, rows: np.ndarray, indices: np.ndarray, out: np.ndarray,
                n_slots: int, capacity: int) -> tuple[int, int, int, int]:
    """out[j] = the slot of feature indices[j] of model row rows[j], giving each feature a row
    does not have yet the next free slot. Stops at the first new feature when every slot is
    taken, or when its row's table must move and the array has no room left at its end (the
    caller grows one and goes on from there): returns (how many were mapped, n_slots, used,
    dead)."""
    for j in range(indices.shape[0]):
        r, i = rows[j], indices[j]
        size = np.int64(1) << (64 - shift[r]) if shift[r] else 0
        if size:
            h = _home(i, shift[r])
            while True:
                entry = table[base[r] + h]
                if entry == EMPTY or (entry >> 32) & _SLOT == i:
                    break
                h = (h + 1) & (size - 1)
            if entry != EMPTY:
                out[j] = entry & _SLOT
                continue
        if n_slots == capacity:
            return j, n_slots, used, dead
        if 4 * (count[r] + 1) > 3 * size:  # (no table yet, or it would pass ¾ full)
            grown = 2 * size
            if not size:  # (room for the features of the row that follow, up to 48)
                need = 1
                while need < 48 and j + need < rows.shape[0] and rows[j + need] == r:
                    need += 1
                grown = 4
                while 3 * grown < 4 * need:
                    grown *= 2
            if used + grown > table.shape[0]:
                return j, n_slots, used, dead
            new_shift = 64
            while np.int64(1) << (64 - new_shift) < grown:
                new_shift -= 1
            for e in range(size):
                entry = table[base[r] + e]
                if entry != EMPTY:
                    h = _home((entry >> 32) & _SLOT, new_shift)
                    while table[used + h] != EMPTY:
                        h = (h + 1) & (grown - 1)
                    table[used + h] = entry
                    table[base[r] + e] = EMPTY
            dead += size
            base[r], shift[r], size = used, new_shift, grown
            used += grown
            h = _home(i, shift[r])
            while table[base[r] + h] != EMPTY:
                h = (h + 1) & (size - 1)
        table[base[r] + h] = (i << 32) | n_slots
        out[j] = n_slots
        count[r] += 1
        n_slots += 1
    return indices.shape[0], n_slots, used, dead


@njit(cache=True)
def move_tables(table: np.ndarray, base: np.ndarray, shift: np.ndarray, n_rows: int,
                size: int) -> tuple[np.ndarray, int]:
    """The rows' tables packed one after the other from the start of a new array of ``size``
    entries (their entries need no rehashing: positions are relative to a table's base):
    (new table, entries used); ``base`` is updated."""
    moved = np.empty(size, dtype=np.int64)
    used = 0
    for r in range(n_rows):
        if shift[r]:
            n = np.int64(1) << (64 - shift[r])
            moved[used:used + n] = table[base[r]:base[r] + n]
            base[r] = used
            used += n
    moved[used:] = EMPTY
    return moved, used


@njit(cache=True)
def row_entries(table: np.ndarray, base: np.ndarray, shift: np.ndarray,
                rows: np.ndarray) -> np.ndarray:
    """The entries (feature index << 32 | slot) of each of ``rows``' tables, by feature index,
    the rows' one after the other."""
    total = 0
    for r in rows:
        if shift[r]:
            total += np.int64(1) << (64 - shift[r])
    out = np.empty(total, dtype=np.int64)
    at = 0
    for r in rows:
        if shift[r]:
            start = at
            for entry in table[base[r]:base[r] + (np.int64(1) << (64 - shift[r]))]:
                if entry != EMPTY:
                    out[at] = entry
                    at += 1
            out[start:at].sort()
    return out[:at]
