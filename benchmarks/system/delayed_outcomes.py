"""Delayed outcomes over files: what serving every example and joining its label later costs,
beside a plain run over the joined records.

The artificial stream (21 features), ``--examples`` of them over 8 model keys; a features file
without labels, and a labels file (id, key, label) of 95% of them in a random order, so that
every example is served and waits before the first label is joined (the features file's name
sorts first: the join holds all of them at once, its worst case). A: ``unitless train --input
features.csv --labels labels.csv``; B: ``unitless train`` over the same labeled examples joined,
in label order, with their labels (what A's models equal, bit for bit: tests/pipeline/test_delayed_outcomes.py).
Each as a process of its own on the FnApiRunner, alternated ``--pairs`` times: wall time, CPU,
peak RSS, and A/B. First, the join alone (``labels/join.py``, no Beam, in this process): as many
examples served and waiting in blocks of 1,000, then their labels joined in another order,
timed, with the bytes of what waits and the growth of this process's peak RSS.

With ``--timed`` (issue #59's case), the records carry their time: the examples one a
millisecond, the labels all after the last of them in the same order as above, one a
millisecond, so every example waits at once; A runs with ``--time-column t --label-wait 3h``,
a bounded input joined whole at its end (docs/delayed-outcomes.md), B as above.

    .venv/bin/python benchmarks/system/delayed_outcomes.py            # 300,000 examples, 3 pairs
    .venv/bin/python benchmarks/system/delayed_outcomes.py --quick    # 30,000 examples, 1 pair
    .venv/bin/python benchmarks/system/delayed_outcomes.py --timed --examples 2000000 --pairs 2
    .venv/bin/python benchmarks/system/delayed_outcomes.py --timed --runner flink  # parallelism 2

Writes benchmarks/results/delayed_outcomes{,_timed}{,_flink}{.md,.json} (``--quick``: in
results/tmp/).
"""
import re
import resource
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # (deploy/)
from common.data import artificial_stream, write_csv  # noqa: E402
from common.machine import header  # noqa: E402
from common.results import result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress, run_timed, scratch, unitless_command  # noqa: E402
from serving import runner_args as flink_runner_args  # noqa: E402
from unitless.labels.join import LabelJoin  # noqa: E402
from unitless.learner import dense_batch  # noqa: E402
from unitless.parse.records import ExampleBlock  # noqa: E402
from unitless.store.catalog import newest_models  # noqa: E402

KEYS = np.array([f"k{i}" for i in range(8)])
LABELED = 0.95
TICK = 0.001  # s between records' times (--timed)
TIMED = ("--time-column", "t", "--label-wait", "3h")


def write_inputs(work, n, seed=0, timed=False):
    """features.csv (no label), labels.csv (95% labeled, shuffled), joined.csv (B's input);
    ``timed``: with a time column t (s), every label after every example."""
    rng = np.random.default_rng(seed)
    X, y, _ = artificial_stream(n, rng)
    keys = KEYS[rng.integers(len(KEYS), size=n)]
    times = np.arange(n) * TICK if timed else None
    write_csv(work / "features.csv", X, y, keys, label=False, times=times)
    order = rng.permutation(n)[:int(n * LABELED)]
    with open(work / "labels.csv", "w") as f:
        f.write("id,key,label" + ",t" * timed + "\n")
        f.writelines(f"{i},{keys[i]},{int(y[i])}" + (f",{(n + j) * TICK:.3f}" if timed else "")
                     + "\n" for j, i in enumerate(order))
    write_csv(work / "joined.csv", X[order], y[order], keys[order])
    return len(order)


def join_alone(n, chunk=1000, seed=0):
    """(seconds to wait, seconds to join, bytes waiting, peak RSS growth MiB) of n examples of
    the artificial stream served and joined by ``LabelJoin`` alone."""
    rng = np.random.default_rng(seed)
    X, y, _ = artificial_stream(n, rng)
    ids = np.array([f"e{i}" for i in range(n)], dtype=object)

    def block(rows, labels, positions, with_features=True):
        batch = dense_batch(X[rows] if with_features else np.zeros((len(rows), 0)), labels)
        return ExampleBlock("features" if with_features else "labels", positions,
                            pa.array(ids[rows], pa.string()), pa.repeat(pa.scalar("k"), len(rows)),
                            batch.labels, batch.weights, batch.indptr, batch.indices,
                            batch.values)
    served = [block(np.arange(a, min(a + chunk, n)), np.full(min(chunk, n - a), np.nan),
                    np.arange(a, min(a + chunk, n))) for a in range(0, n, chunk)]
    order = rng.permutation(n)
    labels = [block(order[a:a + chunk], y[order[a:a + chunk]], np.arange(a, min(a + chunk, n)),
                    False) for a in range(0, n, chunk)]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    join = LabelJoin()
    t = time.perf_counter()
    for b in served:
        join.features(b.source, b.positions, b.keys.to_pylist(), None,
                      [("k", b, np.zeros((len(b), 1)))])
    waited, nbytes = time.perf_counter() - t, join.nbytes
    t = time.perf_counter()
    learned = sum(len(j) for b in labels for _, j, _, _ in join.labels(b)[0])
    assert learned == n
    return (waited, time.perf_counter() - t, nbytes,
            (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024)


def run(work, name, inputs, runner=()):
    out = work / name
    shutil.rmtree(out, ignore_errors=True)  # (a kept --workdir's earlier run)
    return run_timed(unitless_command([
        "train", "--input", *map(str, inputs), "--id-column", "id", "--model-key-column", "key",
        "--model-dir", str(out / "models"), "--predictions", str(out / "p"),
        "--dead-letter", str(out / "d"), *runner]))


@contextmanager
def runner_args(runner, work):
    """The command's runner arguments: none (the FnApiRunner), or a Flink job server's."""
    if runner == "fnapi":
        yield ()
        return
    with flink_runner_args("flink", work) as args:
        yield args


def main():
    args = parse_args(__doc__, examples=(int, 300_000), pairs=(int, 3), workdir=(str, None),
                      timed=(bool, False, "record times, every label after every example"),
                      runner=(str, "fnapi", "fnapi, or flink (parallelism 2)"))
    n, pairs = (30_000, 1) if args.quick else (args.examples, args.pairs)
    h = header()
    if not args.timed:
        progress(f"the join alone: {n:,} examples")
        waited, joined, nbytes, rss = join_alone(n)
    with scratch(args.workdir, "unitless-delayed-") as work, \
            runner_args(args.runner, work) as runner:
        labeled = write_inputs(work, n, timed=args.timed)
        runs = []
        a = [work / "features.csv", "--labels", work / "labels.csv", *TIMED * args.timed]
        for p in range(pairs):
            for name, inputs in (("A", a), ("B", [work / "joined.csv"])):
                progress(f"pair {p + 1}: {name}")
                r = run(work, f"{name}{p}", inputs, runner)
                largest = re.search(r"largest value written to Beam state: (\d+) bytes",
                                    r["stderr"])
                runs.append({"pair": p + 1, "run": name, "largest_state_value_bytes": int(
                    largest.group(1)) if largest else None, **{k: r[k] for k in (
                        "wall_s", "cpu_s", "max_rss_mib", "load_1min", "command")}})
            equal = models_equal(work / f"A{p}" / "models", work / f"B{p}" / "models")
            progress(f"pair {p + 1}: A's final models equal B's: {equal}")
            if not equal:
                raise SystemExit(f"pair {p + 1}: A's final models differ from B's")
    walls = {name: [r["wall_s"] for r in runs if r["run"] == name] for name in "AB"}
    peaks = {name: [r["max_rss_mib"] for r in runs if r["run"] == name] for name in "AB"}
    ratios = [a / b for a, b in zip(walls["A"], walls["B"])]
    above = [a - b for a, b in zip(peaks["A"], peaks["B"])]
    rows = [[r["pair"], r["run"], f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}",
             f"{r['max_rss_mib']:.0f}", _mib(r["largest_state_value_bytes"]), r["load_1min"]]
            for r in runs]
    alone = "" if args.timed else f"""
The join alone (no Beam): {n:,} examples of 21 features served in blocks of 1,000 and waiting:
{waited:.2f} s ({1e6 * waited / n:.1f} µs an example), {nbytes / 2**20:.1f} MiB waiting, peak RSS
+{rss:.0f} MiB; then all their labels joined, in a random order: {joined:.2f} s
({1e6 * joined / n:.1f} µs an example).
"""
    timed = (" `--time-column t --label-wait 3h`, every label dated after every example (all "
             "wait at once; the input joined whole at its end)" if args.timed else "")
    body = f"""{alone}
{n:,} examples served (A), {labeled:,} of them labeled and learned (A and B); 8 model keys.

{table(["pair", "run", "wall s", "CPU s", "peak RSS MiB", "largest state value MiB",
        "load 1-min before/after"], rows)}

A/B wall time, pair by pair: {", ".join(f"{x:.2f}" for x in ratios)}; A's peak RSS above B's:
{", ".join(f"{x:.0f}" for x in above)} MiB. In each pair A's final models equal B's, column by
column (the newest checkpoints). "largest state value": the largest value the learning step
wrote to Beam state (its own accounting, the `state_value_bytes` distribution the run logs).

A: `unitless train --input features.csv --labels labels.csv`{timed} (serves all, joins,
learns); B: `unitless train --input joined.csv` (learns the same labeled examples, in label
order).
"""
    flink = args.runner == "flink"
    name = "delayed_outcomes" + "_timed" * args.timed + "_flink" * flink
    write_results(result_name(name, args.quick), "Delayed outcomes over files" + (
        ", every example waiting at once" if args.timed else "") + (
        " (Flink, parallelism 2; the SDK workers in the command's process, LOOPBACK: the "
        "command's peak RSS, not the job server's)" if flink else ""), h, body, {
        "examples": n, "labeled": labeled, "timed": args.timed, "runner": args.runner,
        "runs": runs,
        "a_over_b": ratios, "a_rss_above_b_mib": above,
        **({} if args.timed else {"join_alone": {
            "wait_s": waited, "join_s": joined, "waiting_bytes": nbytes,
            "peak_rss_growth_mib": rss}})})


def models_equal(a, b):
    """Whether two model directories' newest checkpoints hold the same rows, column by column."""
    tables = []
    for directory in (a, b):
        t = newest_models(str(directory))
        t = t.set_column(0, "model_key", pc.cast(t.column(0), pa.string()))
        tables.append(t.sort_by([("model_key", "ascending"), ("class", "ascending"),
                                 ("index", "ascending")]))
    return tables[0].column_names == tables[1].column_names and all(
        x.equals(y) for x, y in zip(tables[0].columns, tables[1].columns))


def _mib(size):
    return "—" if size is None else f"{size / 2**20:.2f}"


if __name__ == "__main__":
    main()
