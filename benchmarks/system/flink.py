"""The same `unitless train` job on Beam's FnApiRunner and on Flink with parallelism 1 and 2.

Data: the ScInOL slides' artificial stream (21 features, σ_i = 2⁻¹⁰ … 2¹⁰, y = ±1), N examples
(default 1,000,000) in ``--files`` CSV files (default 4; one file is read by one reader) with a
``key`` column, 8 model keys round-robin (example i
has key ``k{i mod 8}``). Every run: ``unitless train --streaming`` on those files, NAG, logistic
loss, η = 0.5, ``--model-key-column key``, parquet predictions; one process timed from outside
under ``/usr/bin/time -v`` (wall, CPU, peak RSS of the client):

* ``fnapi``: no ``--runner`` (``unitless train``'s default, Beam's in-process FnApiRunner);
* ``flink_p1``, ``flink_p2``: ``--runner PortableRunner --job_endpoint HOST:PORT
  --environment_type EXTERNAL --environment_config HOST:PORT --parallelism P
  --sdk_worker_parallelism P`` on a persistent job server (deploy/flink/job_server.FlinkJobServer,
  an embedded Flink 1.19, started once per parallelism and warmed up with a small job and one
  on the whole input before the timed runs) and a Beam worker pool
  (``apache_beam.runners.worker.worker_pool_main``, the venv first on PATH), which starts P
  Python SDK worker processes for the job: the layout of a cluster (deploy/README.md), where
  each TaskManager has its own Python workers. The job server
  JVM's and the worker pool's peak RSS and CPU seconds are sampled during each run.

Checked in the run: every run predicts each example exactly once with no dead letter, and the
8 keys' final checkpoints (weights, every state column, metadata but the time, run token and
checksum) are bit-equal across all runs. Runs are interleaved (``--repeat R`` rounds); the best
(least disturbed) wall time of each is reported with the median.

    .venv/bin/python benchmarks/system/flink.py                    # full run: 1M examples
    .venv/bin/python benchmarks/system/flink.py --quick            # smoke run (20k examples)
    .venv/bin/python benchmarks/system/flink.py --examples 50000 --repeat 2

Needs Java 17 and the job server jar (``deploy/flink/build_job_server.sh`` builds and caches
it; ``UNITLESS_FLINK_JOB_SERVER_JAR`` names one). Writes benchmarks/results/flink{.md,.json}
(``--quick``, or fewer than 1,000,000 examples: results/tmp/flink_quick.*).
"""
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # (deploy/)
from common.data import artificial_stream, write_csv  # noqa: E402
from common.machine import header, TreeWatch  # noqa: E402
from common.results import fnum, relative_command, result_name, table, write_results  # noqa: E402
from common.runs import (parse_args, progress, rate_beyond, run_timed, scratch,  # noqa: E402
                         train_args, unitless_command)
from deploy.flink.job_server import FlinkJobServer, job_server_jar  # noqa: E402

KEYS = 8
ETA = 0.5
PARALLELISMS = (1, 2)
WARMUP_ROWS = 2_000
SMALL = "_small"  # a run's name + SMALL: the same runner on the warm-up file (its per-job cost)
RUN_FIELDS = {"time", "token", "checksum"}  # checkpoint metadata that names when / which run


def fmt(x, digits=2):
    return fnum(x, digits, sci=False)


# ------------------------------------------------------------------------------------- running

def make_data(work, n, seed, files):
    """n keyed examples in ``files`` CSV files of consecutive rows (their glob, their bytes),
    and a small file for warming up a job server."""
    progress(f"generating {n:,} examples, {KEYS} keys round-robin, {files} files")
    X, y, _ = artificial_stream(n, seed)
    keys = np.char.add("k", (np.arange(n) % KEYS).astype(str))
    cuts = np.linspace(0, n, files + 1).astype(int)
    size = sum(write_csv(work / f"data-{i}.csv", X[a:b], y[a:b], keys[a:b],
                         first_id=a).stat().st_size
               for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])))
    m = min(WARMUP_ROWS, n)
    warm = write_csv(work / "warmup.csv", X[:m], y[:m], keys[:m])
    progress(f"data: {size / 2**20:.0f} MiB")
    return str(work / "data-*.csv"), size, warm


def command(inp, out, beam_args):
    extra = ["--label-column", "label", "--id-column", "id", "--model-key-column", "key",
             "--streaming", *beam_args]
    return unitless_command(train_args(inp, out / "predictions", out / "models", out / "dead",
                                       *extra, eta=ETA))


def flink_args(server, p, pool):
    return ["--runner", "PortableRunner", "--job_endpoint", server.endpoint,
            "--environment_type", "EXTERNAL", "--environment_config", pool.endpoint,
            "--parallelism", str(p), "--sdk_worker_parallelism", str(p)]


class WorkerPool:
    """Beam's Python SDK worker pool on a free port: it starts the SDK worker processes a job
    asks for with `python`, so the venv's bin comes first on its PATH."""

    def __init__(self, work):
        import os
        import subprocess
        from deploy.flink.job_server import free_port
        self.endpoint = f"127.0.0.1:{free_port()}"
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        self.log = open(work / "worker_pool.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
             f"--service_port={self.endpoint.rsplit(':', 1)[1]}"], env=env,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def start_servers(work, warm, inp, pool):
    """One warm job server per parallelism: {p: server}. Warmed up by a small job, then one
    on the whole input: the JVM compiles the data path's code while it runs, job after job."""
    jar, servers = job_server_jar(), {}
    for p in PARALLELISMS:
        server = FlinkJobServer(jar=jar, parallelism=p, workdir=work / f"js{p}").start()
        servers[p] = server
        progress(f"job server p={p} at {server.endpoint} ({server.startup_seconds:.1f} s)")
        first, whole = (run_timed(command(data, work / f"warmup{p}", flink_args(server, p, pool)))
                        for data in (warm, inp))
        server.warmup = {"startup_s": round(server.startup_seconds, 2),
                         "first_job_wall_s": round(first["wall_s"], 2), "rows": WARMUP_ROWS,
                         "whole_input_job_wall_s": round(whole["wall_s"], 2)}
    return servers


def run_one(name, inp, out, n, beam_args, watch):
    """One timed run; its predictions and dead letters checked, its final checkpoints'
    fingerprints kept, and the CPU seconds the JVM's JIT compiler threads used during it."""
    shutil.rmtree(out, ignore_errors=True)
    jit = jit_cpu_s(watch.get("jvm"))
    with TreeWatch(watch) as w:
        r = run_timed(command(inp, out, beam_args))
    r.update(servers=w.result(), examples=check_outputs(name, out, n),
             checkpoints=final_checkpoints(out / "models"))
    if jit is not None:
        r["servers"]["jvm"]["jit_cpu_s"] = round(jit_cpu_s(watch["jvm"]) - jit, 2)
    shutil.rmtree(out, ignore_errors=True)
    return {k: v for k, v in r.items() if k not in ("stdout", "stderr")}


def jit_cpu_s(pid):
    """CPU seconds used so far by the JVM ``pid``'s JIT compiler threads (long-lived, so a
    difference of two readings is what they used in between); None without a JVM."""
    if pid is None:
        return None
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if "CompilerThre" in (task / "comm").read_text():
                fields = (task / "stat").read_text().rsplit(") ", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
        except OSError:  # (a thread that ended)
            continue
    return total / os.sysconf("SC_CLK_TCK")


def check_outputs(name, out, n):
    """Every example predicted exactly once, no dead letters; returns n."""
    from unitless.connectors.files import read_output
    preds, dead = read_output(str(out / "predictions")), read_output(str(out / "dead"))
    if preds is None:
        raise RuntimeError(f"{name}: no predictions")
    ids = np.sort(preds.column("id").to_numpy(zero_copy_only=False).astype(np.int64))
    if preds.num_rows != n or dead is not None and dead.num_rows:
        raise RuntimeError(f"{name}: {preds.num_rows} predictions, "
                           f"{0 if dead is None else dead.num_rows} dead letters for {n} examples")
    if not np.array_equal(ids, np.arange(n)):
        raise RuntimeError(f"{name}: prediction ids are not 0..{n - 1}")
    return n


def final_checkpoints(model_dir):
    """{model key: (examples seen, SHA-256 of the newest checkpoint's columns and metadata but
    the run fields)}: equal fingerprints = bit-equal models."""
    from unitless.store.catalog import load_latest, model_keys
    out = {}
    for key in model_keys(str(model_dir)):
        _, t = load_latest(str(model_dir), key)
        meta = json.loads(t.schema.metadata[b"unitless"])
        h = hashlib.sha256(json.dumps({k: v for k, v in meta.items() if k not in RUN_FIELDS},
                                      sort_keys=True).encode())
        for col in t.column_names:
            h.update(col.encode() + repr(t.column(col).to_pylist()).encode())
        out[key] = (meta["examples_seen"], h.hexdigest())
    return out


def interleaved(jobs, repeat):
    """Every job `repeat` times, interleaved, so load from other processes hits all alike."""
    tries = {name: [] for name, _ in jobs}
    for rep in range(repeat):
        for name, job in jobs:
            r = job()
            tries[name].append(r)
            s, w = r["servers"].get("jvm"), r["servers"].get("workers")
            progress(f"[{rep + 1}/{repeat}] {name}: wall {r['wall_s']:.2f} s, cpu {r['cpu_s']:.2f}"
                     f" s, client RSS {r['max_rss_mib']:.0f} MiB"
                     + (f", JVM RSS {s['max_rss_mib']:.0f} MiB, JVM cpu {s['cpu_s']:.1f} s, "
                        f"workers RSS {w['max_rss_mib']:.0f} MiB, workers cpu {w['cpu_s']:.1f} s"
                        if s else "") + f", load {r['load_1min']}")
    return tries


def summarize(tries, n):
    walls = [t["wall_s"] for t in tries]
    best = tries[int(np.argmin(walls))]
    jvm = [t["servers"]["jvm"] for t in tries if "jvm" in t["servers"]]
    workers = [t["servers"]["workers"] for t in tries if "workers" in t["servers"]]
    return {"wall_s": min(walls), "wall_median_s": float(np.median(walls)),
            "examples_per_s": n / min(walls), "cpu_s": best["cpu_s"],
            "max_rss_mib": max(t["max_rss_mib"] for t in tries),
            "jvm_max_rss_mib": max((j["max_rss_mib"] for j in jvm), default=None),
            "jvm_cpu_s": best["servers"].get("jvm", {}).get("cpu_s"),
            "jvm_jit_cpu_s": best["servers"].get("jvm", {}).get("jit_cpu_s"),
            "workers_max_rss_mib": max((w["max_rss_mib"] for w in workers), default=None),
            "workers_cpu_s": best["servers"].get("workers", {}).get("cpu_s"),
            "command": best["command"], "tries": tries}


def check_equal(runs, n):
    """The final checkpoints of every try of every run are the same 8 models, bit for bit."""
    ref = runs["fnapi"]["tries"][0]["checkpoints"]
    if len(ref) != KEYS or sum(e for e, _ in ref.values()) != n:
        raise RuntimeError(f"FnApiRunner: {len(ref)} keys, {sum(e for e, _ in ref.values())} "
                           f"examples in the final checkpoints, want {KEYS} and {n}")
    for name, r in runs.items():
        for i, t in enumerate(r["tries"]):
            if t["checkpoints"] != ref:
                raise RuntimeError(f"{name} try {i + 1}: final checkpoints differ from fnapi's")
    return {"keys": len(ref), "examples": n, "fingerprints": ref}


def run_all(args, n, work):
    inp, size, warm = make_data(work, n, args.seed, args.files)
    pool = WorkerPool(work)
    servers = {}
    try:
        servers = start_servers(work, warm, inp, pool)
        runners = {"fnapi": ([], {})}
        runners.update({f"flink_p{p}": (flink_args(s, p, pool),
                                        {"jvm": s.proc.pid, "workers": pool.proc.pid})
                        for p, s in servers.items()})
        jobs = []
        for name, (beam_args, watch) in runners.items():
            jobs += [(name, lambda a=(name, inp, work / name, n, beam_args, watch): run_one(*a)),
                     (f"{name}{SMALL}", lambda a=(name, warm, work / name, WARMUP_ROWS, beam_args,
                                                  watch): run_one(*a))]
        tries = interleaved(jobs, args.repeat)
    finally:
        for s in servers.values():
            s.stop()
        pool.stop()
    runs = {name: summarize(t, n) for name, t in tries.items() if not name.endswith(SMALL)}
    for name, r in runs.items():
        small = [t["wall_s"] for t in tries[name + SMALL]]
        r["small_job_wall_median_s"] = float(np.median(small))
        r["small_job_tries"] = tries[name + SMALL]
        cpu = np.median([all_cpu_s(t) for t in r["tries"]]) - np.median(
            [all_cpu_s(t) for t in r["small_job_tries"]])
        r["beyond_small_job_cpu_us_per_example"] = cpu / (n - WARMUP_ROWS) * 1e6
        r["beyond_small_job_examples_per_s"] = rate_beyond(n, r["tries"], WARMUP_ROWS,
                                                           r["small_job_tries"])
    return {"examples": n, "keys": KEYS, "features": 21, "seed": args.seed, "eta": ETA,
            "repeat": args.repeat, "input_bytes": size, "files": args.files,
            "job_servers": {f"p{p}": s.warmup for p, s in servers.items()},
            "runs": runs, "equal_checkpoints": check_equal(runs, n),
            "ratios": {"flink_p1_over_fnapi": runs["flink_p1"]["examples_per_s"]
                       / runs["fnapi"]["examples_per_s"],
                       "scaling_p2_over_p1": runs["flink_p2"]["examples_per_s"]
                       / runs["flink_p1"]["examples_per_s"],
                       "flink_p1_over_fnapi_beyond_small_job": ratio(
                           runs["flink_p1"]["beyond_small_job_examples_per_s"],
                           runs["fnapi"]["beyond_small_job_examples_per_s"])}}


def all_cpu_s(run):
    """CPU seconds of a run's client, job server JVM and SDK workers together."""
    return run["cpu_s"] + sum(run["servers"].get(k, {}).get("cpu_s", 0) for k in ("jvm", "workers"))


def ratio(a, b):
    return None if a is None or b is None else a / b


# --------------------------------------------------------------------------------------- report

LABELS = {"fnapi": "FnApiRunner (default)", "flink_p1": "Flink, parallelism 1",
          "flink_p2": "Flink, parallelism 2"}


def results_table(data):
    runs = data["runs"]
    whole = [[LABELS[k], fmt(r["wall_s"]), fmt(r["wall_median_s"]), f"{r['examples_per_s']:,.0f}",
              fmt(r["cpu_s"]), fmt(r["max_rss_mib"], 0), fmt(r["jvm_max_rss_mib"], 0),
              fmt(r["jvm_cpu_s"], 1), fmt(r["jvm_jit_cpu_s"], 1), fmt(r["workers_max_rss_mib"], 0),
              fmt(r["workers_cpu_s"], 1)] for k, r in runs.items()]
    beyond = [[LABELS[k], fmt(r["small_job_wall_median_s"]),
               fmt(r["beyond_small_job_examples_per_s"], 0),
               fmt(r["beyond_small_job_cpu_us_per_example"], 2)] for k, r in runs.items()]
    q = data["ratios"]
    busy = {k: (r["cpu_s"] + (r["jvm_cpu_s"] or 0) + (r["workers_cpu_s"] or 0)) / r["wall_s"]
            for k, r in runs.items()}
    return table(["run", f"wall s (best of {data['repeat']})", "wall s (median)",
                  "examples/s (best wall)", "client CPU s (user+sys)", "client peak RSS MiB",
                  "job server JVM peak RSS MiB", "JVM CPU s", "of which JIT compiling",
                  "SDK workers peak RSS MiB", "SDK workers CPU s"], whole) + "\n\n" + table(
        ["run", f"{WARMUP_ROWS:,}-example job: wall s (median)", "examples/s beyond that job",
         "CPU µs per example beyond that job"], beyond) + f"""

* **Flink p1 / FnApiRunner** (examples/s): **{q['flink_p1_over_fnapi']:.2f}**
* **Flink p1 / FnApiRunner, examples/s beyond the per-job cost**:
  **{fmt(q['flink_p1_over_fnapi_beyond_small_job'])}**
* **scaling p2 / p1** (examples/s): **{q['scaling_p2_over_p1']:.2f}**

The per-job cost is what a {WARMUP_ROWS:,}-example job takes on the same runner, run beside each
large one: on Flink, a new embedded Flink cluster for the job (the job server's `[local]` mode),
Python SDK worker processes started and importing Beam and unitless, the job's teardown; on the
FnApiRunner, little beyond the command's own start. "Beyond the per-job cost" is
(examples − {WARMUP_ROWS:,}) / (median wall − the small job's median wall): the rate a long
or streaming job runs at, where the per-job cost is paid once; its CPU per example is the
median CPU seconds of client, JVM and workers together less the small job's, over the same
examples. On Flink the JVM's JIT compiler is still at work in these runs (its CPU falls from
one job to the next on the same server: every try is in the JSON file).

Cores kept busy (client, JVM and SDK workers' CPU seconds over the best wall time):
{", ".join(f"{LABELS[k]} {v:.2f}" for k, v in busy.items())}, of the machine's
{os.cpu_count()}. Flink's own work (the JVM: moving every block through the data plane into
keyed state and out again) costs about as much CPU as the Python parsing and learning, so on a
two-core machine parallelism 2 has little idle CPU to use; the ratio measures that machine, not
Flink's scaling on a cluster with cores to spare."""


def render(data):
    R, js, eq = data["runs"], data["job_servers"], data["equal_checkpoints"]
    cmds = "\n".join(f"* {k}: `{relative_command(r['command'])}`" for k, r in R.items())
    warm = "; ".join(f"{p}: started in {w['startup_s']} s, warm-up job ({w['rows']:,} rows) "
                     f"{w['first_job_wall_s']} s, then the whole input "
                     f"{w['whole_input_job_wall_s']} s" for p, w in js.items())
    return f"""* data: the artificial stream (21 features, σ_i = 2⁻¹⁰…2¹⁰, seed {data['seed']}), \
{data['examples']:,} examples in {data['files']} CSV files of consecutive rows \
({data['input_bytes'] / 2**20:.0f} MiB, read in parallel, a file per reader) with a \
`key` column, {data['keys']} model keys round-robin; NAG, logistic loss, η = {data['eta']}, \
`--streaming` on every runner; each run one process timed under `/usr/bin/time -v`

## Results

{results_table(data)}

Client: the `unitless train` process (on the FnApiRunner it does all the work; on Flink it
submits the job and waits). Job server JVM: the embedded Flink cluster (job manager and task
slots). SDK workers: the worker pool and the Python worker processes it starts for the job (the
parsing and the learning on Flink). Both sampled every 0.5 s during the run; CPU seconds are
those used during the run. Runs interleaved {data['repeat']} time(s); every try is in the JSON file.

Correctness (checked in the run, or the script fails): each run predicted all
{eq['examples']:,} examples exactly once with no dead letter, and the {eq['keys']} keys' final
checkpoints (every column, metadata but time, run token and checksum) are bit-equal across all
runs and tries.

## Why a persistent job server and a worker pool

A user with many jobs or one long job keeps one Flink job server (or cluster) running and submits
to it (`python -m deploy.flink.job_server start`, then `--runner PortableRunner --job_endpoint`,
as docs/operations.md advises), instead of `--runner FlinkRunner`, which starts a new job server
JVM for every run. The measured jobs therefore exclude the JVM's start-up and its first,
slower jobs (class loading, JIT): one server per parallelism, warmed up by a small job and one
on the whole input first ({warm}).
The Python SDK workers come from a worker pool (`EXTERNAL`), P processes for parallelism P, as
on a cluster where a worker pool runs beside every TaskManager (deploy/README.md). With the local
default, LOOPBACK, every subtask's Python work runs in the one submitting process and its GIL,
so parallelism could not buy anything; measured by an earlier version of this script at 300k
examples: p2/p1 0.71.

## Commands

{cmds}
"""


# ----------------------------------------------------------------------------------------- main

def main():
    args = parse_args(
        __doc__, quick_help="smoke run: 20,000 examples, results in results/tmp/",
        examples=(int, None, "examples (default 1,000,000; --quick: 20,000)"),
        repeat=(int, 1, "interleaved rounds of the three runs; best and median wall reported"),
        seed=(int, 1), files=(int, 4, "CSV files the examples are split into (default 4)"),
        workdir=(str, None, "scratch directory (default: a temp dir, removed)"))
    n = args.examples or (20_000 if args.quick else 1_000_000)
    h = header()
    with scratch(args.workdir, "unitless-flink-") as work:
        data = run_all(args, n, work)
    name = result_name("flink", args.quick or n < 1_000_000)
    write_results(name, f"`unitless train --streaming`: FnApiRunner vs Flink p1 and p2, "
                  f"{n:,} examples, {KEYS} keys", h, render(data), data)


if __name__ == "__main__":
    main()
