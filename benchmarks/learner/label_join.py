"""The labels join alone, without Beam: the join keyed by example id (``labels/buckets.py``'s
buckets and ``labels/queue.py``'s queue, issue #59) against today's join in the learning step
(``LabelJoin``) on one stream, CPU per example.

Data: ``--examples`` served examples of 21 features and one model key, 5,000 a second of record
time, in blocks of 500, with a wait of an hour: every example waits and joins. Two cases: each
labeled 1 s after it (10 blocks behind: the common case, a few thousand waiting), and each
labeled after the last example (every example waiting at once: the case of labels hours late,
where what a clock costs per record waiting shows). The reference hands ``LabelJoin`` each features
block (``features``) and labels block (``labels``) as the learning step does. The other run
splits each block over B buckets (1, 4 and 16; ``pipelines.join_buckets.bucket_numbers``), queues
the labels in a ``LabelQueue``, moves the clocks after each block (the features' and labels'
newest times) and releases what the queue learns. Both end with every example learned. Runs
alternate (reference, buckets, reference, ...), ``--repeats`` times each; CPU time of this
process.

    .venv/bin/python benchmarks/learner/label_join.py            # 300,000 examples, 3 repeats
    .venv/bin/python benchmarks/learner/label_join.py --quick    # 30,000

Writes benchmarks/results/label_join{.md,.json} (``--quick``: results/tmp/).
"""
import math
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.machine import header  # noqa: E402
from common.results import result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress  # noqa: E402

from unitless.labels.buckets import Bucket  # noqa: E402
from unitless.labels.join import LabelJoin  # noqa: E402
from unitless.labels.queue import LabelQueue  # noqa: E402
from unitless.parse.records import ExampleBlock  # noqa: E402
from unitless.pipelines.join_buckets import bucket_numbers  # noqa: E402

BLOCK, FEATURES, RATE, WAIT = 500, 21, 5000.0, 3600.0
CASES = {"labels 1 s behind": 10, "labels after every example": None}  # (blocks behind)


def stream(n, seed, behind):
    """[(features block, labels block)] of ``n`` examples: the labels ``behind`` blocks
    later."""
    rng = np.random.default_rng(seed)
    blocks = []
    for start in range(0, n, BLOCK):
        ids = pa.array([f"e{i}" for i in range(start, start + BLOCK)])
        keys = pa.array(["model"] * BLOCK)
        times = np.arange(start, start + BLOCK) / RATE
        positions = np.arange(start, start + BLOCK, dtype=np.int64)
        features = ExampleBlock(
            "features/0", positions, ids, keys, np.full(BLOCK, np.nan), np.ones(BLOCK),
            np.arange(BLOCK + 1, dtype=np.int64) * FEATURES,
            np.tile(np.arange(FEATURES, dtype=np.int64), BLOCK),
            rng.normal(size=BLOCK * FEATURES), event_times=times,
            served_scores=rng.random((BLOCK, 1)))
        labels = ExampleBlock(
            "labels/0", positions, ids, keys, rng.integers(0, 2, BLOCK).astype(np.float64),
            np.ones(BLOCK), np.zeros(BLOCK + 1, dtype=np.int64), np.zeros(0, np.int64),
            np.zeros(0), event_times=times + behind * BLOCK / RATE)
        blocks.append((features, labels))
    return blocks


def label_join(blocks, behind):
    join, learned = LabelJoin(WAIT, None, keyed=True), 0
    for i in range(len(blocks) + behind):
        if i < len(blocks):
            f = blocks[i][0]
            join.features(f.source, f.positions, f.keys.to_pylist(), f.event_times,
                          [("model", f, f.served_scores)])
        if i >= behind:
            learned += sum(len(b) for _, b, _, _ in join.labels(blocks[i - behind][1])[0])
    return learned


def by_buckets(blocks, behind, buckets):
    spread, queue, learned = [Bucket(WAIT) for _ in range(buckets)], LabelQueue(), 0
    clocks = [-math.inf, -math.inf]
    for i in range(len(blocks) + behind):
        arrived = ([("features", blocks[i][0])] if i < len(blocks) else []) + (
            [("labels", blocks[i - behind][1])] if i >= behind else [])
        for kind, block in arrived:
            if kind == "labels":
                queue.labels(block)
            numbers = bucket_numbers(block.keys, block.ids, buckets)
            for b in np.unique(numbers).tolist():
                queue.answered(getattr(spread[b], kind)(block.take(np.flatnonzero(numbers == b))))
            clocks[kind == "labels"] = float(block.event_times.max())
        for bucket in spread:
            queue.answered(bucket.advance(*clocks))
        learned += sum(len(b) for _, b, _, _ in queue.release())
    for bucket in spread:
        queue.answered(bucket.end())
    return learned + sum(len(b) for _, b, _, _ in queue.release(ended=True))


def timed(run, *args):
    start = time.process_time()
    learned = run(*args)
    return time.process_time() - start, learned


def main():
    args = parse_args(__doc__, examples=(int, 300_000, "examples"), repeats=(int, 3),
                      seed=(int, 0))
    n = 30_000 if args.quick else args.examples
    h = header()
    data = {"examples": n // BLOCK * BLOCK, "cases": {}}
    warm = stream(5 * BLOCK, args.seed, 2)  # (first calls: imports, caches)
    label_join(warm, 2), by_buckets(warm, 2, 4)
    for case, behind in CASES.items():
        behind = behind if behind is not None else n // BLOCK
        blocks = stream(n, args.seed, behind)
        runs = data["cases"][case] = {name: [] for name in (
            "LabelJoin", "buckets 1", "buckets 4", "buckets 16")}
        for _ in range(args.repeats):
            for name in runs:
                seconds, learned = (timed(label_join, blocks, behind) if name == "LabelJoin"
                                    else timed(by_buckets, blocks, behind,
                                               int(name.split()[1])))
                assert learned == len(blocks) * BLOCK, (name, learned)
                runs[name].append(seconds)
                progress(f"{case}, {name}: {seconds:.2f} s of CPU, "
                         f"{seconds / learned * 1e6:.1f} µs an example")
        del blocks
    write_results(result_name("label_join", args.quick),
                  "The labels join alone: keyed by example id against today's", h,
                  render(data), data)


def render(data):
    n, tables = data["examples"], []
    for case, runs in data["cases"].items():
        reference, rows = runs["LabelJoin"], []
        for name, seconds in runs.items():
            ratios = [s / r for s, r in zip(seconds, reference)]
            rows.append([name, f"{min(seconds):.2f}–{max(seconds):.2f}",
                         f"{min(seconds) / n * 1e6:.1f}–{max(seconds) / n * 1e6:.1f}",
                         f"{min(ratios):.2f}–{max(ratios):.2f}"])
        tables.append(f"**{case}**\n\n" + table(
            ["join", "CPU s", "µs an example", "× LabelJoin's CPU"], rows) + "\n")
    repeats = len(next(iter(data["cases"].values()))["LabelJoin"])
    return f"""{n:,} examples of 21 features, one model key, 5,000 a second of record time in
blocks of 500, a wait of an hour: every example waits and joins; each labeled 1 s later (a few
thousand waiting), or after the last example (all of them waiting at once).
`LabelJoin` is today's join in the learning step, handed each block as the step hands it on;
"buckets B" is the join keyed by example id: each block split over B buckets (`Bucket`), the
labels queued in a `LabelQueue`, the clocks moved after each block, what the queue learns
released. CPU time of one process, runs alternated; ranges over {repeats} repeats, the
ratio taken run by run against the `LabelJoin` run just before.

{chr(10).join(tables)}
Neither counts Beam: on a runner the buckets are a keyed step of their own, each block crosses
a shuffle to them and each answer another to the learning step.
"""


if __name__ == "__main__":
    main()
