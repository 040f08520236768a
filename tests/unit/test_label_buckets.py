"""A join keyed by example id (``labels/buckets.py``): spread over any number of buckets, fed a
stream's blocks in any interleaving of its two inputs with safe record-time clocks, its answers
are the outcomes ``by_id.judge`` gives each label and example of the whole input, the
examples joined carry their features and served scores at their labels' places, each record
is answered once, and a bucket rebuilt from its persisted log goes on as it would have."""
import math

import numpy as np
import pytest

from unitless.labels import by_id
from unitless.labels.bucket_rows import InTime, _first_at
from unitless.labels.buckets import Answers, Bucket
from unitless.labels.queue import LabelQueue
from unitless.labels.reasons import LATE_LABEL, NEVER_SERVED, SECOND_FEATURES, SECOND_LABEL
from unitless.parse.jsonl import parse_records
from unitless.pipelines.config import configure
from unitless.pipelines.join_buckets import bucket_numbers

SPEC = configure(None, model_dir="unused", predictions=None, dead_letter=None, id_column="id",
                 model_key_column="key", labels=["kafka://localhost:9092/labels"]).spec
KEYS = ["k0", "k1", "k2"]
REASON = {by_id.NEVER: NEVER_SERVED, by_id.SECOND: SECOND_LABEL, by_id.LATE: LATE_LABEL}


def stream(seed, n=1200, wait=10.0, timed=True, lag=0.0, twice=0.02):
    """[(kind, block)]: ``n`` examples a tenth of a second apart over KEYS from two features
    sources read at their own paces, served (scores: their position) or carrying their own
    label; their labels from one source in time order, most 0.5-3 s after the example, some
    before it, after the wait, twice, for unknown ids, or never; features records twice (a
    ``twice`` share, the second a little later, in either source).
    Blocks of each input in their order, the two inputs interleaved at random, the labels
    read ``lag`` seconds (of record time) behind the features."""
    rng = np.random.default_rng(seed)
    features, labels = [], []
    for e in range(n):
        key, t = KEYS[rng.integers(len(KEYS))], e / 10
        values = {"id": f"e{e}", "key": key, "x": float(rng.normal()) * 10.0 ** rng.integers(-3, 4)}
        if rng.random() < 0.03:
            values["label"] = int(rng.integers(2))
        features.append((t, values))
        if rng.random() < twice:
            features.append((t + rng.uniform(0, 1), dict(values, x=1.0)))
        kind = rng.random()
        if kind < 0.05:
            continue
        delay = (rng.uniform(0.5, 3) if kind > 0.2 else rng.uniform(-2 * wait, 0)
                 if kind > 0.12 else rng.uniform(wait, 2 * wait))
        label = {"id": f"e{e}" if rng.random() > 0.02 else f"u{e}", "key": key,
                 "label": int(rng.integers(2))}
        labels.append((t + delay, label))
        if kind > 0.2 and rng.random() < 0.05:  # (a second within twice the wait)
            labels.append((t + delay + rng.uniform(0, wait / 2), dict(label, label=0)))
    features.sort(key=lambda r: r[0])
    labels.sort(key=lambda r: r[0])
    to = rng.integers(2, size=len(features))  # (each features record's source)
    parts = [("features", s, [r for r, t in zip(features, to) if t == s]) for s in range(2)] + [
        ("labels", 0, labels)]
    out = []
    for kind, s, records in parts:
        at = 0
        while at < len(records):
            size = int(rng.integers(1, 30))
            out.append((kind, s, at, records[at:at + size]))
            at += size
    # each input's blocks in their order, the three sources at paces of their own
    out.sort(key=lambda b: b[3][0][0] + rng.uniform(0, 4) * (b[1] + 1)
             + lag * (b[0] == "labels"))
    for source in {(kind, s) for kind, s, _, _ in out}:  # (each source's own order kept)
        mine = [j for j, b in enumerate(out) if (b[0], b[1]) == source]
        for j, b in zip(mine, sorted((out[j] for j in mine), key=lambda b: b[2])):
            out[j] = b
    blocks = []
    for kind, s, at, records in out:
        block, dead = parse_records(SPEC, f"{kind[0]}/{s}",
                                    [(at + j, values) for j, (_, values) in enumerate(records)])
        assert not dead
        if timed:
            block.event_times = np.array([t for t, _ in records], dtype=np.float64)
        if kind == "features":
            block.served_scores = np.stack([block.positions, np.full(len(block), s)], axis=1
                                           ).astype(np.float64)
        blocks.append((kind, block))
    return blocks


def expected(blocks, wait):
    """By ``by_id.judge`` over the whole input: {label (source, position): JOIN and the
    example's (source, position), or a dead letter's reason}, {example (source, position):
    "joined" or its expiry time}, and the second features records."""
    examples, own, seconds, seen = [], [], [], set()
    labels, features = [], []
    for kind, block in blocks:
        times = (block.event_times if block.event_times is not None
                 else np.full(len(block), math.inf))
        for r, (k, i) in enumerate(zip(block.keys.to_pylist(), block.ids.to_pylist())):
            place = (block.source, int(block.positions[r]))
            record = (float(times[r]), place, (k, i), bool(np.isnan(block.labels[r])))
            (labels if kind == "labels" else features).append(record)
    for t, place, pair, served in sorted(features, key=lambda f: (f[0], f[1])):
        if pair in seen:  # (each pair's first in time, then source and position)
            seconds.append(place)
        else:
            seen.add(pair)
            (examples if served else own).append((pair, t, place))
    labels = [label[:3] for label in sorted(labels, key=lambda label: (label[0], label[1]))]
    pairs = {p: n for n, p in enumerate(dict.fromkeys(
        [p for p, _, _ in examples + own] + [p for _, _, p in labels]))}
    outcome, joins, joined = by_id.judge(
        [pairs[p] for p, _, _ in examples], [t for _, t, _ in examples],
        [pairs[p] for _, _, p in labels], np.array([t for t, _, _ in labels]),
        math.inf if wait is None else wait)
    by_label = {place: (by_id.JOIN, examples[j][2]) if o == by_id.JOIN else (REASON[o], None)
                for (_, place, _), o, j in zip(labels, outcome.tolist(), joins.tolist())}
    # (a label of an example that carried its own: a second, or never served if dated more
    # than the wait before it)
    owned = {p: t for p, t, _ in own}
    by_label.update({place: (NEVER_SERVED if owned[p] > t + (wait or math.inf) else SECOND_LABEL,
                             None) for t, place, p in labels if p in owned})
    by_example = {place: "joined" if j else t + (math.inf if wait is None else wait)
                  for (_, t, place), j in zip(examples, joined.tolist())}
    by_example.update({place: "joined" for _, _, place in own})
    return by_label, by_example, sorted(seconds)


def run(blocks, buckets, wait, rebuild_every=None):
    """The blocks through ``buckets`` buckets, each input's clock the oldest of its sources'
    newest times moved after each block, then the end: the answers as ``expected`` has
    them, and the joined examples' columns by their labels' place. Every ``rebuild_every``
    blocks each bucket is rebuilt from what its log persisted (as a worker without it in
    memory does)."""
    spread = [Bucket(wait) for _ in range(buckets)]
    persisted = [[] for _ in range(buckets)]

    def persist(b):
        clear, entries = spread[b].log_entries()
        persisted[b] = ([] if clear else persisted[b]) + entries

    newest = {("features", 0): -math.inf, ("features", 1): -math.inf, ("labels", 0): -math.inf}
    by_label, by_example, seconds, rows = {}, {}, [], {}

    def take(answers):
        for block, scores, came in answers.joined + answers.own:
            own = block.source.startswith("f/")
            for r in range(len(block)):
                place = (block.source, int(block.positions[r]))
                if not own:
                    assert place not in by_label, place  # (answered once)
                    by_label[place] = (by_id.JOIN, None)
                    rows[place] = (block.ids[r].as_py(), float(block.labels[r]),
                                   block.values[block.indptr[r]:block.indptr[r + 1]].tolist(),
                                   scores[r].tolist(), float(came[r]))
                by_example.setdefault("joined", []).append((block.keys[r].as_py(),
                                                            block.ids[r].as_py()))
        for block, scores, at in answers.expired:
            for r in range(len(block)):
                place = (block.source, int(block.positions[r]))
                assert place not in by_example, place
                by_example[place] = float(at[r])
                assert scores[r].tolist() == [block.positions[r], int(block.source[2:])]
        for d in answers.dead:
            if d.reason == SECOND_FEATURES:
                seconds.append((d.source, d.position))
            else:
                assert (d.source, d.position) not in by_label
                by_label[(d.source, d.position)] = (d.reason, None)

    rng, at, n = np.random.default_rng(buckets), 0, 0
    while at < len(blocks):  # (the blocks between two clocks come in any order, as after a shuffle)
        window = blocks[at:at + int(rng.integers(1, 9))]
        at += len(window)
        for kind, block in [window[j] for j in rng.permutation(len(window))]:
            numbers = bucket_numbers(block.keys, block.ids, buckets)
            for b in np.unique(numbers).tolist():
                piece = block.take(np.flatnonzero(numbers == b))
                piece.raw = None
                take(getattr(spread[b], kind)(piece))
        for kind, block in window:
            if block.event_times is not None:
                source = (kind, int(block.source[2:]))
                newest[source] = max(newest[source], float(block.event_times.max()))
        clocks = (min(newest[("features", 0)], newest[("features", 1)]),
                  newest[("labels", 0)])
        n += 1
        for b, bucket in enumerate(spread):
            take(bucket.advance(*clocks))
            persist(b)
            if rebuild_every and n % rebuild_every == 0:
                spread[b] = Bucket.rebuild(persisted[b])
    if wait is not None and all(b.event_times is not None for _, b in blocks):
        # (clocks past every record by more than twice the wait make every outcome certain:
        # the clocks answer all, the end nothing)
        past = max(newest.values()) + 3 * wait
        for bucket in spread:
            take(bucket.advance(past, past))
            assert not bucket.closed.of_pair  # (every closure forgotten: no record can fall under it)
            ended = bucket.end()
            assert not (ended.joined or ended.expired or ended.own or ended.dead)
    for bucket in spread:
        take(bucket.end())
        assert bucket.waiting == 0 and not bucket.labels_of and not bucket.others_of
        assert not bucket.served.pages and not bucket.queued.pages
    return by_label, by_example, sorted(seconds), rows


@pytest.mark.parametrize("seed,wait,timed,lag,twice", [
    (0, 10.0, True, 0.0, 0.02), (1, 10.0, True, 0.0, 0.02), (2, 4.0, True, 0.0, 0.02),
    (3, None, False, 0.0, 0.02), (4, 10.0, True, 30.0, 0.02), (5, 10.0, True, -30.0, 0.3)])
def test_buckets_answer_each_record_as_its_own_records_decide(seed, wait, timed, lag, twice,
                                                             monkeypatch):
    # (slots leave the tail in runs of a few: their merges, searches and renumbering in use)
    monkeypatch.setattr(InTime, "TAIL", 4)
    blocks = stream(seed, wait=wait or 10.0, timed=timed, lag=lag, twice=twice)
    want_labels, want_examples, want_seconds = expected(blocks, wait)
    joined_examples = {p: e for p, (o, e) in want_labels.items() if o == by_id.JOIN}
    results = [run(blocks, 1, wait), run(blocks, 7, wait, rebuild_every=11)]
    for by_label, by_example, seconds, rows in results:
        assert seconds == want_seconds
        assert {p: o for p, (o, _) in by_label.items()} == {
            p: o for p, (o, _) in want_labels.items()}
        expired = {p: t for p, t in by_example.items() if p != "joined"}
        assert expired == {p: t for p, t in want_examples.items() if t != "joined"}
        assert len(by_example["joined"]) == len(set(by_example["joined"])) == sum(
            t == "joined" for t in want_examples.values())
        for place, example in joined_examples.items():  # (its example's features and scores)
            i, label, values, scores, came = rows[place]
            assert scores == [example[1], int(example[0][2:])]
    assert results[0][3] == results[1][3]
    # (each kind of outcome came up)
    kinds = [o for o, _ in want_labels.values()]
    assert all(kinds.count(o) for o in (by_id.JOIN, NEVER_SERVED, SECOND_LABEL)
               + ((LATE_LABEL,) if wait else ()))
    if wait:
        assert any(t != "joined" for t in want_examples.values())


def test_a_label_waits_for_its_example_and_the_clocks_decide_what_never_comes():
    wait = 2.0
    bucket = Bucket(wait)
    labels = next(b for k, b in stream(5, n=40) if k == "labels")
    first = labels.take([0])
    assert not bucket.labels(first).dead  # (waits: its example may still come)
    assert bucket.labels_of
    t = float(first.event_times[0])
    assert not bucket.advance(t + wait - 0.01, t).dead  # (still may)
    dead = bucket.advance(t + wait + 0.01, t).dead
    assert [(d.source, d.position, d.reason) for d in dead] == [
        (first.source, int(first.positions[0]), NEVER_SERVED)]
    assert not bucket.labels_of and not bucket.queued.pages


def test_a_clock_finds_the_slots_it_passes_as_the_sums_are_rounded():
    """``InTime``'s search for the first time whose sum with an offset reaches a bound agrees
    with comparing every sum, where rounding moves the sum across the bound, among ties, and
    with infinite times, offsets and bounds."""
    rng = np.random.default_rng(0)
    for _ in range(3000):
        times = np.sort(np.concatenate([
            rng.choice([0.1, 0.2, 0.3, 1e16, 1e16 + 2, 2.5], rng.integers(0, 6)),
            rng.normal(0, 10.0 ** rng.integers(0, 17), rng.integers(0, 6)),
            [math.inf] * rng.integers(0, 2)]))
        offset = float(rng.choice([0.0, 0.7, 3600.0, 1.0, math.inf]))
        bound = float(rng.choice([*(times + offset), 0.8, 1e16 + 3600, -math.inf, math.inf]))
        reached = times + offset >= bound
        assert _first_at(times, offset, bound) == (
            int(np.argmax(reached)) if reached.any() else len(times)), (times, offset, bound)


def test_a_bucket_tells_pairs_apart_whatever_their_characters():
    """(model key, id) pairs whose key and id, run together, read the same are two pairs: the
    label of one does not join the example of the other."""
    def block(source, key, i, label):
        made, _ = parse_records(SPEC, source, [(0, {"id": i, "key": key, "x": 1.0,
                                                    **({} if label is None else {"label": 1})})])
        made.event_times = np.array([0.0])
        made.served_scores = np.zeros((1, 1))
        return made

    bucket = Bucket(1.0)
    bucket.features(block("f/0", "a\x1fb", "c", None))
    bucket.labels(block("l/0", "a", "b\x1fc", 1))
    ended = bucket.end()
    assert not ended.joined and [d.reason for d in ended.dead] == [NEVER_SERVED]
    assert [len(b) for b, _, _ in ended.expired] == [1]


def test_bucket_numbers_are_stable_and_spread():
    import pyarrow as pa
    keys = pa.array([f"k{i % 3}" for i in range(3000)])
    ids = pa.array([f"e{i}" for i in range(3000)])
    numbers = bucket_numbers(keys, ids, 16)
    assert (numbers == bucket_numbers(keys, ids, 16)).all()
    assert (bucket_numbers(keys.slice(10, 5), ids.slice(10, 5), 16) == numbers[10:15]).all()
    assert np.bincount(numbers, minlength=16).min() > 3000 / 16 / 2
    # (the pair, not the key or the id alone)
    assert bucket_numbers(pa.array(["a"]), pa.array(["bc"]), 1 << 30)[0] != bucket_numbers(
        pa.array(["ab"]), pa.array(["c"]), 1 << 30)[0]


@pytest.mark.parametrize("seed,expired_label,lag", [
    (7, None, 0.0), (8, -1.0, 0.0), (9, -1.0, 30.0), (10, -1.0, -30.0)])
def test_the_queue_learns_each_models_joined_records_in_label_order(seed, expired_label, lag):
    """Buckets and a ``LabelQueue`` together, the labels queued in their order while the
    answers come as the buckets give them (the records between two clocks in any order):
    each model learns its joined examples in label order and (with an expired label) its
    expired examples at their expiry time's place, as a plain run over the joined records
    in that order would; a learned example carries its label and the scores it was served
    with; a queue rebuilt from its persisted log goes on as it would have."""
    wait = 10.0
    blocks = stream(seed, wait=wait, lag=lag)
    by_label, by_example, _ = expected(blocks, wait)
    about = {}  # place -> (model key, time, label)
    for _, block in blocks:
        for r, key in enumerate(block.keys.to_pylist()):
            about[(block.source, int(block.positions[r]))] = (
                key, float(block.event_times[r]), float(block.labels[r]))
    want = {}
    for place, (outcome, example) in by_label.items():
        if outcome == by_id.JOIN:
            key, time, label = about[place]
            want.setdefault(key, []).append((time, 0, place, label, example))
    for place, at in by_example.items():
        if at != "joined" and expired_label is not None:
            key = about[place][0]
            want.setdefault(key, []).append((at, 1, place, expired_label, place))
    want = {k: [item[2:] for item in sorted(v)] for k, v in want.items()}

    buckets = [Bucket(wait) for _ in range(3)]
    queue, learned, persisted = LabelQueue(expired_label), {}, []
    newest = {("features", 0): -math.inf, ("features", 1): -math.inf, ("labels", 0): -math.inf}
    rng, at = np.random.default_rng(seed), 0

    def learn(items):
        for key, block, scores, expired in items:
            assert expired == (block.source.startswith("f/"))
            for r in range(len(block)):
                place = (block.source, int(block.positions[r]))
                example = place if expired else (f"f/{int(scores[r, 1])}", int(scores[r, 0]))
                learned.setdefault(key, []).append((place, float(block.labels[r]), example))

    while at < len(blocks):
        window = blocks[at:at + int(rng.integers(1, 9))]
        at += len(window)
        for kind, block in window:  # (the learning step's labels, in their order)
            if kind == "labels":
                queue.labels(block)
        for kind, block in [window[j] for j in rng.permutation(len(window))]:
            numbers = bucket_numbers(block.keys, block.ids, len(buckets))
            for b in np.unique(numbers).tolist():
                queue.answered(getattr(buckets[b], kind)(block.take(np.flatnonzero(numbers == b))))
            learn(queue.release())
        for kind, block in window:
            source = (kind, int(block.source[2:]))
            newest[source] = max(newest[source], float(block.event_times.max()))
        clocks = (min(newest[("features", 0)], newest[("features", 1)]), newest[("labels", 0)])
        for b in rng.permutation(len(buckets)).tolist():  # (each answering in its own time)
            queue.answered(buckets[b].advance(*clocks))
            learn(queue.release())
        queue.advance(clocks[1])  # (once every bucket has applied the clock)
        learn(queue.release())
        clear, entries = queue.log_entries()
        persisted = ([] if clear else persisted) + entries
        if rng.random() < 0.1:  # (a worker without it in memory)
            queue = LabelQueue.rebuild(persisted)
    for bucket in buckets:
        queue.answered(bucket.end())
    learn(queue.release(ended=True))
    assert learned == want
    assert queue.waiting == 0 and not queue.answers


def test_the_queue_puts_an_expiry_before_the_first_label_dated_after_it():
    """A model's labels handed on out of time order, and expiries dated as labels are: an
    expired example is learned before the first label not learned yet that is dated after it
    (one of the same time first), as two queues merge."""
    def block(source, rows):  # rows: (position, id, time)
        made, _ = parse_records(SPEC, source, [(p, {"id": i, "key": "k", "x": 1.0, "label": 1})
                                               for p, i, _ in rows])
        made.event_times = np.array([t for *_, t in rows])
        return made

    queue = LabelQueue(expired_label=0.0)
    labels = block("l/0", [(0, "a", 4.0), (1, "b", 1.0), (2, "c", 1.0), (3, "d", 5.0)])
    queue.labels(labels)
    expired = block("f/0", [(0, "e", 0.0), (1, "f", 0.0), (2, "g", 0.0)])
    queue.answered(Answers(joined=[(labels, np.zeros((4, 1)), np.zeros(4))],
                           expired=[(expired, np.zeros((3, 1)), np.array([2.0, 5.0, 6.0]))]))
    learned = [(b.source, int(p)) for _, b, _, _ in queue.release(ended=True)
               for p in b.positions]
    assert learned == [("f/0", 0), ("l/0", 0), ("l/0", 1), ("l/0", 2), ("l/0", 3), ("f/0", 1),
                       ("f/0", 2)]


def small(rng):
    """A few records of two ids over two features sources and a labels source, with many ties
    and records far past the wait, and safe clocks for them: (wait, records, clocks)."""
    wait, records, positions = float(rng.choice([1.0, 2.0])), [], {"f/0": 0, "f/1": 0, "l/0": 0}
    times = [0, 0.5, 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8]
    for _ in range(int(rng.integers(1, 12))):
        kind = "features" if rng.random() < 0.5 else "labels"
        source = ("f/0", "f/1")[rng.integers(2)] if kind == "features" else "l/0"
        label = (None if kind == "features" and rng.random() < 0.75
                 else float(rng.integers(2)))
        records.append((kind, source, positions[source], float(rng.choice(times)),
                        ("a", "b")[rng.integers(2)], label))
        positions[source] += 1
    clocks, f, l = [], -math.inf, -math.inf
    for _ in range(int(rng.integers(0, 5))):
        f, l = max(f, float(rng.choice(times))), max(l, float(rng.choice(times)))
        clocks.append((f, l))
    return wait, records, clocks


def answered(wait, records, clocks, rng):
    """The answers of one bucket fed ``records`` one by one, each before the first clock past
    its time (safe) and otherwise whenever ``rng`` says, in any order: {place: answers}."""
    bucket, out, waiting = Bucket(wait), {}, list(records)

    def take(answers):
        for key, rows in (("joined", answers.joined), ("expired", answers.expired),
                          ("own", answers.own)):
            for block, _, _ in rows:
                for p in block.positions.tolist():
                    out.setdefault((block.source, p), []).append(key)
        for d in answers.dead:
            out.setdefault((d.source, d.position), []).append(d.reason)

    for f, l in [*clocks, (math.inf, math.inf)]:
        due = [r for r in waiting if r[3] < (f if r[0] == "features" else l) or rng.random() < .3]
        waiting = [r for r in waiting if r not in due]
        for kind, source, position, time, i, label in [due[j] for j in rng.permutation(len(due))]:
            values = {"id": i, "key": "k", "x": 1.0, **({} if label is None else {"label": label})}
            block, _ = parse_records(SPEC, source, [(position, values)])
            block.event_times = np.array([time])
            block.served_scores = np.zeros((1, 1))
            take(getattr(bucket, kind)(block))
        if math.isfinite(f):
            take(bucket.advance(f, l))
    take(bucket.end())
    return out


def test_no_answer_depends_on_when_records_come_and_each_is_answered_once():
    """Small streams with records far past the wait (a pair's records more than twice the wait
    after its example are of a later example of the id, so that a bucket forgets closed pairs
    without its answers depending on when): every order and timing of the records that keeps
    the clocks safe gives the same answers, each label and each features record answered once
    (a joined example by its label's answer)."""
    rng = np.random.default_rng(0)
    for _ in range(400):
        wait, records, clocks = small(rng)
        results = [answered(wait, records, clocks, rng) for _ in range(4)]
        assert all(r == results[0] for r in results), (wait, records, clocks)
        got = results[0]
        places = [(source, position) for _, source, position, *_ in records]
        assert all(len(a) == 1 for a in got.values()) and set(got) <= set(places)
        labels = [p for (kind, *_), p in zip(records, places) if kind == "labels"]
        assert all(p in got for p in labels)
        assert sum(got[p] == ["joined"] for p in labels) == sum(p not in got for p in places)
