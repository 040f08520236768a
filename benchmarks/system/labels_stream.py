"""Delayed outcomes on a stream (issue #36): examples without labels on one topic and their labels
on another, each at a rate per second (``--rates``), every label ``--lag`` seconds behind its
example;
``unitless train --streaming --labels ... --label-wait 30s`` on Prism, against the same examples
served without a labels topic and against them carrying their labels on the one topic (learned
as they come: "labels inline"), alternately (``--pairs`` times). The inline run learns what the
labels run learns, without the join, serving apart, a second input and a second prediction row:
what those cost is the labels run's CPU over it.

A single-node Apache Kafka (deploy/kafka/local_kafka.py) on this machine; topics of one
partition; one model key; the artificial stream (21 features), NAG, logistic loss. Reported per
run: serving latency (an example's produce time to its served prediction's append time)
p50/p99, the joined examples learned per second while the load lasts (their predictions'
append times), how long after its label an example was learned (p50/p99), the most examples
and MiB waiting for labels (the pipeline's log), the peak RSS of the pipeline's processes
(the command, Prism and its SDK workers), and their CPU per example while the load lasts.

Targets (issue #58, serving apart from learning): labels 1 s behind, serving p99 with labels
≤ 1.5× the served-only p99 at 5,000/s each and ≤ 2× at 10,000/s each; model age p99 ≤ 2 s at
5,000/s. Issue #59: CPU per example with labels ≤ 1.5× served only at 5,000/s each.

    .venv/bin/python benchmarks/system/labels_stream.py            # 5,000 and 10,000/s, 20 s, 2 pairs
    .venv/bin/python benchmarks/system/labels_stream.py --quick    # 2,000/s, 5 s, 1 pair
    .venv/bin/python benchmarks/system/labels_stream.py --runner flink  # Flink, parallelism 2

Writes benchmarks/results/labels_stream{.md,.json} (Flink: labels_stream_flink.*; ``--quick``:
in results/tmp/).
"""
import json
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # (deploy/)
from common.data import artificial_stream  # noqa: E402
from common.machine import header, TreeWatch  # noqa: E402
from common.results import result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress  # noqa: E402
from kafka_e2e import create_topics, paced_produce, produce, streaming_pipeline  # noqa: E402
from serving import percentiles, runner_args  # noqa: E402
from deploy.kafka.local_kafka import LocalKafka  # noqa: E402

WARM = 2_000


KINDS = {"served": "served only", "inline": "labels inline", "labels": "labels"}


def records(first, n, inline=False):
    """(examples, their labels) of ids first..first+n-1, as JSON messages; the examples carry
    their labels when ``inline``."""
    X, y, _ = artificial_stream(n, first + 1)
    names = [f"x{j + 1}" for j in range(X.shape[1])]
    examples = [json.dumps({"id": str(first + i), **dict(zip(names, X[i].tolist())),
                            **({"label": int(y[i])} if inline else {})}).encode()
                for i in range(n)]
    labels = [json.dumps({"id": str(first + i), "label": int(y[i])}).encode() for i in range(n)]
    return examples, labels


def run(bootstrap, work, name, rate, seconds, lag, kind, runner):
    with_labels = kind == "labels"
    topic = f"{name}-f"
    create_topics(bootstrap, topic, f"{topic}-pred", f"{topic}-dead", f"{name}-l",
                  append_time=(f"{topic}-pred",))
    extra = (["--labels", f"kafka://{bootstrap}/{name}-l", "--label-wait", "30s"]
             if with_labels else [])
    count = int(rate * seconds)
    examples, labels = records(WARM, count, inline=kind == "inline")
    with streaming_pipeline(bootstrap, topic, work, f"{name}.log", "--log-every", "2", *extra,
                            runner_args=runner) as watcher, \
            TreeWatch({"pipeline": watcher.pid}) as watch:
        warm_examples, warm_labels = records(0, WARM, inline=kind == "inline")
        produce(bootstrap, topic, warm_examples)
        if with_labels:
            produce(bootstrap, f"{name}-l", warm_labels)
        if not watcher.wait_for(WARM * (2 if with_labels else 1), 240):
            raise RuntimeError(f"no predictions after 240 s; log {watcher.log}")
        threads = [threading.Thread(target=paced_produce, args=(bootstrap, topic, examples,
                                                                 rate))]
        if with_labels:
            threads.append(threading.Thread(target=lambda: (time.sleep(lag), paced_produce(
                bootstrap, f"{name}-l", labels, rate))))
        cpu = watch.cpu()["pipeline"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        complete = watcher.wait_for((WARM + count) * (2 if with_labels else 1), 300)
        load_cpu = watch.cpu()["pipeline"] - cpu
    rows = [(row, served, age) for row, served, age in zip(watcher.rows, watcher.served,
                                                            watcher.ages)
            if int(row[2]) >= WARM]
    # (inline, each example is predicted as it is learned: its one row)
    served = np.array([a - e * 1000.0 for (a, e, _), s, _ in rows if s or kind == "inline"])
    ages = np.array([age * 1000.0 for _, s, age in rows if s and age is not None])
    learned = [(a, e) for (a, e, _), s, _ in rows if not s] if with_labels else []
    out = {"kind": kind, "offered_per_s": rate, "examples": count,
           "served": int(len(served)), "learned": len(learned), "complete": complete,
           "served_latency_ms": percentiles(served), "load_cpu_s": round(load_cpu, 2),
           **watch.result()["pipeline"]}
    if len(ages):  # (served apart from learning: the age of the published state that served)
        out["model_age_ms"] = percentiles(ages)
        out["served_unpublished"] = int(len(served) - len(ages))
    if learned:
        appended = np.array([a for a, _ in learned]) / 1000.0
        out["learned_per_s"] = len(learned) / max(appended.max() - appended.min(), 1e-9)
        out["label_to_learned_ms"] = percentiles(np.array([a - e * 1000.0 for a, e in learned]))
    waiting = [(int(n), float(m)) for n, m in re.findall(
        r"waiting for labels in the group last joined: (\d+) examples, ([0-9.]+) MiB",
        Path(watcher.log).read_text())]
    if waiting:
        out["waiting_examples_max"] = max(n for n, _ in waiting)
        out["waiting_mib_max"] = max(m for _, m in waiting)
    return out


def render(runs, lag):
    rows = []
    for r in runs:
        lat, learned = r["served_latency_ms"], r.get("label_to_learned_ms") or {}
        age = r.get("model_age_ms")
        labeled = r["kind"] == "labels"
        rows.append([KINDS[r["kind"]], f"{r['offered_per_s']:,}",
                     f"{r['served']:,} of {r['examples']:,}", f"{lat['p50']:.0f}",
                     f"{lat['p99']:.0f}",
                     f"{age['p50']:.0f} / {age['p99']:.0f}" if age else "—",
                     f"{r['learned']:,}" if labeled else "—",
                     f"{r['learned_per_s']:,.0f}" if r.get("learned_per_s") else "—",
                     f"{learned['p50']:.0f} / {learned['p99']:.0f}" if learned else "—",
                     f"{r.get('waiting_examples_max', 0):,} / {r.get('waiting_mib_max', 0):.1f}"
                     if labeled else "—", f"{r['max_rss_mib']:,.0f}",
                     f"{r['load_cpu_s'] / r['examples'] * 1e6:,.0f}"])
    return (table(["run", "offered /s", "served", "serving p50 ms", "serving p99 ms",
                   "model age p50 / p99 ms", "joined learned", "learned /s",
                   "label → learned p50 / p99 ms", "most waiting (examples / MiB)",
                   "peak RSS MiB", "pipeline CPU µs / example"], rows)
            + "\n\n" + table(["offered /s", "serving p99 with labels ÷ served only",
                               "CPU per example with labels ÷ served only",
                               "CPU per example with labels ÷ labels inline",
                               "CPU per example labels inline ÷ served only"], ratios(runs))
            + f"\n\nRuns alternate, each a fresh pipeline (ratios: one per round of the three "
            f"runs); labels {lag:g} s behind their "
            "examples. Producers, broker, pipeline and this script share the machine's 2 "
            "cores. \"model age\": of the published model state that served each example "
            "(serving apart from learning, with labels; rows served before their model's "
            "first publication have none); \"learned /s\": joined examples' predictions over "
            "the span of their append times; \"most waiting\": the largest the pipeline logged "
            "(every 2 s); \"pipeline CPU\": of the pipeline's processes (the command, Prism or "
            "Flink's job server, SDK workers) from the load's start until its last prediction, "
            "per example of the load (a labels run also reads, joins and learns a label for "
            "each; \"labels inline\": the examples carry their labels on the one topic and "
            "are learned, a row each, as they come).\n")


def ratios(runs):
    """[offered/s, the ratios within each round of its runs (served only, labels inline,
    labels): serving p99 with labels to served only, and CPU per example, labels to served
    only, labels to inline, inline to served only]."""
    out = {}
    for plain, inline, labels in zip(runs[::3], runs[1::3], runs[2::3]):
        cpu = {r["kind"]: r["load_cpu_s"] / r["examples"] for r in (plain, inline, labels)}
        out.setdefault(plain["offered_per_s"], []).append((
            labels["served_latency_ms"]["p99"] / plain["served_latency_ms"]["p99"],
            cpu["labels"] / cpu["served"], cpu["labels"] / cpu["inline"],
            cpu["inline"] / cpu["served"]))
    return [[f"{rate:,}", *(", ".join(f"{x[i]:.2f}" for x in xs) for i in range(4))]
            for rate, xs in out.items()]


def main():
    args = parse_args(__doc__, rates=(str, None, "examples/s and labels/s, comma-separated "
                                      "(default 5000,10000)"),
                      seconds=(int, None, "length of the load (default 20)"),
                      lag=(float, 1.0, "seconds a label comes after its example"),
                      pairs=(int, None, "alternated pairs of runs (default 2)"),
                      runner=(str, "prism", "prism, or flink (parallelism 2)"))
    rates = ([int(r) for r in args.rates.split(",")] if args.rates
             else [2_000] if args.quick else [5_000, 10_000])
    seconds = args.seconds or (5 if args.quick else 20)
    pairs = args.pairs or (1 if args.quick else 2)
    h = header()
    work = Path(tempfile.mkdtemp(prefix="unitless-labels-stream-"))
    runs = []
    try:
        with LocalKafka(work / "broker", startup_timeout=120) as kafka, \
                runner_args(args.runner, work) as runner:
            for rate in rates:
                for p in range(pairs):
                    for kind in KINDS:
                        runs.append(run(kafka.bootstrap_servers, work, f"{kind}-{rate}-{p}",
                                        rate, seconds, args.lag, kind, runner))
                        progress(json.dumps(runs[-1]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    name, runner_name = (("labels_stream", "Prism") if args.runner == "prism"
                         else ("labels_stream_flink", "Flink, parallelism 2"))
    write_results(result_name(name, args.quick),
                  f"Delayed outcomes on a stream: serving and learning with a labels topic "
                  f"({runner_name})",
                  h, render(runs, args.lag), {"runs": runs})


if __name__ == "__main__":
    main()
