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
def assign(table, shift, slot_index, n_slots, indices, out):
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
def find(table, shift, indices, out):
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
def rebuild(table, shift, slot_index, n_slots):
    """Fill the (empty) table with slots 0..n_slots-1."""
    mask = table.shape[0] - 1
    for s in range(n_slots):
        i = slot_index[s]
        h = _home(i, shift)
        while table[h] != EMPTY:
            h = (h + 1) & mask
        table[h] = (i << 32) | s


def new_table(capacity):
    """An empty table for ``capacity`` slots (a power of two): (table, shift)."""
    size = 2 * capacity
    return np.full(size, EMPTY, dtype=np.int64), 64 - (size.bit_length() - 1)
