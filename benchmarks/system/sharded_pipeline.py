"""One model over feature shards in the pipeline (`unitless train --shards S --max-delay τ`):
throughput, loss and memory beside the unsharded run on the same runner.

Data: the sparse stream of ``feature_shards.py`` (40 of a vocabulary of 1M Zipf-drawn features
per example, each on its own scale 10^U(−4, 4)), N examples (default 100,000) as a VW text
file (feature i named ``x<its hash>``, hashed again into 2^24 by the reader), one model key.
Every run: ``unitless train --bits 24 --streaming``, NAG, logistic loss, η = 0.5, timed as a
process of its own; the shards' parts through a topic of a local Kafka broker (deploy/kafka):

* on Prism (``--runner PrismRunner``; the Python work runs in the submitting process): the
  unsharded run, then S ∈ {1, 2} × τ ∈ ``--delays``;
* on Flink, parallelism 2, a persistent job server and a worker pool of 2 Python SDK worker
  processes (as ``flink.py``, the layout of a cluster): the same runs; then again on a job
  server whose Flink configuration sets ``execution.buffer-timeout.interval`` to 5 ms. Each
  job server runs a small sharded job (2,000 examples) before the timed runs.

Every run ``--repeat`` times (default 2), interleaved over the runners, each time also on the
input's first 2,000 examples. Reported per run: the best wall time, examples/s (best, and every
try's) and its ratio to the unsharded run on the same runner, the rate beyond the small job's,
progressive loss (mean over the predictions), the largest process's peak RSS (Prism: the client;
Flink: the largest SDK worker, which holds one shard or more: Flink places keys, not us), and the
largest shard's learner state (its final checkpoint's arrays) beside the unsharded model's.
Checked in the run: every example is predicted exactly once.

    .venv/bin/python benchmarks/system/sharded_pipeline.py            # full run (minutes)
    .venv/bin/python benchmarks/system/sharded_pipeline.py --quick    # smoke run (10,000 examples)

Needs the Prism binary (deploy/prism/build_prism.sh), Java 17 and the Flink job server jar
(deploy/flink/build_job_server.sh). Writes benchmarks/results/sharded_pipeline{.md,.json}
(``--quick``: results/tmp/sharded_pipeline_quick.*).
"""
import os
import shutil
import sys
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # (deploy/)
from common.data import ACTIVE, sparse_stream  # noqa: E402
from common.machine import header, TreeWatch  # noqa: E402
from common.results import fnum, relative_command, result_name, table, write_results  # noqa: E402
from common.runs import (parse_args, progress, rate_beyond, run_timed, scratch,  # noqa: E402
                         train_args, unitless_command)
from flink import WorkerPool, flink_args  # noqa: E402

from deploy.flink.job_server import FlinkJobServer, job_server_jar  # noqa: E402
from deploy.kafka.local_kafka import LocalKafka  # noqa: E402
from unitless.runtime.flink import BUFFER_TIMEOUT  # noqa: E402

ETA = 0.5
SHARDS = (1, 2)
PARALLELISM = 2
WARMUP_ROWS = 2_000
PRISM = os.environ.get("UNITLESS_PRISM") or os.path.expanduser(
    "~/.cache/unitless/prism/2.77.0/prism")


def make_data(work, n, seed):
    """The sparse stream as a VW file (without the stream's own bias: the reader adds one)."""
    batch, _ = sparse_stream(n, seed)
    indices = batch.indices.reshape(n, ACTIVE + 1)[:, :ACTIVE]
    values = batch.values.reshape(n, ACTIVE + 1)[:, :ACTIVE]
    path = work / "sparse.vw"
    with open(path, "w") as f:
        for i in range(n):
            f.write(f"{int(batch.labels[i])} '{i} |x "
                    + " ".join(f"x{j}:{v!r}" for j, v in zip(indices[i].tolist(),
                                                             values[i].tolist())) + "\n")
    progress(f"data: {n:,} examples, {path.stat().st_size / 2**20:.0f} MiB")
    return path


def new_topic(broker):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    name = f"feedback-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    admin.create_topics([NewTopic(name, 1, 1)])
    admin.close()
    return f"kafka://{broker.bootstrap_servers}/{name}"


def run_one(name, data, out, n, beam_args, shards, delay, broker, watch):
    shutil.rmtree(out, ignore_errors=True)
    extra = ["--format", "vw", "--bits", "24", "--streaming", *beam_args]
    if shards:
        extra += ["--shards", str(shards), "--max-delay", str(delay), "--feedback-topic",
                  new_topic(broker)]
    cmd = unitless_command(train_args(data, out / "predictions", out / "models", out / "dead",
                                      *extra, eta=ETA))
    with TreeWatch(watch) as w:
        r = run_timed(cmd)
    servers = w.result()
    r = {k: v for k, v in r.items() if k not in ("stdout", "stderr")}
    r.update(examples_per_s=n / r["wall_s"], loss=check_predictions(name, out, n),
             state_mib=largest_state_mib(out / "models", shards),
             largest_process_mib=(servers["workers"]["largest_process_mib"]
                                  if "workers" in servers else r["max_rss_mib"]),
             servers=servers)
    progress(f"{name}: wall {r['wall_s']:.1f} s, {r['examples_per_s']:,.0f} ex/s, loss "
             f"{r['loss']:.5f}, largest process {r['largest_process_mib']:.0f} MiB, state "
             f"{r['state_mib']:.1f} MiB")
    shutil.rmtree(out, ignore_errors=True)
    return r


def check_predictions(name, out, n):
    """Every example predicted exactly once; the progressive loss."""
    from unitless.connectors.files import read_output
    preds = read_output(str(out / "predictions"))
    ids = np.sort(preds.column("id").to_numpy(zero_copy_only=False).astype(np.int64))
    if preds.num_rows != n or not np.array_equal(ids, np.arange(n)):
        raise RuntimeError(f"{name}: {preds.num_rows} predictions for {n} examples")
    return float(np.mean(preds.column("loss").to_numpy()))


def largest_state_mib(model_dir, shards):
    """The learner state (arrays) of the largest shard, or of the unsharded model."""
    from unitless.learner import from_arrow
    from unitless.store import catalog, per_key
    from unitless.store.shards import shard_dir
    # (shards keep a directory per key; an unsharded model is in its group's checkpoints)
    store = per_key if shards else catalog
    dirs = [shard_dir(str(model_dir), s, shards) for s in range(shards)] if shards else [
        str(model_dir)]
    return max(from_arrow(store.load_latest(d, key)[1]).nbytes for d in dirs
               for key in store.model_keys(d)) / 2**20


def runs(delays):
    yield "unsharded", 0, 0
    for shards in SHARDS:
        for delay in delays:
            yield f"S={shards} τ={delay:,}", shards, delay


def run_all(args, n, work):
    data = make_data(work, n, args.seed)
    warm = work / "warm.vw"
    with open(data) as f, open(warm, "w") as w:
        w.writelines(line for _, line in zip(range(WARMUP_ROWS), f))
    broker = LocalKafka(work / "kafka", startup_timeout=120)
    broker.start()
    pool, servers = WorkerPool(work), []
    try:
        runners = {"prism": (["--runner", "PrismRunner", "--prism_location", PRISM], {})}
        for runner, conf in FLINK_RUNS.items():
            server = FlinkJobServer(jar=job_server_jar(), parallelism=PARALLELISM, conf=conf,
                                    workdir=work / runner).start()
            servers.append(server)
            beam_args = flink_args(server, PARALLELISM, pool)
            # a server's first job is slower (class loading, JIT): one sharded job first
            run_one(f"{runner} warm-up", warm, work / "out", WARMUP_ROWS, beam_args, 2,
                    1_000, broker, {})
            runners[runner] = beam_args, {"jvm": server.proc.pid, "workers": pool.proc.pid}
        tries = {runner: {} for runner in runners}
        small = {runner: {} for runner in runners}  # the same on the warm-up file
        for rep in range(args.repeat):  # (interleaved: load from elsewhere hits all alike)
            for name, shards, delay in runs(args.delays):
                for runner, (beam_args, watch) in runners.items():
                    for found, rows, m in ((tries, data, n), (small, warm, WARMUP_ROWS)):
                        found[runner].setdefault(name, []).append(run_one(
                            f"[{rep + 1}/{args.repeat}] {runner} {name} ({m:,})", rows,
                            work / "out", m, beam_args, shards, delay, broker, watch))
    finally:
        for server in servers:
            server.stop()
        pool.stop()
        broker.close()
    return {"examples": n, "seed": args.seed, "delays": args.delays, "repeat": args.repeat,
            "runners": {runner: {name: best(t, small[runner][name], n)
                                 for name, t in found.items()}
                        for runner, found in tries.items()}}


def best(tries, small, n):
    """The try with the least wall time, with every try's examples/s beside it, and the rate
    beyond the per-job cost: the examples beyond the small job's over the median wall time
    beyond its median."""
    r = dict(min(tries, key=lambda t: t["wall_s"]))
    r["examples_per_s_tries"] = [t["examples_per_s"] for t in tries]
    r["beyond_small_job_examples_per_s"] = rate_beyond(n, tries, WARMUP_ROWS, small)
    r["tries"], r["small_job_tries"] = tries, small
    return r


# Flink runs: {name: the job server's Flink configuration}. Flink sends a network buffer when it
# is full or after its buffer timeout (100 ms by default), which most of a round waited for.
FLINK_RUNS = {"flink_p2": {}, "flink_p2_bt5": {BUFFER_TIMEOUT: "5 ms"}}
LABELS = {"prism": "Prism", "flink_p2": f"Flink, parallelism {PARALLELISM}",
          "flink_p2_bt5": f"Flink, parallelism {PARALLELISM}, {BUFFER_TIMEOUT} 5 ms"}


def render(data):
    rows = []
    for runner, found in data["runners"].items():
        alone = found["unsharded"]
        for name, r in found.items():
            every = r["examples_per_s_tries"]
            rows.append([LABELS[runner], name, fnum(r["wall_s"], 3, sci=False),
                         f"{r['examples_per_s']:,.0f}", f"{min(every):,.0f}–{max(every):,.0f}",
                         f"{r['examples_per_s'] / alone['examples_per_s']:.3f}",
                         fnum(r["beyond_small_job_examples_per_s"], 0, sci=False),
                         fnum(r["loss"]), f"{r['loss'] / alone['loss']:.4f}",
                         f"{r['largest_process_mib']:,.0f}", f"{r['state_mib']:.1f}"])
    cmds = "\n".join(f"* {LABELS[runner]}, {name}: `{relative_command(r['command'])}`"
                     for runner, found in data["runners"].items() for name, r in found.items())
    return f"""* data: the sparse stream of `feature_shards.py` (seed {data['seed']}), \
{data['examples']:,} examples, 40 features each hashed into 2^24, one model key; NAG, logistic \
loss, η = {ETA}, `--streaming`; each run one process timed under `/usr/bin/time -v`

{table(["runner", "run", f"wall s (best of {data['repeat']})", "examples/s (best)",
        "examples/s (every try)", "× unsharded (best)",
        f"examples/s beyond a {WARMUP_ROWS:,}-example job", "progressive loss",
        "÷ unsharded", "largest process peak RSS MiB", "largest shard's state MiB"], rows)}

Beyond a {WARMUP_ROWS:,}-example job: each run is repeated on the input's first {WARMUP_ROWS:,}
examples, and (examples − {WARMUP_ROWS:,}) / (median wall − that job's median wall) is the rate
the run sustains once started, without what every job pays once (starting its workers and, on
Flink, its cluster).

Largest process: on Prism the submitting process, which runs all the Python work (every shard);
on Flink the largest of the Python SDK workers (sampled every 0.5 s), each of which holds the
shards Flink gives its subtask. State: the learner state's arrays in the largest shard's final
checkpoint (the unsharded run: the model's).

## Commands

{cmds}
"""


def main():
    args = parse_args(
        __doc__, quick_help="smoke run: 10,000 examples, results in results/tmp/",
        examples=(int, None, "examples (default 100,000; --quick: 10,000)"),
        delays=(lambda s: [int(x) for x in s.split(",")], [1_000, 10_000],
                "comma-separated delay bounds τ (default 1000,10000)"),
        repeat=(int, 2, "interleaved rounds of every run; the best wall time reported"),
        seed=(int, 3), workdir=(str, None, "scratch directory (default: a temp dir, removed)"))
    n = args.examples or (10_000 if args.quick else 100_000)
    h = header()
    with scratch(args.workdir, "unitless-sharded-") as work:
        data = run_all(args, n, work)
    write_results(result_name("sharded_pipeline", args.quick or n < 100_000),
                  f"One model over feature shards in the pipeline: {n:,} sparse examples, "
                  "Prism and Flink", h, render(data), data)


if __name__ == "__main__":
    main()
