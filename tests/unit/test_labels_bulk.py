"""The streaming join's blocks taken in array operations (``labels/in_bulk.py``) give what the
record-by-record path gives, call by call: the same examples learned in the same order, the
same dead letters, counts and label delays, and the same state after every call, on streams
of several model keys and sources whose records interleave, come late, early, twice, without
an id or never."""

import numpy as np
import pytest

from unitless.labels import in_bulk
from unitless.labels.join import LabelJoin
from unitless.parse.jsonl import parse_records
from unitless.pipelines.config import configure

SPEC = configure(None, model_dir="unused", predictions=None, dead_letter=None, id_column="id",
                 model_key_column="key", labels=["kafka://localhost:9092/labels"]).spec
KEYS = ["k0", "k1", "k2"]


def stream(seed, noise, n=1500, wait=10.0):
    """[(kind, block)]: features and labels blocks of ``n`` examples a tenth of a second
    apart over KEYS, from two features sources and two labels sources read at their own
    paces; most labels 0.5-3 s after their example, some (in proportion to ``noise``) before
    it, after the wait, twice, of unknown ids, without an id, or never; a few features
    records twice, a few carrying their own label."""
    rng = np.random.default_rng(seed)
    features, labels = [], []
    for e in range(n):
        key, t = KEYS[rng.integers(len(KEYS))], e / 10
        i = None if rng.random() < 0.01 * noise else f"e{e}"
        values = {"id": i, "key": key, "x": float(rng.normal()) * 10.0 ** rng.integers(-3, 4)}
        if rng.random() < 0.03 * noise:  # (learned as it comes; a label of it is a second)
            values["label"] = int(rng.integers(2))
        features.append((t, values))
        if rng.random() < 0.01 * noise:
            features.append((t, dict(values, x=1.0)))
        kind = rng.random()
        if kind < 0.05 * noise:
            continue
        delay = (rng.uniform(0.5, 3) if kind > 0.2 * noise else rng.uniform(-3, 0)
                 if kind > 0.12 * noise else rng.uniform(wait, 2 * wait))
        label = {"id": f"e{e}" if rng.random() > 0.01 * noise else f"u{e}", "key": key,
                 "label": int(rng.integers(2))}
        labels.append((t + delay, label))
        if rng.random() < 0.02 * noise:
            labels.append((t + delay + rng.uniform(0, 2 * wait), dict(label, label=0)))
    labels.sort(key=lambda r: r[0])
    out = []
    for kind, records in (("features", features), ("labels", labels)):
        sources = [[], []]
        for record in records:
            sources[rng.integers(2)].append(record)
        for s, part in enumerate(sources):
            at = 0
            while at < len(part):
                size = int(rng.integers(1, 20))
                out.append((kind, s, at, part[at:at + size]))
                at += size
    # interleave: each input's blocks in their order, the labels a little behind
    rng.shuffle(out)
    out.sort(key=lambda b: b[3][0][0] + (3 if b[0] == "labels" else 0)
             + rng.uniform(0, 1))
    blocks = []
    for kind, s, at, records in out:
        block, dead = parse_records(SPEC, f"{kind[0]}/{s}",
                                    [(at + j, values) for j, (_, values) in enumerate(records)])
        assert not dead
        block.event_times = np.array([t for t, _ in records], dtype=np.float64)
        blocks.append((kind, block))
    return blocks


def call(join, kind, block):
    """The join's call for a block, as the learning step makes it (``LabelsSteps._serve``: the
    examples that carry their label are learned first, and close their ids)."""
    if kind == "labels":
        return join.labels(block, None)
    for k, piece in block.split_by_key():
        join.labeled(k, piece)
    served = block.take(np.flatnonzero(block.served))
    scores = np.arange(len(served), dtype=np.float64)[:, None] + block.positions[0]
    by_key = [(k, piece, scores[np.isin(served.positions, piece.positions)])
              for k, piece in served.split_by_key()]
    return join.features(block.source, block.positions, block.keys.to_pylist(),
                         block.event_times, by_key)


def outcome(result):
    joined, dead = result
    return ([(key, b.source, b.ids.to_pylist(), b.labels.tolist(), b.positions.tolist(),
              None if b.event_times is None else b.event_times.tolist(), b.indptr.tolist(),
              b.indices.tolist(), b.values.tolist(), b.weights.tolist(), scores.tolist(),
              expired) for key, b, scores, expired in joined],
            [(d.source, d.position, d.reason) for d in dead])


def state(join):
    """What the join holds, by value (blocks as the rows they point to)."""
    models = {}
    for key, m in sorted(join.models.items()):
        served = {i: (rows.block.source, int(rows.block.positions[r]), rows.time(r), seq)
                  for i, (rows, r, seq) in m.served.items()}
        pending = [(e[0].block.source, int(e[0].block.positions[e[1]])) if e[0] is not None
                   else ("expired", e[1][2], e[2]) for e in m.pending]
        models[key] = (served, dict(m.closed._as_dict()), pending, dict(m.labeled),
                       dict(m.parked), list(m.clocks), [dict(n) for n in m.newest],
                       sorted(m.expiring), sorted(m.closing), dict(m.judged), m.unlabeled)
    return models, join.seq


@pytest.mark.parametrize("seed,expired_label,noise", [
    (0, None, 0.3), (1, -1.0, 0.3), (2, None, 1.0), (3, -1.0, 1.0)])
def test_blocks_taken_in_bulk_give_what_records_one_by_one_give(seed, expired_label, noise,
                                                                monkeypatch):
    taken = {"features": 0, "labels": 0}
    for kind in taken:
        def counted(*args, _kind=kind, _take=getattr(in_bulk, kind)):
            took = _take(*args)
            taken[_kind] += took
            return took
        monkeypatch.setattr(in_bulk, kind, counted)
    bulk = LabelJoin(10.0, expired_label, keyed=True)
    one_by_one = LabelJoin(10.0, expired_label, keyed=True)
    one_by_one.IN_BULK = False
    blocks = stream(seed, noise)
    for kind, block in blocks:
        assert outcome(call(bulk, kind, block)) == outcome(call(one_by_one, kind, block))
        assert bulk.take_counts() == one_by_one.take_counts()
        # (a distribution's updates, in an order of their own)
        assert sorted(bulk.take_delays()) == sorted(one_by_one.take_delays())
        assert state(bulk) == state(one_by_one)
    rebuilt = LabelJoin.rebuild(bulk.log_entries()[1])
    assert state(rebuilt) == state(bulk)
    for key in KEYS:
        assert outcome(bulk.end(key)) == outcome(one_by_one.end(key))
    assert state(bulk) == state(one_by_one)
    # (a fifth or more of the blocks of each input took the bulk path, and some did not)
    for kind in taken:
        offered = sum(k == kind for k, _ in blocks)
        assert offered * 0.2 < taken[kind] < offered
