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

    .venv/bin/python benchmarks/pipeline.py                 # full run: 1M rows
    .venv/bin/python benchmarks/pipeline.py --quick         # smoke run (20k rows)
    .venv/bin/python benchmarks/pipeline.py --profile-rows 200000   # + cProfile of the pipeline

Writes benchmarks/results/pipeline{.md,.json} (``--quick``: pipeline_quick.*).
"""
import argparse
import datetime
import json
import math
import os
import platform
import pstats
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import _cpu_model, _git, _mem_gib, _version  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PY = sys.executable
BIN = Path(PY).parent
UNITLESS = str(BIN / "unitless") if (BIN / "unitless").exists() else None
TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else None
SIGMAS = 2.0 ** np.arange(-10, 11)  # σ_i = 2⁻¹⁰ … 2¹⁰
ETA = 0.5
KEY_COUNTS = (1, 4, 64)


# ----------------------------------------------------------------------------------------- data

def generate(n, seed):
    rng = np.random.default_rng(seed)
    w_star = rng.choice([-1.0, 1.0], size=SIGMAS.size) / SIGMAS
    X = rng.standard_normal((n, SIGMAS.size)) * SIGMAS
    p = 1.0 / (1.0 + np.exp(-(X @ w_star)))
    y = np.where(rng.random(n) < p, 1, -1).astype(np.int64)
    return X, y


def _append_lines(path, lines):
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
        _append_lines(paths["csv"], pc.binary_join_element_wise(ids, labels, *xs, ","))
        for k in KEY_COUNTS:  # model keys round-robin: example i has key "k{i mod K}"
            keys = pc.binary_join_element_wise(
                pa.scalar("k"), pc.cast(pa.array(np.arange(a, b) % k), pa.string()), "")
            _append_lines(paths[f"csv_keys{k}"],
                          pc.binary_join_element_wise(ids, keys, labels, *xs, ","))
        feats = [pc.binary_join_element_wise(pa.scalar(f"{nm}:"), col, "")
                 for nm, col in zip(names, xs)]
        head = pc.binary_join_element_wise(labels, pa.scalar(" '"), ids, pa.scalar("|"),
                                           "")  # "label 'id|"
        _append_lines(paths["vw"], pc.binary_join_element_wise(head, *feats, " "))
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


# ------------------------------------------------------------------------------------- running

def timed(cmd, cwd):
    """Run cmd under /usr/bin/time -v: wall seconds, user+sys seconds, peak RSS MiB, outputs."""
    full = [TIME, "-v", *cmd] if TIME else cmd
    load_before = os.getloadavg()[0]
    before = _children_rusage()
    t = time.perf_counter()
    proc = subprocess.run(full, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = _children_rusage()
    err = proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{err[-4000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    if m:
        rss = int(m.group(1)) / 1024
    else:  # no /usr/bin/time: the largest child so far (only exact for a new maximum)
        rss = after.ru_maxrss / 1024
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "max_rss_mib": rss,
            "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "stdout": proc.stdout,
            "stderr": err, "command": shlex.join(cmd)}


def _children_rusage():
    import resource
    return resource.getrusage(resource.RUSAGE_CHILDREN)


def unitless_cmd(inp, out, keyed=False, chunk_size=None):
    base = [UNITLESS] if UNITLESS else [PY, "-m", "unitless.cli"]
    cmd = [*base, "train", "--input", inp, "--label-column", "label", "--id-column", "id"]
    if keyed:
        cmd += ["--model-key-column", "key"]
    cmd += ["--algorithm", "nag", "--loss", "logistic", "--learning-rate", str(ETA),
            "--predictions", str(out / "predictions"), "--model-dir", str(out / "models"),
            "--dead-letter", str(out / "dead")]
    if chunk_size:
        cmd += ["--chunk-size", str(chunk_size)]
    return cmd


def vw_cmd(inp, preds):
    return [PY, "-m", "vowpalwabbit", "-d", inp, "--loss_function", "logistic", "-l", str(ETA),
            "-p", str(preds)]


def run_ours(work, name, inp, n, keyed=False, chunk_size=None):
    from unitless.connectors.files import read_output
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    r = timed(unitless_cmd(inp, out, keyed, chunk_size), ROOT)
    table = read_output(str(out / "predictions"))
    dead = read_output(str(out / "dead"))
    rows = 0 if table is None else table.num_rows
    r["dead_letters"] = 0 if dead is None else dead.num_rows
    if rows != n or r["dead_letters"]:
        raise RuntimeError(f"{name}: {rows} predictions and {r['dead_letters']} dead letters for "
                           f"{n} examples")
    ids = np.sort(np.asarray(table.column("id").to_numpy(zero_copy_only=False), dtype=np.int64))
    if not np.array_equal(ids, np.arange(n)):
        raise RuntimeError(f"{name}: prediction ids are not 0..{n - 1}")
    r["examples"] = rows
    r["progressive_loss"] = float(pc.mean(table.column("loss")).as_py())
    r["error_rate"] = float(pc.mean(table.column("error")).as_py())
    r["model_keys"] = len(pc.unique(table.column("model_key")))
    order = np.argsort(table.column("id").to_numpy(zero_copy_only=False).astype(np.int64))
    r["_scores"] = table.column("prediction").to_numpy()[order]
    r["progressive_loss_log"] = _logged_loss(r["stderr"])
    shutil.rmtree(out / "predictions", ignore_errors=True)
    return r


def _logged_loss(stderr):
    losses = re.findall(r"progressive loss ([0-9.eE+-]+)", stderr)
    return float(losses[-1]) if losses else None


def run_vw(work, name, inp, y):
    preds = work / f"{name}.preds"
    r = timed(vw_cmd(inp, preds), ROOT)
    log = r["stderr"]
    m = re.search(r"average loss = ([-+0-9.eE]+|n\.a\.|nan|inf)", log)
    r["progressive_loss"] = float(m.group(1)) if m and m.group(1) != "n.a." else float("nan")
    m = re.search(r"number of examples = (\d+)", log)
    r["examples"] = int(m.group(1)) if m else None
    p = pacsv.read_csv(str(preds), read_options=pacsv.ReadOptions(column_names=["score", "id"]),
                       parse_options=pacsv.ParseOptions(delimiter=" "),
                       convert_options=pacsv.ConvertOptions(column_types={"score": pa.float64(),
                                                                          "id": pa.int64()}))
    ids = p.column("id").to_numpy()
    scores = np.empty(len(y))
    scores[ids] = p.column("score").to_numpy()
    r["progressive_loss_from_p"] = float(np.mean(np.logaddexp(0.0, -y[ids] * scores[ids])))
    r["error_rate_from_p"] = float(np.mean(np.where(scores[ids] > 0, 1, -1) != y[ids]))
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
    ("whole command: cli.main", "unitless/cli.py", "main"),
    ("build the Beam graph: build_training", "pipelines/train.py", "build_training"),
    ("Beam runs the pipeline: Pipeline.run", "apache_beam/pipeline.py", "run"),
    ("read + parse: files.read_file (generator)", "connectors/files.py", "read_file"),
    ("· Arrow CSV parse of 8 MiB buffers: csv_table", "connectors/formats.py", "csv_table"),
    ("· columns -> CSR blocks: block_from_table", "connectors/formats.py", "block_from_table"),
    ("· per-line parse (buffers Arrow refused): parse_csv", "connectors/formats.py",
     "parse_csv"),
    ("key by model: ExampleBlock.split_by_key", "connectors/records.py", "split_by_key"),
    ("learn: KeyedModel.learn_block", "pipelines/keyed_model.py", "learn_block"),
    ("· numba JIT compile (first call)", "numba/core/dispatcher.py", "_compile_for_args"),
    ("· compiled kernel: run_batch", "learner/kernel.py", "run_batch"),
    ("· check_batch", "learner/online.py", "check_batch"),
    ("· prediction table: _predictions", "pipelines/keyed_model.py", "_predictions"),
    ("state -> Beam state: KeyedModel.to_bytes", "pipelines/keyed_model.py", "to_bytes"),
    ("Beam state -> state: KeyedModel.from_bytes", "pipelines/keyed_model.py", "from_bytes"),
    ("pickle.dumps (Beam coders)", None, "_pickle.dumps"),
    ("pickle.loads (Beam coders)", None, "_pickle.loads"),
    ("write part files: files.write_table", "connectors/files.py", "write_table"),
    ("checkpoints: write_checkpoint", "pipelines/checkpoints.py", "write_checkpoint"),
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


def profile(work, inp, n, keyed=False, top=40):
    """The pipeline in one process under cProfile: top functions by cumulative and own time."""
    out = work / "profile"
    shutil.rmtree(out, ignore_errors=True)
    stats_path = work / "pipeline.prof"
    cmd = unitless_cmd(inp, out, keyed)
    cmd = cmd[1:] if UNITLESS else cmd[3:]
    t = time.perf_counter()
    proc = subprocess.run([PY, "-c", PROFILE_SNIPPET, str(stats_path), *cmd], cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"profiled run failed:\n{proc.stderr[-4000:]}")
    st = pstats.Stats(str(stats_path))
    total = st.total_tt

    def rows(key, only=None):
        st.sort_stats(key)
        out_rows = []
        funcs = [f for f in st.fcn_list if only is None or only in f[0]]
        for func in funcs[:top]:
            cc, nc, tt, ct, _ = st.stats[func]
            filename, line, fn = func
            where = _short(filename)
            out_rows.append({"function": f"{where}:{line}({fn})" if line else fn,
                             "calls": nc, "own_s": round(tt, 3), "cumulative_s": round(ct, 3)})
        return out_rows

    return {"rows": n, "wall_s": wall, "profiled_s": total, "command": shlex.join(
        [PY, "-c", "<cProfile snippet>", "OUT.prof", *cmd]),
        "breakdown": _breakdown(st),
        "by_cumulative": rows("cumulative"), "by_own": rows("tottime"),
        "unitless_by_cumulative": rows("cumulative", only="/unitless/")}


def _short(filename):
    for marker in ("site-packages/", "/unitless/", "lib/python3"):
        i = filename.find(marker)
        if i >= 0:
            return ("unitless/" if marker == "/unitless/" else "") + filename[i + len(marker):]
    return filename


# --------------------------------------------------------------------------------------- header

def header():
    cmd = shlex.join([os.path.relpath(PY, ROOT), *sys.argv])
    dirty = _git("status", "--porcelain", "--", "unitless")
    return {
        "command": cmd,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"nproc": os.cpu_count(), "cpu_model": _cpu_model(), "mem_gib": _mem_gib(),
                    "platform": platform.platform()},
        "versions": {"python": platform.python_version(),
                     **{d: _version(d) for d in ("apache-beam", "numpy", "numba", "pyarrow",
                                                  "vowpalwabbit")},
                     "unitless_git": _git("rev-parse", "--short", "HEAD")
                     + (" (unitless/ has uncommitted changes)" if dirty else "")},
    }


def fmt(x, digits=3):
    if x is None:
        return "—"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}"


def md_table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# ----------------------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, help="examples (default 1,000,000; --quick: 20,000)")
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, help="runs of each command, interleaved; the best "
                    "(least disturbed) wall time is reported, with the median (default 3; "
                    "--quick: 1)")
    ap.add_argument("--chunk-size", type=int, help="passed to unitless train (default: its own)")
    ap.add_argument("--profile-rows", type=int, default=0,
                    help="also run the pipeline under cProfile on this many rows (0: no)")
    ap.add_argument("--workdir", help="scratch directory (default: a new temp dir, removed)")
    args = ap.parse_args()
    n = args.rows or (20_000 if args.quick else 1_000_000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    name = "pipeline_quick" if args.quick else "pipeline"
    started = time.time()
    h = header()
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="unitless-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        data = run_all(args, n, work)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    h["run_seconds"] = round(time.time() - started, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"header": h, **data}, indent=1) + "\n")
    (RESULTS / f"{name}.md").write_text(render(h, data))
    print((RESULTS / f"{name}.md").read_text())
    print(f"wrote {RESULTS / name}.md and .json ({h['run_seconds']:.0f} s)")


def _log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_all(args, n, work):
    _log(f"generating {n:,} examples in {work}")
    t = time.perf_counter()
    X, y = generate(n, args.seed)
    paths = write_data(work, X, y)
    gen_s = time.perf_counter() - t
    sizes = {k: os.path.getsize(v) for k, v in paths.items()}
    del X
    _log(f"data written in {gen_s:.1f} s: " + ", ".join(f"{k} {v / 2**20:.0f} MiB"
                                                       for k, v in sizes.items()))
    yf = y.astype(np.float64)
    jobs = [("vw_startup", lambda: run_vw(work, "vw1", paths["vw_1row"], yf[:1])),
            ("vw", lambda: run_vw(work, "vw", paths["vw"], yf)),
            ("unitless_startup", lambda: run_ours(work, "ours1", paths["csv_1row"], 1,
                                                  chunk_size=args.chunk_size)),
            ("unitless", lambda: run_ours(work, "ours", paths["csv"], n,
                                          chunk_size=args.chunk_size))]
    jobs += [(f"unitless_keys{k}", lambda k=k: run_ours(work, f"ours_keys{k}",
                                                        paths[f"csv_keys{k}"], n, keyed=True,
                                                        chunk_size=args.chunk_size))
             for k in KEY_COUNTS]
    tries = {key: [] for key, _ in jobs}
    scores = {}
    for rep in range(args.repeat):  # interleaved, so load from other processes hits all alike
        for key, job in jobs:
            r = job()
            if key in ("vw", "unitless") and key not in scores:
                scores[key] = r["_scores"]
            tries[key].append({k: v for k, v in r.items() if not k.startswith("_")
                               and k not in ("stdout", "stderr")})
            _log(f"[{rep + 1}/{args.repeat}] {key}: wall {r['wall_s']:.2f} s, "
                 f"cpu {r['cpu_s']:.2f} s, max RSS {r['max_rss_mib']:.0f} MiB, "
                 f"loss {r.get('progressive_loss')}, load {r['load_1min']}")
    runs = {key: summarize(t) for key, t in tries.items()}
    agree = _agreement(scores["unitless"], scores["vw"])
    prof = {}
    if args.profile_rows:
        m = min(args.profile_rows, n)
        for label, src, keyed in (("single model", "csv", False),
                                  ("64 model keys", "csv_keys64", True)):
            sub = work / f"profile_{src}.csv"
            with open(paths[src]) as f, open(sub, "w") as g:
                for i, line in enumerate(f):
                    if i > m:
                        break
                    g.write(line)
            _log(f"profiling the pipeline on {m:,} rows ({label})")
            prof[label] = profile(work, str(sub), m, keyed)
    return {"rows": n, "features": SIGMAS.size, "seed": args.seed, "eta": ETA,
            "chunk_size": args.chunk_size, "data_seconds": round(gen_s, 1), "file_bytes": sizes,
            "repeat": args.repeat, "runs": runs, "prediction_agreement": agree,
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


def render(h, data):
    n = data["rows"]
    R = data["runs"]
    m, v = h["machine"], h["versions"]
    lines = [f"# `unitless train` pipeline vs Vowpal Wabbit, {n:,} examples × {data['features']} "
             "features", "",
             f"* command: `{h['command']}` (from the repository root)",
             f"* date (UTC): {h['date_utc']}; run time {h['run_seconds']:.0f} s",
             f"* machine: nproc={m['nproc']}, CPU model `{m['cpu_model']}`, {m['mem_gib']} GiB, "
             f"{m['platform']}",
             "* versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
             f"* data: the artificial stream (σ_i = 2⁻¹⁰…2¹⁰, seed {data['seed']}), CSV "
             f"{data['file_bytes']['csv'] / 2**20:.0f} MiB, VW text "
             f"{data['file_bytes']['vw'] / 2**20:.0f} MiB, identical number strings; "
             "every run is one process timed from outside under `/usr/bin/time -v`",
             f"* {data['vw_note']}", "",
             "## Commands", ""]
    for key in ("unitless", "vw", "unitless_keys64"):
        lines.append(f"* {key}: `{_rel(R[key]['command'])}`")
    lines += ["", "## Single model: ours vs VW", ""]
    su, sv = R["unitless_startup"]["wall_s"], R["vw_startup"]["wall_s"]
    ours, vw = R["unitless"], R["vw"]
    rows = []
    for label, r, s in (("unitless train (NAG)", ours, su), ("VW (default update)", vw, sv)):
        rows.append([label, fmt(r["wall_s"], 2), fmt(r["wall_median_s"], 2), fmt(s, 2),
                     fmt(r["wall_s"] - s, 2), f"{n / r['wall_s']:,.0f}",
                     f"{n / max(r['wall_s'] - s, 1e-9):,.0f}", fmt(r["cpu_s"], 2),
                     fmt(r["max_rss_mib"], 0), fmt(r["progressive_loss"], 6)])
    rows.append(["**ratio ours / VW**", f"**{ours['wall_s'] / vw['wall_s']:.2f}**",
                 f"{ours['wall_median_s'] / vw['wall_median_s']:.2f}", "",
                 f"**{(ours['wall_s'] - su) / max(vw['wall_s'] - sv, 1e-9):.2f}**", "", "",
                 f"{ours['cpu_s'] / vw['cpu_s']:.2f}",
                 f"{ours['max_rss_mib'] / vw['max_rss_mib']:.2f}", ""])
    lines.append(md_table(["run", f"wall s (best of {data['repeat']})", "wall s (median)",
                           "start-up s (1-row run, best)", "wall − start-up s",
                           "examples/s (wall)", "examples/s (excl. start-up)",
                           "CPU s (user+sys, least)", "peak RSS MiB (max)",
                           "progressive logistic loss"], rows))
    ratio = ours["wall_s"] / vw["wall_s"]
    vb, ob = (min(r["tries"], key=lambda t: t["wall_s"]) for r in (vw, ours))
    lines += ["", f"Target ratio ours/VW ≤ 1.5 (best wall times): "
              f"{'met' if ratio <= 1.5 else 'not met'} ({ratio:.2f}). VW parses text in a "
              "thread of its own while it learns, so with a free core its wall time is below "
              f"its CPU time (its best try: {vb['wall_s']:.2f} s wall, {vb['cpu_s']:.2f} CPU s); "
              f"`unitless train` learns on one core, with Arrow's CSV parser using threads (its "
              f"best try: {ob['wall_s']:.2f} s wall, {ob['cpu_s']:.2f} CPU s). When other work "
              "holds the second core, VW loses its overlap, which is why the median ratio can "
              "differ from the best."]
    loads = [x for r in R.values() for t in r["tries"] for x in t["load_1min"]]
    lines += ["", f"Each command ran {data['repeat']} time(s), all commands interleaved; the "
              "best wall time is the one least disturbed by other work on the machine (1-minute "
              f"load average seen around the runs: {min(loads):.2f}–{max(loads):.2f} on "
              f"{m['nproc']} cores). Every try's numbers are in the JSON file."]
    a = data["prediction_agreement"]
    lines += ["", f"Progressive loss: ours = mean of the `loss` "
              f"column ({fmt(ours['progressive_loss'], 6)}); VW's printed average loss "
              f"{fmt(vw['progressive_loss'], 6)}, recomputed from its `-p` scores "
              f"{fmt(vw['progressive_loss_from_p'], 6)} (6 printed digits). Error rate: ours "
              f"{fmt(ours['error_rate'], 4)}, VW {fmt(vw['error_rate_from_p'], 4)}. Pre-update "
              f"predicted probabilities differ by {fmt(a['mean_abs_prob_diff'], 4)} on average "
              f"(median {fmt(a['median_abs_prob_diff'], 4)}); same predicted class on "
              f"{100 * a['same_sign']:.2f}% of examples.", "",
              "## Model keys (round-robin key column)", ""]
    rows = []
    for k in KEY_COUNTS:
        r = R[f"unitless_keys{k}"]
        rows.append([k, fmt(r["wall_s"], 2), fmt(r["wall_median_s"], 2), f"{n / r['wall_s']:,.0f}",
                     f"{n / max(r['wall_s'] - su, 1e-9):,.0f}", fmt(r["cpu_s"], 2),
                     fmt(r["max_rss_mib"], 0), fmt(r["progressive_loss"], 6)])
    lines.append(md_table(["model keys", "wall s (best)", "wall s (median)", "examples/s (wall)",
                           "examples/s (excl. start-up)", "CPU s (least)", "peak RSS MiB (max)",
                           "progressive loss (all keys)"], rows))
    lines += ["", "Start-up (1-row run) subtracted: the no-key run's "
              f"{fmt(su, 2)} s. VW 1-row run: {fmt(sv, 2)} s, peak RSS "
              f"{fmt(R['vw_startup']['max_rss_mib'], 0)} MiB; ours 1-row: peak RSS "
              f"{fmt(R['unitless_startup']['max_rss_mib'], 0)} MiB."]
    for label, p in (data.get("profile") or {}).items():
        whole = next((b["cumulative_s"] for b in p["breakdown"] if b["what"].startswith("whole")),
                     None)
        lines += ["", f"## Profile ({label}): `unitless train` under cProfile, {p['rows']:,} rows",
                  "", f"`{_rel(p['command'])}`", "",
                  f"Wall {p['wall_s']:.1f} s under the profiler (its overhead inflates Python-heavy "
                  "parts). The Beam FnApiRunner runs the bundles in the calling thread, so the "
                  "profile sees all of the pipeline's work. Where the time goes (cumulative "
                  "time; indented rows are part of the row above):", ""]
        lines.append(md_table(["what", "calls", "cumulative s", "% of command", "own s"],
                              [[b["what"], b["calls"], b["cumulative_s"],
                                f"{100 * b['cumulative_s'] / whole:.1f}" if whole else "—",
                                b["own_s"]] for b in p["breakdown"]]))
        lines += ["", "Functions of `unitless/` by cumulative time:", ""]
        lines.append(md_table(["function", "calls", "cumulative s", "own s"],
                              [[f"`{r['function']}`", r["calls"], r["cumulative_s"], r["own_s"]]
                               for r in p["unitless_by_cumulative"][:25]]))
        lines += ["", "All functions by own time:", ""]
        lines.append(md_table(["function", "calls", "own s", "cumulative s"],
                              [[f"`{r['function']}`", r["calls"], r["own_s"], r["cumulative_s"]]
                               for r in p["by_own"][:25]]))
        lines += ["", "(Top functions by cumulative time over everything, Beam frames included, are "
                  "in the JSON file.)"]
    return "\n".join(lines) + "\n"


def _rel(cmd):
    return cmd.replace(str(ROOT) + "/", "").replace(tempfile.gettempdir() + "/", "$TMP/")


if __name__ == "__main__":
    main()
