"""Kafka end to end on a real broker: examples topic -> `unitless train` -> predictions topic.

A single-node Apache Kafka (deploy/kafka/local_kafka.py) runs on this machine; every topic has one
partition and every example the same model key (one model). Examples are JSON objects of the
artificial stream (21 features, σ_i = 2⁻¹⁰ … 2¹⁰), NAG, logistic loss. Prediction topics use
LogAppendTime, so each prediction carries the time the broker appended it.

Measured in one run, for each installed Kafka client (kafka-python, confluent-kafka), side by
side:

1. Reference: a bare relay with that client (consume each example message, produce it unchanged
   to another topic; no parsing, no Beam, no learning): what the client library itself manages
   on this machine, end to end.
   Second reference: a bare learner loop with that client: the product's own Kafka reader,
   parser, learner and prediction writer on the same messages (blocks of up to 8,192, acks=all,
   flushed every 262,144 predictions, as a bounded run does), in a plain loop without Beam:
   what the per-example work itself manages. The pipeline does that work and more (beyond
   the noise between runs it does not beat it); "× the bare learner loop" is what Beam's
   runners keep of it.
2. Throughput, bounded: ``unitless train --input kafka://…`` on the FnApiRunner (reads to the end
   offsets seen at start) over N examples already on the topic. Sustained examples/s = N over the
   time between the pipeline's first read (its log line) and the last prediction appended (the
   FnApiRunner reads and parses all N before it learns any: earlier versions of this script
   counted from the first prediction, which left the reading out); also N over the command's
   wall time.
3. Streaming on Prism (``--streaming``): after a warm-up, (a) N examples produced as fast as the
   producer can, sustained examples/s = N over the time between the first and the last of their
   predictions appended (the running pipeline reads them as they come); (b) fixed offered loads R
   examples/s for T s each (half the 50,000 target, and half of what (a) sustained; offered by
   confluent-kafka's producer when installed), end-to-end latency = prediction append time −
   example produce time (the example's Kafka timestamp, carried in the prediction's
   ``event_time``), p50/p99.
4. Where the time goes: the bounded run with the fastest client under cProfile, own time
   grouped by module.

Targets (issue #15): ≥ 50,000 examples/s sustained, ≥ 0.7× the faster relay, p99 < 1 s at
25,000 examples/s offered.

    .venv/bin/python benchmarks/system/kafka_e2e.py            # full run
    .venv/bin/python benchmarks/system/kafka_e2e.py --quick    # smoke run

Writes benchmarks/results/kafka_e2e{.md,.json} (``--quick``: results/tmp/kafka_e2e_quick.*).
"""
import contextlib
import json
import os
import shutil
import signal
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
from common.results import fnum, result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress, train_args, unitless_command  # noqa: E402
from deploy.kafka.local_kafka import LocalKafka  # noqa: E402
from unitless.connectors.kafka_clients import installed  # noqa: E402

PRISM = os.environ.get("UNITLESS_PRISM") or os.path.expanduser(
    "~/.cache/unitless/prism/2.77.0/prism")
TARGET = 50_000


def example_values(n, seed, first_id=0):
    """n JSON-encoded examples of the artificial stream."""
    X, y, _ = artificial_stream(n, seed)
    names = [f"x{j + 1}" for j in range(X.shape[1])]
    return [json.dumps({"id": str(first_id + i), "label": int(y[i]),
                        **dict(zip(names, X[i].tolist()))}).encode() for i in range(n)]


def create_topics(bootstrap, *names, append_time=()):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(t, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"}
                                  if t in append_time else {}) for t in names])
    admin.close()


class LoadProducer:
    """The load generator's producer (acks=1): confluent-kafka's when installed (kafka-python's
    cannot offer 25,000 messages/s here), else kafka-python's. ``send(topic, value)`` with key
    "model"."""

    def __init__(self, bootstrap):
        self.confluent = "confluent-kafka" in installed()
        if self.confluent:
            from confluent_kafka import Producer
            self.p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5})
        else:
            from kafka import KafkaProducer
            self.p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                                   batch_size=512 * 1024)

    def send(self, topic, value):
        if not self.confluent:
            self.p.send(topic, key=b"model", value=value)
            return
        while True:
            try:
                self.p.produce(topic, key=b"model", value=value)
                return
            except BufferError:
                self.p.poll(0.01)

    def flush(self):
        self.p.flush()

    def close(self):
        self.p.flush() if self.confluent else self.p.close()


def produce(bootstrap, topic, values):
    p = LoadProducer(bootstrap)
    t = time.time()
    for v in values:
        p.send(topic, v)
    p.flush()
    p.close()
    return time.time() - t


def consumer(bootstrap, topic, **config):
    """A consumer of the topic's one partition from its beginning (no group): (consumer, tp)."""
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      **config)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    return c, tp


def consume(bootstrap, topic, n, timeout):
    """The first n messages of a topic (fewer if timeout passes first)."""
    c, tp = consumer(bootstrap, topic, max_poll_records=50_000, fetch_max_bytes=64 << 20)
    out, deadline = [], time.time() + timeout
    while len(out) < n and time.time() < deadline:
        out.extend(c.poll(timeout_ms=500).get(tp, []))
    c.close()
    return out


def relay(bootstrap, source, target, n, client):
    """The reference: consume n messages and produce each unchanged with the bare client;
    (seconds, messages)."""
    if client == "confluent-kafka":
        return _confluent_relay(bootstrap, source, target, n)
    from kafka import KafkaProducer
    c, tp = consumer(bootstrap, source, max_poll_records=8192)
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=512 * 1024)
    t, done = time.time(), 0
    while done < n and time.time() - t < 600:
        for r in c.poll(timeout_ms=500).get(tp, []):
            p.send(target, key=r.key, value=r.value)
            done += 1
    p.flush()
    seconds = time.time() - t
    p.close()
    c.close()
    return seconds, done


def _confluent_relay(bootstrap, source, target, n):
    from confluent_kafka import Consumer, Producer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "relay",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(source, 0, 0)])
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5})
    t, done = time.time(), 0
    while done < n and time.time() - t < 600:
        for m in c.consume(8192, 0.5):
            if m.error():
                continue
            while True:
                try:
                    p.produce(target, key=m.key(), value=m.value())
                    break
                except BufferError:
                    p.poll(0.05)
            done += 1
        p.poll(0)
    p.flush()
    seconds = time.time() - t
    c.close()
    return seconds, done


def train_cmd(bootstrap, topic, work, *extra):
    """``unitless train`` arguments from a topic to its -pred and -dead topics (NAG, η = 0.5)."""
    return train_args(f"kafka://{bootstrap}/{topic}", f"kafka://{bootstrap}/{topic}-pred",
                      work / f"{topic}-models", f"kafka://{bootstrap}/{topic}-dead",
                      "--id-column", "id", *extra)


def append_span(messages):
    """Seconds between the first and the last message's (LogAppendTime) timestamp."""
    stamps = [m.timestamp for m in messages]
    return (max(stamps) - min(stamps)) / 1000.0


def first_read(log):
    """When the pipeline opened its first partition reader (its log line "Kafka …: reading
    from offset …"), seconds since the epoch."""
    for line in log.splitlines():
        if ": reading from offset " in line:
            stamp, millis = line[:23].split(",")
            return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
    raise RuntimeError("the pipeline logged no 'reading from offset' line")


def bounded_run(bootstrap, work, n, client):
    topic = f"bounded-{client}"
    create_topics(bootstrap, topic, f"{topic}-pred", f"{topic}-dead",
                  append_time=(f"{topic}-pred",))
    produce(bootstrap, topic, example_values(n, seed=1))
    t = time.time()
    done = subprocess.run(unitless_command(train_cmd(bootstrap, topic, work, "--kafka-client",
                                                     client)),
                          capture_output=True, text=True)
    wall = time.time() - t
    if done.returncode:
        raise RuntimeError(f"unitless train failed:\n{done.stderr[-3000:]}")
    predictions = consume(bootstrap, f"{topic}-pred", n, 120)
    losses = [json.loads(m.value)["loss"] for m in predictions]
    # from the first read, not the first prediction: the FnApiRunner reads and parses the whole
    # input before it learns any (a stage at a time)
    span = max(m.timestamp for m in predictions) / 1000.0 - first_read(done.stderr)
    return {"examples": n, "predictions": len(predictions), "wall_s": wall,
            "append_span_s": append_span(predictions), "read_to_last_append_s": span,
            "examples_per_s_sustained": n / span,
            "examples_per_s_wall": n / wall, "progressive_loss": float(np.mean(losses))}


class PredictionWatcher(threading.Thread):
    """Consumes a prediction topic as it grows: (append time ms, event time s, id) per message,
    whether it was served, and the age of the model state that served it (s; None: not served
    apart from learning, or by a model not published yet).
    Reads with the product's own reader (the fastest installed client) and decodes a poll's
    messages at once with Arrow: it shares the 2 cores with the pipeline it measures, and
    kafka-python with a json.loads per message took most of one."""

    def __init__(self, bootstrap, topic):
        super().__init__(daemon=True)
        from unitless.connectors.kafka import KafkaTopic
        from unitless.connectors.kafka_clients import open_reader
        self.reader = open_reader(KafkaTopic.parse(f"kafka://{bootstrap}/{topic}"), 0, 50_000)
        self.reader.seek(0)
        self.rows, self.served, self.ages, self.stop = [], [], [], False

    def run(self):
        import pyarrow as pa
        import pyarrow.json as pj
        while not self.stop:
            records = self.reader.poll(200)
            if not records:
                continue
            table = pj.read_json(pa.BufferReader(b"\n".join(records.values)))
            self.rows.extend(zip(records.timestamps, table.column("event_time").to_pylist(),
                                 table.column("id").to_pylist()))
            self.served.extend(table.column("served").to_pylist())
            self.ages.extend(table.column("model_age_seconds").to_pylist()
                             if "model_age_seconds" in table.column_names
                             else [None] * table.num_rows)
        self.reader.close()

    def duplicates(self):
        ids = [r[2] for r in self.rows]
        return len(ids) - len(set(ids))

    def wait_for(self, count, timeout):
        deadline = time.time() + timeout
        while len(self.rows) < count and time.time() < deadline:
            time.sleep(0.05)
        return len(self.rows) >= count


def paced_produce(bootstrap, topic, values, rate):
    """Send values at `rate` per second in 10 ms slices; returns the achieved rate."""
    p = LoadProducer(bootstrap)
    per_slice = max(1, int(rate / 100))
    start = time.time()
    for a in range(0, len(values), per_slice):
        due = start + a / rate
        while time.time() < due:
            time.sleep(max(0.0, min(due - time.time(), 0.005)))
        for v in values[a:a + per_slice]:
            p.send(topic, v)
    p.flush()
    seconds = time.time() - start
    p.close()
    return len(values) / seconds


def burst_phase(bootstrap, topic, watcher, first, n):
    """n examples produced as fast as the producer sends: sustained examples/s."""
    values = example_values(n, seed=3, first_id=first)
    t = time.time()
    produce(bootstrap, topic, values)
    ok = watcher.wait_for(first + n, 600)
    burst = watcher.rows[first:first + n]
    span = (burst[-1][0] - burst[0][0]) / 1000 if burst else None
    out = {"examples": n, "predictions": len(burst), "complete": ok, "wall_s": time.time() - t,
           "append_span_s": span, "examples_per_s_sustained": len(burst) / span if burst else 0.0}
    progress(f"burst: {out}")
    return out


def paced_phase(bootstrap, topic, watcher, first, rate, seconds):
    """rate examples/s offered for `seconds`: end-to-end latency percentiles."""
    count = int(rate * seconds)
    achieved = paced_produce(bootstrap, topic, example_values(count, seed=4, first_id=first), rate)
    ok = watcher.wait_for(first + count, 300)
    paced = watcher.rows[first:first + count]
    latency = np.array([append - event * 1000.0 for append, event, _ in paced])
    out = {"offered_per_s": rate, "achieved_offered_per_s": achieved, "seconds": seconds,
           "examples": count, "predictions": len(paced), "complete": ok,
           **{f"latency_ms_{q}": float(np.percentile(latency, v)) if len(paced) else None
              for q, v in (("p50", 50), ("p99", 99), ("max", 100))}}
    progress(f"paced: {out}")
    return out


PRISM_ARGS = ("--runner", "PrismRunner", "--prism_location", PRISM)


@contextlib.contextmanager
def streaming_pipeline(bootstrap, topic, work, log_name, *extra, runner_args=PRISM_ARGS):
    """``unitless train --streaming`` (on Prism unless ``runner_args`` name another runner) from
    the topic (its output to ``work/log_name``) while the block runs, which gets a started
    PredictionWatcher of its predictions; the pipeline is killed and the watcher stopped after
    it. ``watcher.duplicates()``: predictions seen more than once."""
    log = open(work / log_name, "w")
    process = subprocess.Popen(unitless_command(train_cmd(
        bootstrap, topic, work, "--streaming", *runner_args, "--checkpoint-seconds", "10",
        *extra)), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    watcher = PredictionWatcher(bootstrap, f"{topic}-pred")
    watcher.start()
    watcher.log, watcher.pid = log.name, process.pid
    try:
        yield watcher
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # (and the runner it started: Prism outlives it)
        process.wait()
        watcher.stop = True
        watcher.join(5)
        log.close()


def streaming_run(bootstrap, work, n, rates, seconds, client):
    topic, warm = f"live-{client}", 2000
    create_topics(bootstrap, topic, f"{topic}-pred", f"{topic}-dead",
                  append_time=(f"{topic}-pred",))
    out = {"runner": "PrismRunner (--streaming)"}
    with streaming_pipeline(bootstrap, topic, work, f"streaming-{client}.log", "--kafka-client",
                            client) as watcher:
        produce(bootstrap, topic, example_values(warm, seed=2, first_id=0))
        if not watcher.wait_for(warm, 180):
            raise RuntimeError(f"no predictions from the streaming pipeline after 180 s "
                               f"({len(watcher.rows)} of {warm}); log {watcher.log}")
        progress(f"streaming pipeline warm ({warm} predictions)")
        out["burst"] = burst_phase(bootstrap, topic, watcher, warm, n)
        # fixed offered loads: the target's half, and half of what the burst sustained
        first, out["paced"] = warm + n, []
        for rate in rates or [TARGET // 2, int(out["burst"]["examples_per_s_sustained"] / 2)]:
            out["paced"].append(paced_phase(bootstrap, topic, watcher, first, rate, seconds))
            first += out["paced"][-1]["examples"]
        out["duplicates"] = watcher.duplicates()
    return out


GROUPS = [  # (part, path fragment) in order; the first match names a function's part
    ("confluent-kafka (librdkafka)", "confluent_kafka"),
    ("kafka-python producer (predictions sink)", "kafka/producer"),
    ("kafka-python consumer (example source)", "kafka/consumer"),
    ("kafka-python record encoding/decoding", "kafka/record"),
    ("kafka-python client and protocol", "kafka/"),
    ("unitless parse (Arrow JSON, blocks)", "unitless/parse/"),
    ("unitless Kafka DoFns (source, sink)", "unitless/connectors/kafka"),
    ("unitless learner", "unitless/learner"),
    ("unitless pipeline (keyed models, checkpoints)", "unitless/pipelines"),
    ("Apache Beam", "apache_beam"),
    ("JSON encoding (prediction messages)", "json/"),
    ("locks, sockets, other built-ins", "~"),
]


def profile_bounded(bootstrap, work, n):
    """cProfile of a bounded run in this process, own time grouped by module."""
    import cProfile
    import pstats
    from unitless.cli.main import main as unitless_main
    topic = "profiled"
    create_topics(bootstrap, topic, f"{topic}-pred", f"{topic}-dead")
    produce(bootstrap, topic, example_values(n, seed=1))
    out = work / "kafka.prof"
    t = time.time()
    cProfile.runctx("unitless_main(cmd)", {"unitless_main": unitless_main,
                                           "cmd": train_cmd(bootstrap, topic, work)},
                    {}, str(out))
    seconds = time.time() - t
    st = pstats.Stats(str(out))
    total = sum(v[2] for v in st.stats.values())
    groups = {g: 0.0 for g, _ in GROUPS}
    groups["other Python"] = 0.0
    for (path, _, _), v in st.stats.items():
        where = path.replace("\\", "/")
        part = next((g for g, frag in GROUPS if frag in where), "other Python")
        groups[part] += v[2]
    top = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:15]
    return {"client": installed()[0], "examples": n, "seconds": seconds, "total_s": total,
            "groups": sorted(groups.items(), key=lambda kv: -kv[1]),
            "top": [(f"{Path(f[0]).name}:{f[1]}({f[2]})", v[1], v[2], v[3]) for f, v in top]}


def bare_learner(bootstrap, source, target, n, client):
    """The second reference: the product's own per-example work on the same messages, in a
    plain loop without Beam: its Kafka reader (``client``, 8,192 records a poll), polls parsed
    together up to 8,192 messages a block (as the reading step gathers them) with the run's
    learner check, the learner (one model, NAG, logistic, eta = 0.5) and the prediction writer
    (acks=all), flushed every 262,144 predictions and at the end, as a bounded run's are;
    (seconds, predictions)."""
    from unitless.connectors.kafka import KafkaSourceConfig, KafkaTopic, parse_messages
    from unitless.connectors.kafka_clients import Records, open_reader
    from unitless.connectors.sinks import open_sink
    from unitless.pipelines.config import configure, learner_check, new_learner
    from unitless.models.keyed_model import KeyedModel
    from unitless.pipelines.delivery import Delivery  # (its flush rule, imported before the clock)
    url = f"kafka://{bootstrap}/{source}"
    cfg = configure([url], algorithm="nag", loss="logistic", learning_rate=0.5, id_column="id",
                    kafka_client=client)
    topic = KafkaTopic.parse(url, cfg.kafka_settings)
    parse = KafkaSourceConfig(topic, cfg.format, cfg.spec, learner_check(cfg), cfg.chunk_size)
    reader = open_reader(topic, 0, parse.max_records)
    sink = open_sink(f"kafka://{bootstrap}/{target}", "jsonl", "predictions",
                     cfg.kafka_settings)
    sink.producer  # (connected before the clock starts, as the relay's producer is)
    model = KeyedModel("model", new_learner(cfg))
    pending, read, predicted = [], 0, 0

    def learn():
        nonlocal pending, predicted
        records = pending[0] if len(pending) == 1 else Records.concat(pending)
        block, _ = parse_messages(parse, 0, records)
        pending = []
        table = model.learn_block(block)[0]
        sink.write(table)
        predicted += table.num_rows
        if sink.rows >= Delivery.FLUSH_ROWS:
            sink.flush()

    reader.seek(0)
    t = time.time()
    while read < n and time.time() - t < 600:
        records = reader.poll(500)
        if records and pending and sum(map(len, pending)) + len(records) > parse.max_records:
            learn()
        if records:
            pending.append(records)
            read += len(records)
    if pending:
        learn()
    sink.flush()
    seconds = time.time() - t
    reader.close()
    sink.close()
    return seconds, predicted


def rate(x):
    return fnum(x, 0, sci=False)


def render(data):
    runs = data["clients"]
    fastest_relay = max(r["reference"]["examples_per_s"] for r in runs.values())
    rows = []
    for client, r in runs.items():
        ref, bare, bounded = r["reference"], r.get("bare_learner"), r["bounded"]
        live = r.get("streaming")

        def ratios(per_s):
            return [fnum(per_s / ref["examples_per_s"], 3),
                    fnum(per_s / bare["examples_per_s"], 3) if bare else "—",
                    fnum(per_s / fastest_relay, 3)]
        rows.append([client, "bare relay (consume + produce, no parsing, no learning)", "—",
                     rate(ref["examples_per_s"]), "—", *ratios(ref["examples_per_s"])])
        if bare:
            rows.append([client, "bare learner loop (unitless's reader, parser, learner, "
                         "prediction writer; no Beam)", "—", rate(bare["examples_per_s"]), "—",
                         *ratios(bare["examples_per_s"])])
        rows.append([client, "unitless train, bounded, FnApiRunner", fnum(bounded["wall_s"], 3),
                     rate(bounded["examples_per_s_sustained"]),
                     rate(bounded["examples_per_s_wall"]),
                     *ratios(bounded["examples_per_s_sustained"])])
        if live:
            b = live["burst"]
            rows.append([client, "unitless train --streaming, PrismRunner", fnum(b["wall_s"], 3),
                         rate(b["examples_per_s_sustained"]), "—",
                         *ratios(b["examples_per_s_sustained"])])
    any_run = next(iter(runs.values()))
    body = [f"Target: ≥ {TARGET:,} examples/s with one model key, ≥ 0.7× the faster relay; p99 "
            "latency < 1 s at half the target's load.", "", "## Throughput", "",
            table(["client", "run", "wall s", "examples/s sustained (bounded: first read → "
                   "last prediction appended; streaming: first → last appended)",
                   "examples/s (wall, incl. start-up)", "× its client's relay",
                   "× its client's bare learner loop", "× the faster relay"], rows), "",
            f"Examples: {any_run['bounded']['examples']:,} per run; progressive logistic loss "
            + ", ".join(f"{c} {r['bounded']['progressive_loss']:.6f}" for c, r in runs.items())
            + "; predictions counted "
            + ", ".join(f"{c} {r['bounded']['predictions']:,}" for c, r in runs.items()) + "."]
    paced = [[client, fnum(p["offered_per_s"], 0), fnum(p["achieved_offered_per_s"], 0),
              p["seconds"], p["examples"], p["predictions"], fnum(p["latency_ms_p50"], 1),
              fnum(p["latency_ms_p99"], 1), fnum(p["latency_ms_max"], 1)]
             for client, r in runs.items() if r.get("streaming") for p in r["streaming"]["paced"]]
    if paced:
        body += ["", "## Latency at fixed offered loads (streaming, PrismRunner)", "",
                 table(["client", "offered examples/s", "achieved offered", "seconds",
                        "examples", "predictions", "p50 ms", "p99 ms", "max ms"], paced), "",
                 "Latency = the prediction's LogAppendTime − the example's produce timestamp "
                 "(CreateTime, carried as the prediction's `event_time`). A load above what the "
                 "pipeline sustains queues up, and latency grows with the phase's length. "
                 f"Producer, broker, pipeline and this script share the machine's "
                 f"{os.cpu_count()} cores. Duplicate predictions seen: "
                 + ", ".join(f"{c} {r['streaming']['duplicates']}" for c, r in runs.items()
                             if r.get("streaming")) + "."]
    if data.get("profile"):
        prof = data["profile"]
        body += ["", f"## Where the time goes (bounded run, {prof['client']}, under cProfile)",
                 "", f"`{prof['examples']:,}` examples, {prof['seconds']:.1f} s under the "
                 "profiler. Own time of every function, grouped by where it lives:", "",
                 table(["part", "own s", "% of total"],
                       [[g, fnum(t, 3), f"{100 * t / prof['total_s']:.1f}"]
                        for g, t in prof["groups"]]), "",
                 "Top functions by own time:", "",
                 table(["function", "calls", "own s", "cumulative s"],
                       [[f"`{f}`", c, fnum(t, 3), fnum(ct, 3)] for f, c, t, ct in prof["top"]])]
    return "\n".join(body)


def main():
    args = parse_args(
        __doc__, examples=(int, None, "bounded and burst examples (default 300,000)"),
        rates=(str, None, "offered loads, examples/s, comma-separated (default: half the target, "
               "and half of what the streaming burst sustained)"),
        seconds=(int, None, "length of the fixed-load phase (default 20)"),
        no_streaming=(bool, False, "skip the Prism phase"),
        clients=(str, None, "Kafka clients to measure, comma-separated (default: every "
                 "installed one)"))
    n = args.examples or (20_000 if args.quick else 300_000)
    seconds = args.seconds or (5 if args.quick else 20)
    h = header()
    work = Path(tempfile.mkdtemp(prefix="unitless-kafka-bench-"))
    data = {"clients": {}}
    try:
        with LocalKafka(work / "broker", startup_timeout=120) as kafka:
            bootstrap = kafka.bootstrap_servers
            progress(f"broker at {bootstrap}")
            create_topics(bootstrap, "relay-in")
            produce(bootstrap, "relay-in", example_values(n, seed=1))
            for client in args.clients.split(",") if args.clients else installed():
                run = data["clients"][client] = {}
                create_topics(bootstrap, f"relay-out-{client}")
                s, done = relay(bootstrap, "relay-in", f"relay-out-{client}", n, client)
                run["reference"] = {"examples": done, "seconds": s, "examples_per_s": done / s}
                progress(f"{client} relay: {run['reference']}")
                create_topics(bootstrap, f"bare-out-{client}")
                s, done = bare_learner(bootstrap, "relay-in", f"bare-out-{client}", n, client)
                if done != n:
                    raise RuntimeError(f"bare learner loop: {done} predictions for {n} examples")
                run["bare_learner"] = {"examples": done, "seconds": s,
                                       "examples_per_s": done / s}
                progress(f"{client} bare learner: {run['bare_learner']}")
                run["bounded"] = bounded_run(bootstrap, work, n, client)
                progress(f"{client} bounded: {run['bounded']}")
                if not args.no_streaming:
                    rates = [int(r) for r in args.rates.split(",")] if args.rates else None
                    run["streaming"] = streaming_run(bootstrap, work, n, rates, seconds, client)
            data["profile"] = profile_bounded(bootstrap, work, min(n, 100_000))
            progress(f"profile: {data['profile']['groups']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_results(result_name("kafka_e2e", args.quick),
                  "Kafka end to end: examples topic → unitless train → predictions topic",
                  h, render(data), data)


if __name__ == "__main__":
    main()
