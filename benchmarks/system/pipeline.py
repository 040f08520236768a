"""End-to-end speed of the `unitless train` pipeline against Vowpal Wabbit (VW) on one data set.

Data: the ScInOL slides' artificial stream, 1M examples × 21 features, x_i ~ N(0, σ_i²) with
σ_i = 2⁻¹⁰ … 2¹⁰, y = ±1 with P(+1) = sigmoid(xᵀw*), w*_i = ±1/σ_i. It is written once as CSV
(header ``id,label,x1..x21``; plus files with a ``key`` column for the multi-model runs, keys
assigned round-robin) and once as VW text (``label 'id| x1:v ... x21:v``). Both files carry the
very same number strings (the shortest text that reads back as the same float64), so both
tools read the same values.

Measured, each as a separate process under ``/usr/bin/time -v`` (wall time, CPU time, peak RSS):

* ``unitless train`` (NAG, logistic, η = 0.5, Beam FnApiRunner in-process, parquet predictions),
  also on a 1-row file, to separate the fixed start-up cost (Python, Beam, pipeline set-up);
* VW's own driver on the text file: ``--loss_function logistic -l 0.5 -p preds`` (VW's default
  update: normalized + adaptive + invariant). The vowpalwabbit wheel ships no ``vw`` executable,
  so VW runs as ``python -m vowpalwabbit ARGS``: the wheel's entry point, which hands the
  arguments to the same C++ driver the ``vw`` command runs (its own parser thread and learner;
  no per-example Python);
* ``unitless train`` with 1, 4 and 64 model keys (``--model-key-column key``).

Progressive loss: ours is the mean of the predictions' ``loss`` column; VW's is its printed
"average loss", and is recomputed from the ``-p`` scores (made before learning each example).

    .venv/bin/python benchmarks/system/pipeline.py                 # full run: 1M rows
    .venv/bin/python benchmarks/system/pipeline.py --quick         # smoke run (20k rows)
    .venv/bin/python benchmarks/system/pipeline.py --profile-rows 200000   # + cProfile of the pipeline

Writes benchmarks/results/pipeline{.md,.json} (``--quick``: results/tmp/pipeline_quick.*).
"""
import os
import pstats
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.data import artificial_stream  # noqa: E402
from common.learners import mean_logistic  # noqa: E402
from common.machine import header  # noqa: E402
from common.paths import ROOT  # noqa: E402
from common.results import fnum, relative_command, result_name, table, write_results  # noqa: E402
from common.runs import (parse_args, progress, run_timed, scratch, train_args,  # noqa: E402
                         unitless_command)
from common.vw import vw_average_loss, vw_command, vw_examples, vw_tagged_scores  # noqa: E402

ETA = 0.5
KEY_COUNTS = (1, 4, 64)
FEATURES = 21


def fmt(x, digits=3):
    return fnum(x, digits, sci=False)


# ----------------------------------------------------------------------------------------- data

def append_lines(path, lines):
    """Append one string per line to path, as is (no quoting): the Arrow string data bytes."""
    lines = pc.binary_join_element_wise(lines, pa.scalar("\n"), "")
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32 if lines.type == pa.string()
                            else np.int64)[lines.offset:lines.offset + len(lines) + 1]
    data = lines.buffers()[2]
    with open(path, "ab") as f:
        f.write(memoryview(data)[offsets[0]:offsets[-1]])


def write_data(directory, X, y, chunk=250_000):
    """CSV (no key, and one per key count) and VW text with identical number strings."""
    n, d = X.shape
    names = [f"x{j + 1}" for j in range(d)]
    paths = {"csv": str(directory / "data.csv"), "vw": str(directory / "data.vw")}
    Path(paths["csv"]).write_text(",".join(["id", "label", *names]) + "\n")
    for k in KEY_COUNTS:
        paths[f"csv_keys{k}"] = str(directory / f"data_keys{k}.csv")
        Path(paths[f"csv_keys{k}"]).write_text(",".join(["id", "key", "label", *names]) + "\n")
    Path(paths["vw"]).write_text("")
    for a in range(0, n, chunk):  # chunks keep each Arrow string array far below 2 GiB
        b = min(a + chunk, n)
        ids = pc.cast(pa.array(np.arange(a, b)), pa.string())
        labels = pc.cast(pa.array(y[a:b]), pa.string())
        xs = [pc.cast(pa.array(X[a:b, j]), pa.string()) for j in range(d)]  # shortest round trip
        append_lines(paths["csv"], pc.binary_join_element_wise(ids, labels, *xs, ","))
        for k in KEY_COUNTS:  # model keys round-robin: example i has key "k{i mod K}"
            keys = pc.binary_join_element_wise(
                pa.scalar("k"), pc.cast(pa.array(np.arange(a, b) % k), pa.string()), "")
            append_lines(paths[f"csv_keys{k}"],
                          pc.binary_join_element_wise(ids, keys, labels, *xs, ","))
        append_lines(paths["vw"], vw_lines(ids, labels, xs, names))
    # one-row files: the fixed start-up cost of each command
    with open(paths["csv"]) as f:
        first = [f.readline(), f.readline()]
    paths["csv_1row"] = str(directory / "one.csv")
    Path(paths["csv_1row"]).write_text("".join(first))
    with open(paths["vw"]) as f:
        line = f.readline()
    paths["vw_1row"] = str(directory / "one.vw")
    Path(paths["vw_1row"]).write_text(line)
    return paths


def vw_lines(ids, labels, xs, names):
    """VW text lines ``label 'id| x1:v ... xd:v`` from Arrow string columns."""
    feats = [pc.binary_join_element_wise(pa.scalar(f"{nm}:"), col, "")
             for nm, col in zip(names, xs)]
    head = pc.binary_join_element_wise(labels, pa.scalar(" '"), ids, pa.scalar("|"), "")
    return pc.binary_join_element_wise(head, *feats, " ")


# ------------------------------------------------------------------------------------- running

def ours_command(inp, out, keyed=False, chunk_size=None, extra=()):
    extra = ["--label-column", "label", "--id-column", "id", *extra]
    extra += ["--model-key-column", "key"] if keyed else []
    extra += ["--chunk-size", chunk_size] if chunk_size else []
    return train_args(inp, out / "predictions", out / "models", out / "dead", *extra, eta=ETA)


def check_predictions(name, table_, dead, n):
    """Every example predicted exactly once, no dead letters."""
    rows = 0 if table_ is None else table_.num_rows
    dead = 0 if dead is None else dead.num_rows
    if rows != n or dead:
        raise RuntimeError(f"{name}: {rows} predictions and {dead} dead letters for {n} examples")
    ids = np.sort(np.asarray(table_.column("id").to_numpy(zero_copy_only=False), dtype=np.int64))
    if not np.array_equal(ids, np.arange(n)):
        raise RuntimeError(f"{name}: prediction ids are not 0..{n - 1}")
    return dead


def run_ours(work, name, inp, n, keyed=False, chunk_size=None, extra=()):
    """``unitless train`` on ``inp`` as a process of its own, timed; every example must be
    predicted once."""
    from unitless.connectors.files import read_output
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    r = run_timed(unitless_command(ours_command(inp, out, keyed, chunk_size, extra)))
    preds = read_output(str(out / "predictions"))
    r["dead_letters"] = check_predictions(name, preds, read_output(str(out / "dead")), n)
    r["examples"] = preds.num_rows
    r["progressive_loss"] = float(pc.mean(preds.column("loss")).as_py())
    r["error_rate"] = float(pc.mean(preds.column("error")).as_py())
    r["model_keys"] = len(pc.unique(preds.column("model_key")))
    order = np.argsort(preds.column("id").to_numpy(zero_copy_only=False).astype(np.int64))
    r["_scores"] = preds.column("prediction").to_numpy()[order]
    losses = re.findall(r"progressive loss ([0-9.eE+-]+)", r["stderr"])
    r["progressive_loss_log"] = float(losses[-1]) if losses else None
    shutil.rmtree(out / "predictions", ignore_errors=True)
    return r


def run_vw(work, name, inp, y, *args):
    preds = work / f"{name}.preds"
    r = run_timed(vw_command("-d", inp, "--loss_function", "logistic", "-l", ETA, "-p", preds,
                             *args))
    r["progressive_loss"] = vw_average_loss(r["stderr"])
    r["examples"] = vw_examples(r["stderr"])
    scores = vw_tagged_scores(preds, len(y))
    r["progressive_loss_from_p"] = mean_logistic(y, scores)
    r["error_rate_from_p"] = float(np.mean(np.where(scores > 0, 1, -1) != y))
    r["_scores"] = scores
    preds.unlink()
    return r


# ------------------------------------------------------------------------------------ profiling

PROFILE_SNIPPET = """
import cProfile, sys
from unitless.cli import main
prof = cProfile.Profile()
prof.enable()
code = main(sys.argv[2:])
prof.disable()
prof.dump_stats(sys.argv[1])
sys.exit(code)
"""


# (what, file path ending or None for a built-in, function name): the profile's breakdown
BREAKDOWN = [
    ("whole command: cli.main", "unitless/cli/main.py", "main"),
    ("build the Beam graph: build_training", "pipelines/learn.py", "build_training"),
    ("Beam runs the pipeline: Pipeline.run", "apache_beam/pipeline.py", "run"),
    ("read + parse: files.read_file (generator)", "connectors/files.py", "read_file"),
    ("· Arrow CSV parse of 8 MiB buffers: csv_table", "parse/csv.py", "csv_table"),
    ("· columns -> CSR blocks: block_from_table", "parse/tables.py", "block_from_table"),
    ("· per-line parse (buffers Arrow refused): parse_csv", "parse/csv.py", "parse_csv"),
    ("key by model: ExampleBlock.split_by_key", "parse/records.py", "split_by_key"),
    ("learn: ModelGroup.learn", "models/model_group.py", "learn"),
    ("· numba JIT compile (first call)", "numba/core/dispatcher.py", "_compile_for_args"),
    ("· compiled kernel: run_batch", "learner/kernel.py", "run_batch"),
    ("· check_batch", "learner/online.py", "check_batch"),
    ("· prediction table: prediction_table", "models/predictions.py", "prediction_table"),
    ("state -> Beam state: ModelGroup.to_bytes", "models/model_group.py", "to_bytes"),
    ("Beam state -> state: ModelGroup.from_bytes", "models/model_group.py", "from_bytes"),
    ("pickle.dumps (Beam coders)", None, "_pickle.dumps"),
    ("pickle.loads (Beam coders)", None, "_pickle.loads"),
    ("write part files: files.write_table", "connectors/files.py", "write_table"),
    ("checkpoints: write_checkpoint", "store/per_key.py", "write_checkpoint"),
]


def _breakdown(st):
    out = []
    for what, path, name in BREAKDOWN:
        hits = [(st.stats[f][3], st.stats[f][1], st.stats[f][2]) for f in st.stats
                if (path is None and f[0] == "~" and name in f[2])
                or (path is not None and f[0].endswith(".py") and path in f[0].replace("\\", "/")
                    and f[2] == name)]
        if hits:
            ct, nc, tt = max(hits)
            out.append({"what": what, "calls": nc, "cumulative_s": round(ct, 3),
                        "own_s": round(tt, 3)})
    return out


def _top(st, key, top, only=None):
    st.sort_stats(key)
    rows = []
    for func in [f for f in st.fcn_list if only is None or only in f[0]][:top]:
        _, nc, tt, ct, _ = st.stats[func]
        filename, line, fn = func
        rows.append({"function": f"{_short(filename)}:{line}({fn})" if line else fn,
                     "calls": nc, "own_s": round(tt, 3), "cumulative_s": round(ct, 3)})
    return rows


def profile(work, inp, n, keyed=False, top=40):
    """The pipeline in one process under cProfile: top functions by cumulative and own time."""
    out = work / "profile"
    shutil.rmtree(out, ignore_errors=True)
    stats_path = work / "pipeline.prof"
    args = ours_command(inp, out, keyed)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PROFILE_SNIPPET, str(stats_path), *args],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"profiled run failed:\n{proc.stderr[-4000:]}")
    st = pstats.Stats(str(stats_path))
    return {"rows": n, "wall_s": wall, "profiled_s": st.total_tt,
            "command": shlex.join([sys.executable, "-c", "<cProfile snippet>", "OUT.prof", *args]),
            "breakdown": _breakdown(st), "by_cumulative": _top(st, "cumulative", top),
            "by_own": _top(st, "tottime", top),
            "unitless_by_cumulative": _top(st, "cumulative", top, only="/unitless/")}


def _short(filename):
    for marker in ("site-packages/", "/unitless/", "lib/python3"):
        i = filename.find(marker)
        if i >= 0:
            return ("unitless/" if marker == "/unitless/" else "") + filename[i + len(marker):]
    return filename


def head_file(src, dst, m):
    """The header line and the first m rows of a CSV file."""
    with open(src) as f, open(dst, "w") as g:
        for i, line in enumerate(f):
            if i > m:
                break
            g.write(line)
    return dst


def profiles(work, paths, rows):
    prof = {}
    for label, src, keyed in (("single model", "csv", False), ("64 model keys", "csv_keys64", True)):
        sub = head_file(paths[src], work / f"profile_{src}.csv", rows)
        progress(f"profiling the pipeline on {rows:,} rows ({label})")
        prof[label] = profile(work, str(sub), rows, keyed)
    return prof


# ----------------------------------------------------------------------------------------- runs

def make_files(work, n, seed):
    progress(f"generating {n:,} examples in {work}")
    t = time.perf_counter()
    X, y, _ = artificial_stream(n, seed)
    y = y.astype(np.int64)
    paths = write_data(work, X, y)
    gen_s = time.perf_counter() - t
    sizes = {k: os.path.getsize(v) for k, v in paths.items()}
    progress(f"data written in {gen_s:.1f} s: " + ", ".join(f"{k} {v / 2**20:.0f} MiB"
                                                          for k, v in sizes.items()))
    return paths, y.astype(np.float64), gen_s, sizes


def jobs(work, paths, y, n, chunk):
    out = [("vw_startup", lambda: run_vw(work, "vw1", paths["vw_1row"], y[:1])),
           ("vw", lambda: run_vw(work, "vw", paths["vw"], y)),
           ("unitless_startup", lambda: run_ours(work, "ours1", paths["csv_1row"], 1,
                                                 chunk_size=chunk)),
           ("unitless", lambda: run_ours(work, "ours", paths["csv"], n, chunk_size=chunk))]
    return out + [(f"unitless_keys{k}", lambda k=k: run_ours(
        work, f"ours_keys{k}", paths[f"csv_keys{k}"], n, keyed=True, chunk_size=chunk))
        for k in KEY_COUNTS]


def interleaved(job_list, repeat):
    """Every job `repeat` times, interleaved, so load from other processes hits all alike."""
    tries, scores = {key: [] for key, _ in job_list}, {}
    for rep in range(repeat):
        for key, job in job_list:
            r = job()
            if key in ("vw", "unitless") and key not in scores:
                scores[key] = r["_scores"]
            tries[key].append({k: v for k, v in r.items() if not k.startswith("_")
                               and k not in ("stdout", "stderr")})
            progress(f"[{rep + 1}/{repeat}] {key}: wall {r['wall_s']:.2f} s, "
                     f"cpu {r['cpu_s']:.2f} s, max RSS {r['max_rss_mib']:.0f} MiB, "
                     f"loss {r.get('progressive_loss')}, load {r['load_1min']}")
    return tries, scores


def run_all(args, n, work):
    paths, y, gen_s, sizes = make_files(work, n, args.seed)
    tries, scores = interleaved(jobs(work, paths, y, n, args.chunk_size), args.repeat)
    prof = profiles(work, paths, min(args.profile_rows, n)) if args.profile_rows else {}
    return {"rows": n, "features": FEATURES, "seed": args.seed, "eta": ETA,
            "chunk_size": args.chunk_size, "data_seconds": round(gen_s, 1), "file_bytes": sizes,
            "repeat": args.repeat, "runs": {key: summarize(t) for key, t in tries.items()},
            "prediction_agreement": _agreement(scores["unitless"], scores["vw"]),
            "profile": prof,
            "vw_note": "no vw executable in the vowpalwabbit wheel: VW runs as "
                       "`python -m vowpalwabbit ARGS` (the C++ driver: parser thread + learner)"}


def summarize(tries):
    """Repeated runs of one command: best (least disturbed) and median wall time, all values."""
    walls = [t["wall_s"] for t in tries]
    best = tries[int(np.argmin(walls))]
    losses = {t.get("progressive_loss") for t in tries}
    return {**best, "wall_s": min(walls), "wall_median_s": float(np.median(walls)),
            "cpu_s": min(t["cpu_s"] for t in tries),
            "max_rss_mib": max(t["max_rss_mib"] for t in tries),
            "same_loss_every_run": len(losses) == 1,
            "tries": [{k: t[k] for k in ("wall_s", "cpu_s", "max_rss_mib", "load_1min")}
                      for t in tries]}


def _agreement(ours, vw):
    """How close the two tools' pre-update predictions are (probabilities)."""
    p1 = 1.0 / (1.0 + np.exp(-ours))
    p2 = 1.0 / (1.0 + np.exp(-vw))
    d = np.abs(p1 - p2)
    return {"mean_abs_prob_diff": float(d.mean()), "median_abs_prob_diff": float(np.median(d)),
            "same_sign": float(np.mean((ours > 0) == (vw > 0)))}


# --------------------------------------------------------------------------------------- report

def intro_md(data):
    R = data["runs"]
    lines = [f"* data: the artificial stream (σ_i = 2⁻¹⁰…2¹⁰, seed {data['seed']}), "
             f"{data['rows']:,} examples × {data['features']} features, CSV "
             f"{data['file_bytes']['csv'] / 2**20:.0f} MiB, VW text "
             f"{data['file_bytes']['vw'] / 2**20:.0f} MiB, identical number strings; every run "
             "is one process timed from outside under `/usr/bin/time -v`",
             f"* {data['vw_note']}", "", "## Commands", ""]
    lines += [f"* {key}: `{relative_command(R[key]['command'])}`"
              for key in ("unitless", "vw", "unitless_keys64")]
    return "\n".join(lines)


def single_table(data):
    n, R = data["rows"], data["runs"]
    su, sv = R["unitless_startup"]["wall_s"], R["vw_startup"]["wall_s"]
    ours, vw = R["unitless"], R["vw"]
    rows = [[label, fmt(r["wall_s"], 2), fmt(r["wall_median_s"], 2), fmt(s, 2),
             fmt(r["wall_s"] - s, 2), f"{n / r['wall_s']:,.0f}",
             f"{n / max(r['wall_s'] - s, 1e-9):,.0f}", fmt(r["cpu_s"], 2),
             fmt(r["max_rss_mib"], 0), fmt(r["progressive_loss"], 6)]
            for label, r, s in (("unitless train (NAG)", ours, su), ("VW (default update)", vw, sv))]
    rows.append(["**ratio ours / VW**", f"**{ours['wall_s'] / vw['wall_s']:.2f}**",
                 f"{ours['wall_median_s'] / vw['wall_median_s']:.2f}", "",
                 f"**{(ours['wall_s'] - su) / max(vw['wall_s'] - sv, 1e-9):.2f}**", "", "",
                 f"{ours['cpu_s'] / vw['cpu_s']:.2f}",
                 f"{ours['max_rss_mib'] / vw['max_rss_mib']:.2f}", ""])
    return table(["run", f"wall s (best of {data['repeat']})", "wall s (median)",
                  "start-up s (1-row run, best)", "wall − start-up s", "examples/s (wall)",
                  "examples/s (excl. start-up)", "CPU s (user+sys, least)", "peak RSS MiB (max)",
                  "progressive logistic loss"], rows)


def single_md(data, nproc):
    R, a = data["runs"], data["prediction_agreement"]
    ours, vw = R["unitless"], R["vw"]
    ratio = ours["wall_s"] / vw["wall_s"]
    vb, ob = (min(r["tries"], key=lambda t: t["wall_s"]) for r in (vw, ours))
    loads = [x for r in R.values() for t in r["tries"] for x in t["load_1min"]]
    return f"""## Single model: ours vs VW

{single_table(data)}

Target ratio ours/VW ≤ 1.5 (best wall times): {'met' if ratio <= 1.5 else 'not met'}
({ratio:.2f}). VW parses text in a thread of its own while it learns, so with a free core its
wall time is below its CPU time (its best try: {vb['wall_s']:.2f} s wall, {vb['cpu_s']:.2f} CPU s);
`unitless train` learns on one core, with Arrow's CSV parser using threads (its best try:
{ob['wall_s']:.2f} s wall, {ob['cpu_s']:.2f} CPU s). When other work holds the second core, VW
loses its overlap, which is why the median ratio can differ from the best.

Each command ran {data['repeat']} time(s), all commands interleaved; the best wall time is the
one least disturbed by other work on the machine (1-minute load average seen around the runs:
{min(loads):.2f}–{max(loads):.2f} on {nproc} cores). Every try's numbers are in the JSON file.

Progressive loss: ours = mean of the `loss` column ({fmt(ours['progressive_loss'], 6)}); VW's
printed average loss {fmt(vw['progressive_loss'], 6)}, recomputed from its `-p` scores
{fmt(vw['progressive_loss_from_p'], 6)} (6 printed digits). Error rate: ours
{fmt(ours['error_rate'], 4)}, VW {fmt(vw['error_rate_from_p'], 4)}. Pre-update predicted
probabilities differ by {fmt(a['mean_abs_prob_diff'], 4)} on average (median
{fmt(a['median_abs_prob_diff'], 4)}); same predicted class on {100 * a['same_sign']:.2f}% of
examples.
"""


def keys_md(data):
    n, R = data["rows"], data["runs"]
    su = R["unitless_startup"]["wall_s"]
    rows = [[k, fmt(r["wall_s"], 2), fmt(r["wall_median_s"], 2), f"{n / r['wall_s']:,.0f}",
             f"{n / max(r['wall_s'] - su, 1e-9):,.0f}", fmt(r["cpu_s"], 2),
             fmt(r["max_rss_mib"], 0), fmt(r["progressive_loss"], 6)]
            for k, r in ((k, R[f"unitless_keys{k}"]) for k in KEY_COUNTS)]
    return f"""## Model keys (round-robin key column)

{table(["model keys", "wall s (best)", "wall s (median)", "examples/s (wall)",
        "examples/s (excl. start-up)", "CPU s (least)", "peak RSS MiB (max)",
        "progressive loss (all keys)"], rows)}

Start-up (1-row run) subtracted: the no-key run's {fmt(su, 2)} s. VW 1-row run:
{fmt(R['vw_startup']['wall_s'], 2)} s, peak RSS {fmt(R['vw_startup']['max_rss_mib'], 0)} MiB;
ours 1-row: peak RSS {fmt(R['unitless_startup']['max_rss_mib'], 0)} MiB.
"""


def profile_md(label, p):
    whole = next((b["cumulative_s"] for b in p["breakdown"] if b["what"].startswith("whole")), None)
    breakdown = table(["what", "calls", "cumulative s", "% of command", "own s"],
                      [[b["what"], b["calls"], b["cumulative_s"],
                        f"{100 * b['cumulative_s'] / whole:.1f}" if whole else "—", b["own_s"]]
                       for b in p["breakdown"]])
    ours = table(["function", "calls", "cumulative s", "own s"],
                 [[f"`{r['function']}`", r["calls"], r["cumulative_s"], r["own_s"]]
                  for r in p["unitless_by_cumulative"][:25]])
    own = table(["function", "calls", "own s", "cumulative s"],
                [[f"`{r['function']}`", r["calls"], r["own_s"], r["cumulative_s"]]
                 for r in p["by_own"][:25]])
    return f"""## Profile ({label}): `unitless train` under cProfile, {p['rows']:,} rows

`{relative_command(p['command'])}`

Wall {p['wall_s']:.1f} s under the profiler (its overhead inflates Python-heavy parts). The Beam
FnApiRunner runs the bundles in the calling thread, so the profile sees all of the pipeline's
work. Where the time goes (cumulative time; indented rows are part of the row above):

{breakdown}

Functions of `unitless/` by cumulative time:

{ours}

All functions by own time:

{own}

(Top functions by cumulative time over everything, Beam frames included, are in the JSON file.)
"""


def render(data):
    parts = [intro_md(data), single_md(data, os.cpu_count()), keys_md(data)]
    parts += [profile_md(label, p) for label, p in (data.get("profile") or {}).items()]
    return "\n\n".join(parts)


# ----------------------------------------------------------------------------------------- main

def main():
    args = parse_args(
        __doc__, rows=(int, None, "examples (default 1,000,000; --quick: 20,000)"), seed=(int, 1),
        repeat=(int, None, "runs of each command, interleaved; the best (least disturbed) wall "
                "time is reported, with the median (default 3; --quick: 1)"),
        chunk_size=(int, None, "passed to unitless train (default: its own)"),
        profile_rows=(int, 0, "also run the pipeline under cProfile on this many rows (0: no)"),
        workdir=(str, None, "scratch directory (default: a new temp dir, removed)"))
    n = args.rows or (20_000 if args.quick else 1_000_000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    h = header()
    with scratch(args.workdir, "unitless-bench-") as work:
        data = run_all(args, n, work)
    write_results(result_name("pipeline", args.quick),
                  f"`unitless train` pipeline vs Vowpal Wabbit, {n:,} examples × {FEATURES} features",
                  h, render(data), data)


if __name__ == "__main__":
    main()
