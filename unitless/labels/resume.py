"""What a model's checkpoint keeps of its group's labels join, and how a resumed run takes it
back: which records read again were learned, judged or served before (functions over a
``LabelJoin``, which calls them; docs/delayed-outcomes.md, slice 3)."""
import math
from typing import TYPE_CHECKING, Any, Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..parse.records import ExampleBlock
from . import expiry
from .closed import ClosedIds
from .waiting import Resumed

if TYPE_CHECKING:
    from .join import LabelJoin


def judged_before(join: "LabelJoin", block: ExampleBlock) -> np.ndarray:
    """Which records of a labels block their models learned or judged before a resume."""
    encoded = pc.dictionary_encode(block.keys)
    done = [-1 if resumed is None else resumed.positions.get(block.source, -1)
            for resumed in map(join._resumed, encoded.dictionary.to_pylist())]
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    return block.positions <= np.array(done + [-1], np.int64)[codes]  # (-1: no key)


def resume_state(join: "LabelJoin", key: str, served: Mapping[str, int]) -> dict[str, Any]:
    """What model ``key``'s checkpoint keeps of its join, for a resumed run (``restore``),
    JSON: given ``served`` ({features source: the last position it served there}), per
    features source the position before its oldest example still waiting (``rejoin``: a
    resumed run reads the source again from there) and the positions of those waiting
    (``waiting``: only they wait again), per labels source the position through which its
    labels were learned or judged (``labels``: only those after come again); and with a
    wait, the ids it joined or let expire that it still knows (``closed``,
    ``ClosedIds.to_json``; without a wait none, ``[]`` as before: the ids read again are
    closed again, ``replayed``)."""
    rejoin, model = dict(served), join.models.get(key)
    if model is None:
        return {"rejoin": rejoin, "waiting": {}, "labels": {},
                "closed": [] if join.wait is None else ClosedIds().to_json()}
    labels, waiting = dict(model.judged), {}
    for source, owed in (model.resumed.waiting.items() if model.resumed else ()):
        if owed:  # (read again, not yet come)
            waiting[source] = list(owed)
            rejoin[source] = min(rejoin.get(source, math.inf), min(owed) - 1)
    for entry in model.pending:
        if entry[0] is not None:
            source = entry[0].block.source
            labels[source] = min(labels[source], int(entry[0].block.positions[entry[1]]) - 1)
    held = set()
    for rows, r in ([e[:2] for e in model.served.values()]
                    + [e[1][:2] for e in model.pending if e[0] is None]):
        held.add(rows.ids[r])
        source, position = rows.block.source, int(rows.block.positions[r])
        waiting.setdefault(source, []).append(position)
        rejoin[source] = min(rejoin.get(source, position), position - 1)
    for source, positions in model.unlabeled.items():
        waiting.setdefault(source, []).extend(positions)
        rejoin[source] = min(rejoin.get(source, math.inf), min(positions) - 1)
    closed = [] if join.wait is None else model.closed.to_json(held)
    return {"rejoin": rejoin, "waiting": {s: sorted(p) for s, p in waiting.items()},
            "labels": labels, "closed": closed}


def restore(join: "LabelJoin", key: str, saved: dict[str, Any], positions: dict[str, int]) -> None:
    """A resumed run's model ``key``, whose checkpoint kept ``saved`` of its join
    (``resume_state``) and ``positions`` ({source: the last label it learned or example it
    served there}): what it joined or let expire is known again, and the records of its
    sources read again are told apart (``replayed``, ``served_before``, ``labels``)."""
    model = join._of(key)
    closed = list(ClosedIds.from_json(saved["closed"]))
    if join.in_time_order:  # (as columns: a bounded join never forgets them)
        first = join.seq + 1
        join.seq += len(closed)
        model.closed.add_columns(
            pa.array([i for i, _, _ in closed], pa.string()), [e for _, e, _ in closed],
            np.arange(first, join.seq + 1),
            [math.inf if t is None else t for _, _, t in closed])
    else:
        for i, expired, time in closed:
            expiry.close(join, model, i, expired, math.inf if time is None else time)
    model.resumed = Resumed({**positions, **saved["labels"]}, dict(saved["rejoin"]),
                           {s: set(p) for s, p in saved["waiting"].items()},
                           bool(saved["labels"]))
    model.judged.update(saved["labels"])


def replayed(join: "LabelJoin", key: str, block: ExampleBlock) -> ExampleBlock:
    """A features block of model ``key`` -> the block without the examples a resumed run
    read again that no longer waited at its checkpoint (counted ``replayed``; without a
    wait their ids are closed again, as the whole input's are)."""
    done = np.flatnonzero(replayed_rows(join, block)).tolist()
    if not done:
        return block
    join.counts["replayed"] += len(done)
    ids = block.ids.to_pylist()
    if join.wait is None:
        join._learned(key, [(ids[r], math.inf) for r in done if ids[r] is not None])
    return block.take(np.setdiff1d(np.arange(len(block)), done))


def replayed_rows(join: "LabelJoin", block: ExampleBlock) -> np.ndarray:
    """Which records of a features block a resumed run read again that no longer waited
    at their model's checkpoint (``replayed``)."""
    encoded = pc.dictionary_encode(block.keys)
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    done = np.zeros(len(block), dtype=bool)
    for code, key in enumerate(encoded.dictionary.to_pylist()):
        resumed = join._resumed(key)
        if resumed is None or block.source not in resumed.rejoin:
            continue
        rows = codes == code
        positions = block.positions[rows]
        done[rows] = ((positions <= resumed.positions[block.source])
                      & ~np.isin(positions, list(resumed.waiting.get(block.source, ()))))
    return done


def served_before(join: "LabelJoin", key: str, block: ExampleBlock
                  ) -> tuple[ExampleBlock, Optional[ExampleBlock]]:
    """A features block of model ``key`` (``replayed`` and ``screen``ed) -> (its examples
    to learn or serve, those it served before a resume, which wait for their labels again
    without being served again: counted ``replayed``; None if none)."""
    resumed = join._resumed(key)
    if resumed is None or block.source not in resumed.rejoin:
        return block, None
    again = block.positions <= resumed.positions[block.source]
    if not again.any():
        return block, None
    join.counts["replayed"] += int(again.sum())
    return block.take(np.flatnonzero(~again)), block.take(np.flatnonzero(again))
