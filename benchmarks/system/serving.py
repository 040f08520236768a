"""Serve while learning on Kafka: latency from an example's produce time to its prediction
message, 90% of the examples without a label (served) and 10% with one (learned), against
offered load, beside a bare relay of the same client at the same loads.

A single-node Apache Kafka (deploy/kafka/local_kafka.py) on this machine; topics of one
partition; one model key; examples of the artificial stream (21 features), NAG, logistic loss.
``unitless train --streaming`` runs on Prism (``--runner flink``: Flink, parallelism 2, an
embedded local cluster of Beam's Flink job server, LOOPBACK workers); at each offered rate it is
measured for
``--seconds``, then the relay (consume each message with the client, produce it unchanged to
another topic, no parsing, no learning: the floor the client and broker set) at the same rate,
alternately. Latency = the output message's LogAppendTime − the example's produce timestamp
(CreateTime: carried in a prediction's ``event_time``, in a relayed message's key), p50/p99/max,
for every prediction and for the served ones alone.

Then, on Prism: how long after a training run writes a key's newer checkpoint the first
score using it is appended, ``unitless score --streaming --refresh-seconds 1`` scoring a steady
1,000 examples/s meanwhile (``REFRESHES`` times).

Targets (issue #33), Prism on this 2-core machine: p99 ≤ 100 ms at 10,000/s and ≤ 250 ms at
25,000/s.

    .venv/bin/python benchmarks/system/serving.py            # 5k, 10k, 25k, 50k/s, 20 s each
    .venv/bin/python benchmarks/system/serving.py --quick    # 5k and 10k/s, 5 s each
    .venv/bin/python benchmarks/system/serving.py --runner flink   # the same on Flink (Java 17)

Writes benchmarks/results/serving{.md,.json} (Flink: serving_flink.*; ``--quick``: in
results/tmp/).
"""
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # (deploy/)
from common.data import artificial_stream  # noqa: E402
from common.machine import header  # noqa: E402
from common.results import result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress, train_args, unitless_command  # noqa: E402
from kafka_e2e import (PRISM_ARGS, LoadProducer, consumer, create_topics,  # noqa: E402
                       paced_produce, produce, streaming_pipeline)
from deploy.flink.job_server import FlinkJobServer, job_server_jar  # noqa: E402
from deploy.kafka.local_kafka import LocalKafka  # noqa: E402

LABELED_EVERY = 10  # one example in ten carries its label
RATES = (5_000, 10_000, 25_000, 50_000)
TARGETS = {10_000: 100.0, 25_000: 250.0}  # offered examples/s -> p99 ms


def example_values(n, first_id, labeled_every=LABELED_EVERY):
    """n JSON examples of the artificial stream, a label on one in ``labeled_every``."""
    X, y, _ = artificial_stream(n, first_id + 1)
    names = [f"x{j + 1}" for j in range(X.shape[1])]
    return [json.dumps({"id": str(first_id + i),
                        **({} if served(first_id + i, labeled_every) else {"label": int(y[i])}),
                        **dict(zip(names, X[i].tolist()))}).encode() for i in range(n)]


def served(example_id, labeled_every):
    return int(example_id) % labeled_every != 0


def percentiles(latency_ms):
    if not len(latency_ms):
        return dict.fromkeys(("p50", "p99", "max"))
    return {q: float(np.percentile(latency_ms, v)) for q, v in (("p50", 50), ("p99", 99),
                                                                ("max", 100))}


class Relay(threading.Thread):
    """The bare relay, live: each message of ``source`` produced unchanged to ``target``, its
    produce timestamp as the key (the watcher's latency reference)."""

    def __init__(self, bootstrap, source, target):
        super().__init__(daemon=True)
        self.bootstrap, self.source, self.target, self.stop = bootstrap, source, target, False

    def run(self):
        c, tp = consumer(self.bootstrap, self.source, max_poll_records=8192)
        p = LoadProducer(self.bootstrap)
        while not self.stop:
            for r in c.poll(timeout_ms=50).get(tp, []):
                send = p.p.produce if p.confluent else p.p.send
                while True:
                    try:
                        send(self.target, key=str(r.timestamp).encode(), value=r.value)
                        break
                    except BufferError:
                        p.p.poll(0.01)
            if p.confluent:
                p.p.poll(0)
        p.close()
        c.close()


def relayed_latencies(bootstrap, topic, count, timeout):
    """Append time − produce time (ms) of the first ``count`` messages of the relay's output."""
    c, tp = consumer(bootstrap, topic, max_poll_records=50_000)
    out, deadline = [], time.time() + timeout
    while len(out) < count and time.time() < deadline:
        out.extend(m.timestamp - int(m.key) for m in c.poll(timeout_ms=200).get(tp, []))
    c.close()
    return np.array(out, dtype=float)


def pipeline_phase(bootstrap, topic, watcher, first, rate, seconds, labeled_every):
    count = int(rate * seconds)
    achieved = paced_produce(bootstrap, topic, example_values(count, first, labeled_every), rate)
    complete = watcher.wait_for(first + count, 300)
    rows = watcher.rows[first:first + count]
    latency = np.array([append - event * 1000.0 for append, event, _ in rows])
    mask = np.array([served(i, labeled_every) for _, _, i in rows], dtype=bool)
    return {"offered_per_s": rate, "achieved_per_s": achieved, "examples": count,
            "predictions": len(rows), "complete": complete, "all": percentiles(latency),
            "served": percentiles(latency[mask] if len(rows) else latency)}


def relay_phase(bootstrap, work_topic, rate, seconds):
    source, target = f"{work_topic}-in", f"{work_topic}-out"
    create_topics(bootstrap, source, target, append_time=(target,))
    relay = Relay(bootstrap, source, target)
    relay.start()
    count = int(rate * seconds)
    achieved = paced_produce(bootstrap, source, example_values(count, 0), rate)
    latency = relayed_latencies(bootstrap, target, count, 120)
    relay.stop = True
    relay.join(10)
    return {"offered_per_s": rate, "achieved_per_s": achieved, "examples": count,
            "relayed": len(latency), "all": percentiles(latency)}


def run(bootstrap, work, rates, seconds, labeled_every, runner_args):
    topic, warm = "serve", 2_000
    create_topics(bootstrap, topic, f"{topic}-pred", f"{topic}-dead",
                  append_time=(f"{topic}-pred",))
    out = {"pipeline": [], "relay": []}
    with streaming_pipeline(bootstrap, topic, work, "pipeline.log",
                            runner_args=runner_args) as watcher:
        produce(bootstrap, topic, example_values(warm, 0))
        if not watcher.wait_for(warm, 180):
            raise RuntimeError(f"no predictions after 180 s; log {watcher.log}")
        first = warm
        for rate in rates:  # alternately: the pipeline at a rate, then the relay at it
            out["pipeline"].append(pipeline_phase(bootstrap, topic, watcher, first, rate,
                                                  seconds, labeled_every))
            first += out["pipeline"][-1]["examples"]
            progress(f"pipeline: {out['pipeline'][-1]}")
            out["relay"].append(relay_phase(bootstrap, f"relay-{rate}", rate, seconds))
            progress(f"relay: {out['relay'][-1]}")
        out["duplicates"] = watcher.duplicates()
    return out


REFRESHES, REFRESH_SECONDS = 3, 1.0


def refresh_delays(bootstrap, work, runner_args):
    """Seconds from a newer checkpoint's file being written to the first score naming it."""
    topic = "refresh"
    create_topics(bootstrap, topic, f"{topic}-scores", f"{topic}-dead",
                  append_time=(f"{topic}-scores",))
    models, rounds = work / "refresh-models", REFRESHES + 1
    # the load producer keys its messages "model": the model key the scoring run reads
    labeled = [json.dumps({**json.loads(v), "key": "model"}).encode()
               for v in example_values(500 * rounds, 10_000_000, labeled_every=1)]

    def train(r):
        data = work / f"refresh-{r}.jsonl"
        data.write_bytes(b"\n".join(labeled[500 * r:500 * (r + 1)]) + b"\n")
        subprocess.run(unitless_command(train_args(
            data, work / f"refresh-pred-{r}", models, work / f"refresh-dead-{r}", "--id-column",
            "id", "--model-key-column", "key", *(["--resume"] if r else []))), check=True,
            capture_output=True)
        newest = max((models / "k-model").glob("ckpt-*.arrow"))
        return newest.stat().st_mtime, f"@{500 * (r + 1)}"

    train(0)
    log = open(work / "refresh.log", "w")
    scoring = subprocess.Popen(unitless_command([
        "score", "--input", f"kafka://{bootstrap}/{topic}", "--id-column", "id", "--model-dir",
        str(models), "--predictions", f"kafka://{bootstrap}/{topic}-scores", "--dead-letter",
        f"kafka://{bootstrap}/{topic}-dead", "--refresh-seconds", str(REFRESH_SECONDS),
        "--streaming", *runner_args]), stdout=log, stderr=subprocess.STDOUT)
    stop = threading.Event()

    def steady_load():
        while not stop.is_set():
            paced_produce(bootstrap, topic, example_values(1000, 20_000_000), 1000)
    load = threading.Thread(target=steady_load, daemon=True)
    load.start()
    c, tp = consumer(bootstrap, f"{topic}-scores", max_poll_records=50_000)
    delays = []
    try:
        first_seen(c, tp, "@500", 180)
        for r in range(1, rounds):
            written, checkpoint = train(r)
            appended = first_seen(c, tp, checkpoint, 120)
            delays.append(appended - written)
            progress(f"checkpoint {checkpoint}: first score {delays[-1]:.2f} s after it")
    finally:
        stop.set()
        scoring.kill()
        scoring.wait()
        load.join(10)
        c.close()
        log.close()
    return delays


def first_seen(c, tp, checkpoint, timeout):
    """Append time (s) of the next score whose checkpoint id ends with ``checkpoint``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for m in c.poll(timeout_ms=200).get(tp, []):
            if json.loads(m.value)["checkpoint_id"].endswith(checkpoint):
                return m.timestamp / 1000.0
    raise RuntimeError(f"no score used checkpoint {checkpoint} within {timeout} s")


def render(data, seconds, labeled_every):
    rows = []
    for p, r in zip(data["pipeline"], data["relay"]):
        target = TARGETS.get(p["offered_per_s"])
        rows.append([f"{p['offered_per_s']:,}", f"{p['achieved_per_s']:,.0f}",
                     f"{p['predictions']:,} of {p['examples']:,}",
                     *(f"{p[part][q]:.0f}" if p[part][q] is not None else "—"
                       for part in ("all", "served") for q in ("p50", "p99")),
                     f"{p['all']['max']:.0f}" if p["all"]["max"] is not None else "—",
                     f"{r['all']['p50']:.0f}", f"{r['all']['p99']:.0f}",
                     "—" if target is None else
                     f"≤ {target:.0f}: {'yes' if (p['all']['p99'] or 1e9) <= target else 'no'}"])
    return (table(["offered /s", "achieved /s", "predictions", "p50 ms", "p99 ms",
                   "served p50 ms", "served p99 ms", "max ms", "relay p50 ms", "relay p99 ms",
                   "p99 target"], rows)
            + f"\n\nEach rate offered for {seconds} s, the pipeline first, then the bare relay "
            f"(its client: the load producer's). One example in {labeled_every} carries its label "
            "(learned), the rest are served. Producer, broker, pipeline, relay and this script "
            "share the machine's 2 cores; a load above what the pipeline sustains queues up, and "
            "latency then grows with the phase's length. Duplicate predictions seen: "
            f"{data['duplicates']}.\n"
            + ("" if not data.get("refresh_s") else
               f"\nA newer checkpoint's first score, `unitless score --streaming "
               f"--refresh-seconds {REFRESH_SECONDS:g}` at 1,000 examples/s: "
               + ", ".join(f"{d:.2f}" for d in data["refresh_s"])
               + " s after its file was written.\n"))


def main():
    args = parse_args(__doc__, rates=(str, None, "offered loads, examples/s, comma-separated"),
                      seconds=(int, None, "length of each phase (default 20; --quick 5)"),
                      labeled_every=(int, None, f"one example in this many has its label "
                                     f"(default {LABELED_EVERY}; 1: all learned, none served)"),
                      runner=(str, "prism", "prism, or flink (parallelism 2)"))
    labeled_every = args.labeled_every or LABELED_EVERY
    if args.runner not in ("prism", "flink"):
        raise SystemExit(f"--runner wants prism or flink, not {args.runner}")
    rates = ([int(r) for r in args.rates.split(",")] if args.rates
             else list(RATES[:2] if args.quick else RATES))
    seconds = args.seconds or (5 if args.quick else 20)
    h = header()
    work = Path(tempfile.mkdtemp(prefix="unitless-serving-bench-"))
    try:
        with LocalKafka(work / "broker", startup_timeout=120) as kafka, \
                runner_args(args.runner, work) as runner:
            progress(f"broker at {kafka.bootstrap_servers}")
            data = run(kafka.bootstrap_servers, work, rates, seconds, labeled_every, runner)
            if args.runner == "prism":
                data["refresh_s"] = refresh_delays(kafka.bootstrap_servers, work, runner)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    name = "serving" if args.runner == "prism" else "serving_flink"
    runner_name = "Prism" if args.runner == "prism" else "Flink, parallelism 2"
    write_results(result_name(name, args.quick),
                  f"Serve while learning: produce → prediction latency on Kafka ({runner_name})",
                  h, render(data, seconds, labeled_every), data)


@contextlib.contextmanager
def runner_args(runner, work):
    """The streaming pipeline's runner arguments: Prism's, or a Flink job server's (started
    here, parallelism 2, the pipeline's SDK workers in its own process: LOOPBACK)."""
    if runner == "prism":
        yield PRISM_ARGS
        return
    with FlinkJobServer(jar=job_server_jar(), parallelism=2, workdir=work / "flink") as server:
        yield ("--runner", "PortableRunner", "--job_endpoint", server.endpoint,
               "--environment_type", "LOOPBACK", "--parallelism", "2")


if __name__ == "__main__":
    main()
