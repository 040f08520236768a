"""The streaming join's common case taken a block at a time: what ``LabelJoin.features`` and
``LabelJoin.labels`` would do record by record, done in array operations when nothing but
waiting and joining can happen in the block.

On a stream whose labels come within the wait, almost every block is that case: a features
block's examples start to wait, and a labels block's labels each join an example that waits,
in label order, with no label queued before them. The record-by-record path (``join.py``)
moves the model's clocks at each record and, where a clock passes a deadline, expires
examples, judges queued labels and forgets closed ids; here each block first checks that no
record would do any of that but forget ids (done once at the end, with the same result), and
otherwise leaves the block to that path. Either way the join's state and output are the same,
so the models learned do not depend on which path took a block (tests/unit/test_labels_bulk.py).
"""
import heapq
import math
from typing import TYPE_CHECKING, NamedTuple, Optional

import numpy as np

from .waiting import FEATURES, LABELS, ModelJoin, Released, Rows

if TYPE_CHECKING:
    from .join import LabelJoin


def features(join: "LabelJoin", source: str, positions: np.ndarray, keys: list[str],
             times: Optional[np.ndarray], entries: dict[int, tuple[str, Rows, int]]) -> bool:
    """``LabelJoin.features``' records of ``source`` at ``positions``, their model ``keys``
    and record ``times``, and ``entries`` {position: (model key, Rows, row)} of those served:
    each served example with an id not waiting already starts to wait, when that leaves
    everything else as it is (``_still``). Returns whether it took the block."""
    wait = join.wait
    if wait is not None and (times is None or not np.isfinite(times).all()):
        return False
    order = np.argsort(positions, kind="stable")
    offered = [e for e in map(entries.get, positions[order].tolist()) if e is not None]
    models = {k for k, _, _ in offered} | (set(keys) if wait is not None else set())
    clocks = {}  # model key -> (its source's newest time, its features clock) after the block
    if wait is not None:
        assert times is not None
        for k, rows in _rows_of(keys, order).items():
            clocks[k] = _clock(join, join.models.get(k), FEATURES, source, times[rows])
    by_key: dict[str, list[tuple[Rows, int, str]]]
    firsts, seen, by_key = [], set(), {k: [] for k in models}
    for k, rows, r in offered:  # (in position order: numbered so, as one by one)
        i = rows.ids[r]
        if i is not None and (k, i) not in seen:
            seen.add((k, i))
            model = join.models.get(k)
            if model is None or i not in model.served:
                firsts.append((k, rows, r, i))
                by_key[k].append((rows, r, i))
    for k, starting in by_key.items():
        model = join.models.get(k)
        if model is not None and not _still(join, model, starting, clocks.get(k)):
            return False
    for k in models:
        model = join._of(k)
        if k in clocks:
            model.newest[FEATURES][source], clock = clocks[k]
            if clock > model.clocks[FEATURES]:
                model.clocks[FEATURES] = clock
                model.forget()
    for (k, rows, r, i), seq in zip(firsts, range(join.seq + 1, join.seq + 1 + len(firsts))):
        model = join.models[k]
        model.served[i] = (rows, r, seq)
        if wait is not None:
            heapq.heappush(model.expiring, (rows.time(r) + wait, seq, i))
    join.seq += len(firsts)
    join.counts["waiting"] += len(firsts)
    # (each served row that does not wait no longer counts in its block's)
    passed: dict[int, list] = {}
    for _, rows, _ in offered:
        passed.setdefault(id(rows), [rows, 0])[1] += 1
    for _, rows, _, _ in firsts:
        passed[id(rows)][1] -= 1
    for rows, n in passed.values():
        rows.waiting -= n
    return True


def _still(join, model, firsts, clocks):
    """Whether the model's examples ``firsts`` [(Rows, row, id)] that start to wait leave
    everything else as it is: none expires on arrival (its deadline is not behind the labels'
    clock), and the label at the head of its queue, if any, still waits (its example is not
    among them, and the features' clock, ``clocks``, stays within the wait of it)."""
    wait = join.wait
    if wait is not None and firsts and (
            model.expiring and model.expiring[0][0] < model.clocks[LABELS]
            or min(rows.time(r) for rows, r, _ in firsts) + wait < model.clocks[LABELS]):
        return False
    if not model.pending:
        return True
    label, q = model.pending[0]
    if not _head_waits(model) or label.ids[q] in {i for _, _, i in firsts}:
        return False
    return wait is None or clocks is None or clocks[1] <= label.time(q) + wait


def labels(join: "LabelJoin", rows: Rows, again: list[bool], out: Released) -> bool:
    """``LabelJoin.labels``' labels ``rows`` (``Rows``) that the join takes, when none was
    read again after a resume and, for each model key of the block, either each of its
    labels joins its example as it comes (``_join_plan``) or each waits behind the label at
    the head of its queue (``_queue_plan``). Returns whether it took the block."""
    wait, block = join.wait, rows.block
    n = len(block)
    if not n or any(again):
        return False
    if wait is not None and (rows.times is None or not np.isfinite(rows.times).all()):
        return False
    order = np.argsort(block.positions, kind="stable")
    plans: dict[str, _Plan] = {}
    for k, at in _rows_of(rows.keys, order).items():
        model = join.models.get(k)
        plan = (None if model is None else _queue_plan(join, model, rows, at) if model.pending
                else _join_plan(join, model, rows, at))
        if plan is None:
            for taken in plans.values():
                _put_back(taken.model, taken.popped)
            return False
        plans[k] = plan
    # (numbered in position order across the model keys, as one by one)
    joining = np.zeros(n, bool)
    for plan in plans.values():
        joining[plan.at] = plan.entries is not None
    seq = np.zeros(n, np.int64)
    seq[order[joining[order]]] = join.seq + 1 + np.arange(int(joining.sum()))
    join.seq += int(joining.sum())
    join.counts["waiting"] -= int(joining.sum())
    source = block.source
    for k, plan in plans.items():
        model, at, clock = plan.model, plan.at, plan.clock
        moved = False
        if clock is not None:
            model.newest[LABELS][source], moved = clock[0], clock[1] > model.clocks[LABELS]
            model.clocks[LABELS] = max(clock[1], model.clocks[LABELS])
        model.judged[source] = max(int(block.positions[at].max()), model.judged.get(source, -1))
        if plan.entries is not None:
            _join_all(join, k, plan, rows, seq, out)
        else:
            for q in at.tolist():
                model.pending.append((rows, q))
                model.labeled.setdefault(rows.ids[q], []).append(rows.time(q))
        if moved:
            model.forget()
    return True


class _Plan(NamedTuple):
    """What a model key's labels in a block do (``_join_plan``, ``_queue_plan``)."""
    model: ModelJoin  # its ModelJoin
    at: np.ndarray  # its labels' rows, in position order
    entries: Optional[list]  # the served entry each joins; None: they queue
    came: Optional[np.ndarray]  # (joining) the times of the examples they join
    clock: Optional[tuple]  # (its labels source's newest time, its labels clock) after them
    popped: list  # the expiring items taken off its heap


def _join_all(join, k, plan, rows, seq, out):
    """Model ``k``'s labels each join their example (``_join_plan``)."""
    wait, model, at, entries = join.wait, plan.model, plan.at, plan.entries
    ids = [rows.ids[q] for q in at.tolist()]
    for i in ids:
        del model.served[i]
    came = plan.came.tolist()
    seqs = seq[at].tolist()
    model.closed.update(zip(ids, zip([False] * len(ids), seqs, came)))
    if wait is not None:
        for c, s, i in zip(came, seqs, ids):
            if math.isfinite(c):
                heapq.heappush(model.closing, (c + 2 * wait, s, i))
    with np.errstate(invalid="ignore"):  # (two records without a time: no delay)
        delays = rows.times[at] - plan.came if rows.times is not None else ()
    join.delays += [d for d in np.asarray(delays).tolist() if math.isfinite(d)]
    out.pairs.setdefault(k, []).extend(
        ((f_rows, r), (rows, q)) for (f_rows, r, _), q in zip(entries, at.tolist()))
    left = {}
    for f_rows, _, _ in entries:
        left.setdefault(id(f_rows), [f_rows, 0])[1] += 1
    for f_rows, n in left.values():
        model.left(f_rows, n)


def _join_plan(join, model, rows, at):
    """The ``_Plan`` of a model with no label queued whose labels at rows ``at`` (position
    order) each join an example that waits (its id once in the block, not closed, the two
    within the wait of each other), with no example expiring and no id it closes forgotten
    before the label that joins it; else None."""
    wait = join.wait
    ids = [rows.ids[q] for q in at.tolist()]
    if len(set(ids)) < len(ids):
        return None
    entries = [model.served.get(i) for i in ids]
    if any(e is None for e in entries) or any(i in model.closed for i in ids):
        return None
    f = np.array([e[0].time(e[1]) for e in entries], dtype=np.float64)
    if wait is None:
        return _Plan(model, at, entries, f, None, [])
    t = rows.times[at]
    if ((t > f + wait) | (f > t + wait)).any():
        return None
    newest, clock = _clock(join, model, LABELS, rows.block.source, t, running=True)
    joins = {e[2]: j for j, e in enumerate(entries)}
    # (an example waiting is looked at once the clock passes its deadline: it must be one of
    # these, joined by a label before that one)
    popped = _due(model, clock, lambda item, before: joins.get(item[1], before) < before)
    if popped is None or (f + 2 * wait < model.forget_at(clock[-1])).any():
        _put_back(model, popped or [])
        return None
    return _Plan(model, at, entries, f, (newest, float(clock[-1])), popped)


def _queue_plan(join, model, rows, at):
    """The ``_Plan`` of a model whose queue's head waits for its example, which no label can
    change: each of its labels at rows ``at`` waits behind it, where no example expires
    meanwhile (a label of it within the wait queued before the clock passes its deadline) and
    no closed id of theirs is forgotten; else None."""
    wait = join.wait
    if not _head_waits(model):
        return None
    if wait is None:
        return _Plan(model, at, None, None, None, [])
    ids, t = [rows.ids[q] for q in at.tolist()], rows.times[at]
    newest, clock = _clock(join, model, LABELS, rows.block.source, t, running=True)

    def kept(item, before):
        times = model.labeled.get(item[2], []) + [
            t[j] for j in range(before) if ids[j] == item[2]]
        return any(abs(x - item[0] + wait) <= wait for x in times)
    popped = _due(model, clock, kept)
    forget = model.forget_at(clock[-1])
    if popped is None or any(c is not None and c[2] + 2 * wait < forget
                             for c in map(model.closed.get, set(ids))):
        _put_back(model, popped or [])
        return None
    return _Plan(model, at, None, None, (newest, float(clock[-1])), popped)


def _head_waits(model):
    """Whether the label at the head of the model's queue is one waiting for its example: not
    an expired example, nor a label of an id closed or waiting since it was last looked at (a
    features record that carried its own label closes its id, ``LabelJoin.labeled``, and the
    head is judged again only by the next call that moves the queue)."""
    label, q = model.pending[0]
    return label is not None and label.ids[q] not in model.closed and (
        label.ids[q] not in model.served)


def _due(model, clock, passed):
    """The model's expiring items whose deadline its labels clock passes by the end of the
    block (``clock``: after each label), taken off its heap, where each still waiting is one
    that ``passed(item, the index of the label whose clock passes it)`` lets stay; else
    None (those taken put back)."""
    popped = []
    while model.expiring and model.expiring[0][0] < clock[-1]:
        item = heapq.heappop(model.expiring)
        popped.append(item)
        entry = model.served.get(item[2])
        if entry is not None and entry[2] == item[1] and not passed(
                item, int(np.searchsorted(clock, item[0], side="right"))):
            _put_back(model, popped)
            return None
    return popped


def _put_back(model, popped):
    for item in popped:
        heapq.heappush(model.expiring, item)


def _rows_of(keys, order):
    """{model key: its rows, in ``order``}."""
    by_key = {}
    for r in order.tolist() if isinstance(order, np.ndarray) else order:
        by_key.setdefault(keys[r], []).append(r)
    return {k: np.asarray(v, np.int64) for k, v in by_key.items()}


def _clock(join, model, side, source, times, running=False):
    """(the source's newest time, the model's clock of input ``side``) after records of
    ``source`` at ``times`` in turn, as ``expiry.advance`` moves them, one at a time
    (``running``: the clock after each record)."""
    newest = model.newest[side] if model is not None else {}
    start = model.clocks[side] if model is not None else -math.inf
    mine = np.maximum.accumulate(np.maximum(times, newest.get(source, -math.inf)))
    others = [v for s, v in newest.items() if s != source]
    low = np.minimum(mine, min(others)) if others else mine
    high = np.maximum(mine, max(others)) if others else mine
    clock = np.maximum.accumulate(np.maximum(
        np.maximum(low, high - max(join.wait, join.SOURCE_LAG)), start))
    return float(mine[-1]), (clock if running else float(clock[-1]))
