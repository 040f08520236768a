"""Many models at once: the same examples split over 1, 64, 1,000 and 10,000 model keys, and
round-robin over 100,000 and 1,000,000.

Data: the ScInOL slides' artificial stream as in ``pipeline.py`` (1M examples × 21 features),
written once as CSV with one key column per split: round-robin (example i has key i mod K) and
Zipf-skewed (key of rank r drawn with probability ∝ 1/r, a fixed seed), K = 64, 1,000, 10,000,
and round-robin only, ``--bits 18`` only, K = 100,000 and 1,000,000 (one example per key at
1M rows: the per-model costs at their largest); the columns not used as the key are ignored
(``--ignore-columns``), so every run reads the same file. Each run is ``unitless train``
(NAG, logistic, η = 0.5, the FnApiRunner in-process, Parquet predictions, a checkpoint per key
at the end) as a process of its own under
``/usr/bin/time -v``, with ``--bits 18`` and ``--bits 24``; Vowpal Wabbit learns the single-key
case (``-b 18`` / ``-b 24``, ``python -m vowpalwabbit``: its C++ driver). Every run must predict
every example exactly once.

Reported: wall time, examples/s, peak RSS, RSS per key ((peak − the single key's peak) / keys;
"≤ 0" where the run peaked below the single key's, whose input held in Beam state dominates)
and examples/s relative to the single key at the same bits; and the run over the most keys
(round-robin, ``--bits 18``) once more with ``--resume`` and nothing new to learn: what a
restart over that many models costs. Beside them, the single key and the most keys
(round-robin, ``--bits 18``) once more through ``bare_keys.py``: the same per-key work in a
plain loop without Beam, to tell the product's own per-key costs from Beam's. Targets (issue
#13): 10,000 keys within 2 GiB peak RSS; 64 keys at ≥ 0.8× and 10,000 keys at ≥ 0.5× the
single key's examples/s; the single model's peak RSS ≤ 4× VW's; (issue #37) 1,000,000 keys
within 4 GiB peak RSS and 6× the single key's wall time, and ≤ 2 KiB of RSS per model.

    .venv/bin/python benchmarks/system/many_models.py            # 1M rows
    .venv/bin/python benchmarks/system/many_models.py --quick    # 20k rows, 1, 64 and 1,000 keys
    .venv/bin/python benchmarks/system/many_models.py --no-large # without 100,000 and 1,000,000 keys

Writes benchmarks/results/many_models{.md,.json} (``--quick``: results/tmp/many_models_quick.*).
"""
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.data import artificial_stream  # noqa: E402
from common.machine import header  # noqa: E402
from common.results import fnum, relative_command, result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress, run_timed, scratch, unitless_command  # noqa: E402
from pipeline import (append_lines, check_predictions, ours_command, run_ours,  # noqa: E402
                      run_vw, vw_lines)

KEY_COUNTS = (64, 1_000, 10_000)
LARGE_COUNTS = (100_000, 1_000_000)  # (round-robin, --bits 18 only)
SPLITS = {"round-robin": "r", "Zipf": "z"}
BITS = (18, 24)
TARGETS = {"rss_gib_10k": 2.0, "rate_64": 0.8, "rate_10k": 0.5, "rss_vs_vw": 4.0,
           "rss_gib_1m": 4.0, "wall_1m": 6.0, "kib_per_model": 2.0}


def key_columns(n, key_counts, seed, large_counts=()):
    """{column name: model key per example} for each split and key count (``large_counts``:
    round-robin only)."""
    rng = np.random.default_rng(seed)
    columns = {}
    for k in key_counts:
        columns[f"r{k}"] = np.arange(n) % k
        p = 1.0 / np.arange(1, k + 1)
        columns[f"z{k}"] = rng.choice(k, size=n, p=p / p.sum())
    for k in large_counts:
        columns[f"r{k}"] = np.arange(n) % k
    return columns


def write_data(work, X, y, keys, chunk=250_000):
    """data.csv (``id``, the key columns, ``label``, ``x1``..``x21``) and data.vw (the same rows
    as VW text), with the very same number strings."""
    n, d = X.shape
    names = [f"x{j + 1}" for j in range(d)]
    csv, vw = work / "data.csv", work / "data.vw"
    csv.write_text(",".join(["id", *keys, "label", *names]) + "\n")
    vw.write_text("")
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        ids = pc.cast(pa.array(np.arange(a, b)), pa.string())
        labels = pc.cast(pa.array(y[a:b]), pa.string())
        xs = [pc.cast(pa.array(X[a:b, j]), pa.string()) for j in range(d)]
        ks = [pc.binary_join_element_wise(pa.scalar("k"), pc.cast(pa.array(v[a:b]), pa.string()),
                                          "") for v in keys.values()]
        append_lines(csv, pc.binary_join_element_wise(ids, *ks, labels, *xs, ","))
        append_lines(vw, vw_lines(ids, labels, xs, names))
    return csv, vw


def options(bits, key, keys):
    """``unitless train`` options of a run keyed by column ``key`` (None: one model)."""
    ignored = [c for c in keys if c != key]
    extra = ["--bits", bits, "--ignore-columns", ",".join(ignored)]
    return extra + (["--model-key-column", key] if key else [])


def run(work, csv, n, bits, key, keys):
    """One ``unitless train`` run keyed by column ``key`` (None: one model)."""
    r = run_ours(work, f"b{bits}_{key or 'one'}", csv, n, extra=options(bits, key, keys))
    expected = len(np.unique(keys[key])) if key else 1
    if r["model_keys"] != expected:
        raise RuntimeError(f"{key}: {r['model_keys']} model keys predicted, not {expected}")
    return {k: v for k, v in r.items() if not k.startswith("_") and k not in ("stdout", "stderr")}


def run_resumed(work, csv, n, bits, key, keys):
    """The keyed run once more with ``--resume`` and nothing new: every example skipped as
    learned, no prediction; what a restart over that many models costs before it learns."""
    extra = [*options(bits, key, keys), "--resume"]
    r = run_timed(unitless_command(ours_command(csv, work / f"b{bits}_{key}", extra=extra)))
    if "this run: 0 examples learned" not in r["stdout"] or f"{n:,} skipped" not in r["stdout"]:
        raise RuntimeError(f"--resume over {key}: not all {n:,} examples skipped:\n"
                           f"{r['stdout'][-2000:]}")
    return {k: v for k, v in r.items() if k not in ("stdout", "stderr")}


def run_bare(work, csv, n, bits, key, keys):
    """The same run's per-key work without Beam (``bare_keys.py``), as a process of its own:
    every example predicted once."""
    from unitless.connectors.files import read_output
    out = work / f"bare_b{bits}_{key or 'one'}"
    r = run_timed([sys.executable, str(Path(__file__).resolve().parent / "bare_keys.py"),
                   *ours_command(csv, out, extra=options(bits, key, keys))])
    check_predictions(f"bare loop {key or 'one'}", read_output(str(out / "predictions")), None, n)
    return {k: v for k, v in r.items() if k not in ("stdout", "stderr")}


def run_all(args, n, work):
    counts = tuple(k for k in KEY_COUNTS if k <= n // 10)
    large = () if args.quick or args.no_large else tuple(k for k in LARGE_COUNTS if k <= n)
    progress(f"generating {n:,} examples in {work}")
    X, y, _ = artificial_stream(n, args.seed)
    y = y.astype(np.int64)
    keys = key_columns(n, counts, args.seed, large)
    csv, vw = write_data(work, X, y, keys)
    runs = {}
    for bits in BITS:
        r = run_vw(work, f"vw_b{bits}", vw, y.astype(np.float64), "-b", bits)
        runs[f"vw b{bits}"] = {k: v for k, v in r.items()
                               if not k.startswith("_") and k not in ("stdout", "stderr")}
        large_keys = (f"r{k}" for k in large if bits == BITS[0])
        for key in (None, *(f"{s}{k}" for k in counts for s in SPLITS.values()), *large_keys):
            name = f"b{bits} {key or 'one'}"
            runs[name] = run(work, csv, n, bits, key, keys)
            progress(f"{name}: wall {runs[name]['wall_s']:.1f} s, "
                     f"peak RSS {runs[name]['max_rss_mib']:.0f} MiB")
        # (the single key again after the others: its run varies by ±20% on a noisy machine,
        # and every ratio divides by it)
        runs[f"b{bits} one again"] = run(work, csv, n, bits, None, keys)
        progress(f"b{bits} one again: wall {runs[f'b{bits} one again']['wall_s']:.1f} s")
    most = f"r{counts[-1]}"
    runs[f"b{BITS[0]} {most} resumed"] = run_resumed(work, csv, n, BITS[0], most, keys)
    for key in (None, most):
        name = f"b{BITS[0]} {key or 'one'} bare"
        runs[name] = run_bare(work, csv, n, BITS[0], key, keys)
        progress(f"{name}: wall {runs[name]['wall_s']:.1f} s")
    zipf_top = {k: float(np.bincount(keys[f"z{k}"]).max() / n) for k in counts}
    return {"rows": n, "seed": args.seed, "key_counts": counts + large, "runs": runs,
            "zipf_largest_key_share": zipf_top}


def _single(R, bits):
    """The single key's run at ``bits``, its wall time the mean of its runs (before and after
    the others)."""
    runs = [R[name] for name in (f"b{bits} one", f"b{bits} one again") if name in R]
    return {**runs[0], "wall_s": sum(r["wall_s"] for r in runs) / len(runs),
            "walls": [r["wall_s"] for r in runs]}


def render(data):
    n, R = data["rows"], data["runs"]
    rows, verdicts = [], []
    for bits in BITS:
        one, vw = _single(R, bits), R[f"vw b{bits}"]
        rows.append([bits, "VW", 1, fnum(vw["wall_s"], 3, sci=False), _cpu(vw),
                     f"{n / vw['wall_s']:,.0f}", "—", fnum(vw["max_rss_mib"], 3, sci=False), "—"])
        for name, r in R.items():
            if not name.startswith(f"b{bits} ") or name.endswith((" resumed", " bare",
                                                                  " again")):
                continue
            key = name.split()[1]
            r = one if key == "one" else r
            split = "—" if key == "one" else next(s for s, c in SPLITS.items() if key[0] == c)
            k = 1 if key == "one" else int(key[1:])
            extra = r["max_rss_mib"] - one["max_rss_mib"]
            per_key = ("—" if k == 1 else "≤ 0" if extra <= 0
                       else fnum(extra * 1024 / k, 3, sci=False))
            rows.append([bits, split, f"{k:,}", fnum(r["wall_s"], 3, sci=False),
                         _cpu(r), f"{n / r['wall_s']:,.0f}",
                         fnum(one["wall_s"] / r["wall_s"], 3),
                         fnum(r["max_rss_mib"], 4, sci=False), per_key])
        verdicts += _verdicts(R, bits)
    return f"""Every run predicted each of the {n:,} examples exactly once. Zipf: the largest key
holds {', '.join(f"{100 * s:.1f}% ({k:,} keys)" for k, s in data['zipf_largest_key_share'].items())}
of the examples.

{table(["bits", "keys", "model keys", "wall s", "CPU s: user / system", "examples/s",
        "× single key's examples/s", "peak RSS MiB", "RSS per key KiB"], rows)}

The single key ran before the others and again after them ({_single_walls(R)}); its row and
every ratio use the mean of the two.

The many keys' extra time is mostly user CPU (Python). What is still paid per model (py-spy
profiles of the 10,000-key run, docs/many-models.md): its bookkeeping object, its share of the
group pickled into Beam state per element, and its checkpoint's metadata, checksum and summary
line.

{_bare_lines(data)}

{_resumed_line(data)}

Targets (issues #13 and #37):

{table(["target", "measured", "met?"], verdicts)}

Command of the single-key run (the others add `--model-key-column COLUMN`):
`{relative_command(R["b18 one"]["command"])}`
"""


def _cpu(r):
    """"user / system" CPU seconds of a run (results from before they were kept: "—")."""
    return f"{r['user_s']:.1f} / {r['sys_s']:.1f}" if "user_s" in r else "—"


def _single_walls(R):
    return "; ".join(f"--bits {bits}: "
                     + " and ".join(f"{w:.2f}" for w in _single(R, bits)["walls"]) + " s"
                     for bits in BITS)


def _bare_lines(data):
    """The bare per-key loop's runs (``bare_keys.py``) beside the pipeline's, and the bound
    they put on the pipeline: its run over many keys does what its single key's does plus at
    least the bare loop's extra per-key work."""
    R = data["runs"]
    bare = [name for name in R if name.endswith(" bare")]
    if not bare:  # (results from before it was measured)
        return ""
    n, rows = data["rows"], []
    one = R[bare[0]]
    for name in bare:
        bits, key, _ = name.split()
        r, ours = R[name], R[f"{bits} {key}"]
        rows.append([f"{1 if key == 'one' else int(key[1:]):,}", fnum(r["wall_s"], 3, sci=False),
                     _cpu(r), f"{n / r['wall_s']:,.0f}", fnum(one["wall_s"] / r["wall_s"], 3),
                     fnum(ours["wall_s"], 3, sci=False), fnum(r["wall_s"] / ours["wall_s"], 3)])
    return ("The product's per-key work without Beam (`benchmarks/system/bare_keys.py`, "
            f"--bits {bare[0].split()[0][1:]}, round-robin): the same reading, key split, "
            "learning, Parquet predictions and checkpoints in one plain loop, no state, "
            "timers, shuffle or bundles, each key's examples learned by a call of their own "
            "(`KeyedModel.learn_block`). The pipeline learns each part of a group's block, "
            "of many keys, in one call (issue #37), so over many keys it can beat this loop.\n\n"
            + table(["model keys", "wall s", "CPU s: user / system", "examples/s",
                     "× the bare single key", "pipeline wall s",
                     "pipeline × bare (examples/s)"], rows))


def _resumed_line(data):
    resumed = [(k, v) for k, v in data["runs"].items() if k.endswith(" resumed")]
    if not resumed:  # (results from before it was measured)
        return ""
    (name, r), = resumed
    bits, key, _ = name.split()
    fresh = data["runs"][f"{bits} {key}"]
    return (f"Resumed (`--resume`, {bits.replace('b', '--bits ')}, {int(key[1:]):,} keys "
            f"round-robin) over the same input, nothing new: {r['wall_s']:.1f} s wall "
            f"({r['wall_s'] / _single(data['runs'], int(bits[1:]))['wall_s']:.2f}× the single "
            f"key's), peak RSS {r['max_rss_mib']:.0f} MiB, every example skipped as learned "
            f"(the run that wrote the checkpoints: {fresh['wall_s']:.1f} s). Each key's latest "
            "checkpoint's metadata is read and its checksum checked once, as the run starts (its "
            "settings, where to restart its sources); a model is decoded only once it has "
            "something new to learn (here none is).")


def _verdicts(R, bits):
    one, vw = _single(R, bits), R[f"vw b{bits}"]
    out = [[f"--bits {bits}: single model peak RSS ≤ {TARGETS['rss_vs_vw']:g}× VW's",
            f"{one['max_rss_mib'] / vw['max_rss_mib']:.2f}×",
            one["max_rss_mib"] <= TARGETS["rss_vs_vw"] * vw["max_rss_mib"]]]
    for split, c in SPLITS.items():
        for k, target in ((64, "rate_64"), (10_000, "rate_10k")):
            r = R.get(f"b{bits} {c}{k}")
            if r:
                ratio = one["wall_s"] / r["wall_s"]
                out.append([f"--bits {bits}, {k:,} keys {split}: ≥ {TARGETS[target]:g}× the "
                            "single key's examples/s", f"{ratio:.2f}×", ratio >= TARGETS[target]])
        r = R.get(f"b{bits} {c}10000")
        if r:
            gib = r["max_rss_mib"] / 1024
            out.append([f"--bits {bits}, 10,000 keys {split}: peak RSS ≤ "
                        f"{TARGETS['rss_gib_10k']:g} GiB", f"{gib:.2f} GiB",
                        gib <= TARGETS["rss_gib_10k"]])
    r = R.get(f"b{bits} r1000000")
    if r:
        gib, times = r["max_rss_mib"] / 1024, r["wall_s"] / one["wall_s"]
        kib = (r["max_rss_mib"] - one["max_rss_mib"]) * 1024 / 1e6
        out += [[f"--bits {bits}, 1,000,000 keys round-robin: peak RSS ≤ "
                 f"{TARGETS['rss_gib_1m']:g} GiB", f"{gib:.2f} GiB", gib <= TARGETS["rss_gib_1m"]],
                [f"--bits {bits}, 1,000,000 keys round-robin: wall time ≤ "
                 f"{TARGETS['wall_1m']:g}× the single key's", f"{times:.1f}×",
                 times <= TARGETS["wall_1m"]],
                [f"--bits {bits}, 1,000,000 keys round-robin: RSS per model ≤ "
                 f"{TARGETS['kib_per_model']:g} KiB", f"{kib:.2f} KiB",
                 kib <= TARGETS["kib_per_model"]]]
    return [[t, m, "yes" if ok else "**NO**"] for t, m, ok in out]


def main():
    args = parse_args(__doc__, rows=(int, None, "examples (default 1,000,000; --quick: 20,000)"),
                      seed=(int, 1), workdir=(str, None, "scratch directory (default: a new "
                                                         "temp dir, removed)"),
                      no_large=(bool, False, "without 100,000 and 1,000,000 keys"))
    n = args.rows or (20_000 if args.quick else 1_000_000)
    h = header()
    with scratch(args.workdir, "unitless-many-") as work:
        data = run_all(args, n, work)
    write_results(result_name("many_models", args.quick),
                  f"Many models at once: {n:,} examples over 1 to "
                  f"{max(data['key_counts']):,} model keys", h,
                  render(data), data)


if __name__ == "__main__":
    main()
