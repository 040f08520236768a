"""The labels join's clocks and what they expire, functions over a ``LabelJoin`` (which calls
them) and one model key's ``ModelJoin``: each input's clock moves with its records' own times
(``advance``); an example no label can reach any more expires (``expire_due``, ``expire``), and
an id joined or expired is closed (``close``)."""
import heapq
import math
from typing import TYPE_CHECKING, cast

from .waiting import LABELS, ModelJoin, Released, _time

if TYPE_CHECKING:
    from .join import LabelJoin


def advance(join: "LabelJoin", key: str, model: ModelJoin, side: int, source: str, time: float,
            out: Released) -> None:
    """A record of model ``key`` from ``source`` on input ``side`` at ``time``: the model's
    clock of that input moves to the oldest newest time of the sources it has seen there
    (a source's records are taken to come in time order), or to ``SOURCE_LAG`` before the
    newest when a source lags further (its later records may then find their partners
    expired). What the model waits for on the other input past ``wait`` behind it expires:
    its examples (labels: its head, ``LabelJoin._release``)."""
    newest = model.newest[side]
    if time <= newest.get(source, -math.inf):
        return
    newest[source] = time
    times = newest.values()
    clock = max(model.clocks[side], min(times),
                max(times) - max(cast(float, join.wait), join.SOURCE_LAG))  # (with a wait only)
    if clock <= model.clocks[side]:
        return
    model.clocks[side] = clock
    if side == LABELS:
        expire_due(join, key, model, out)
    elif model.pending:  # (its head may be a label no features can reach any more)
        join._release(key, model, out)
    model.forget()


def expire_due(join: "LabelJoin", key: str, model: ModelJoin, out: Released) -> None:
    """The model's examples no label can reach any more (the labels' clock is past their
    time + wait) expire, but those with a label within the wait that waits behind others
    (it joins them, ``_release``); then its head moves on."""
    heap, expired = model.expiring, False
    while heap and heap[0][0] < model.clocks[LABELS]:
        item = heapq.heappop(heap)
        entry = model.served.get(item[2])
        # (one with a label within the wait waiting behind others is not looked at again:
        # that label joins it when it reaches the head, or at the end of the input)
        if entry is not None and entry[2] == item[1] and not any(
                abs(t - item[0] + join.wait) <= join.wait
                for t in model.labeled.get(item[2], ())):
            expire(join, key, model, item[2], item[0])
            expired = True
    if expired:
        join._release(key, model, out)


def close(join: "LabelJoin", model: ModelJoin, i: str, expired: bool, time: float) -> None:
    """Model ``model``'s id ``i`` is closed (joined, or ``expired``), as of record ``time``:
    forgotten once both clocks pass twice the wait after it (``ModelJoin.forget``)."""
    seq = join._next()
    model.closed[i] = (expired, seq, time)
    if join.wait is not None and math.isfinite(time):
        heapq.heappush(model.closing, (time + 2 * join.wait, seq, i))


def expire(join: "LabelJoin", key: str, model: ModelJoin, i: str, at: float) -> None:
    """Model ``key``'s example ``i`` expires at ``at`` (record time): dropped, or learned
    with the expired label among its model's labels by time (before the first waiting label
    later than ``at``)."""
    entry = model.served.pop(i)
    model.left(entry[0])
    join.counts["waiting"] -= 1
    join.counts["expired"] += 1
    close(join, model, i, True, entry[0].time(entry[1]))
    if join.expired_label is not None:
        place = len(model.pending)
        while place and _time(model.pending[place - 1]) > at:
            place -= 1
        model.pending.insert(place, (None, entry, at, join.expired_label))
