"""The join keyed by example id as a Beam step (``pipelines/join_buckets.py``, issue #59) at the
scale of issue #59's target: every example waiting at once, on the FnApiRunner, beside the
least any step keyed by bucket pays for holding the same blocks.

Data, made in the pipeline: ``--examples`` served examples of 21 features and 8 model keys in
blocks of 500, one a millisecond of record time, then a label for each, in the same order, all
after the last example: every example waits for its label at once, and with a wait of three
hours each joins. A: ``JoinById`` over ``--buckets`` buckets (each bucket's examples held in
Beam state as its persisted log, answered at the end of the input); B, the reference: the
same blocks split into the same pieces by the same buckets (``ByBucket``) into a stateful step
that only holds them in a bag of Beam state and, at the end of the input, reads them back and
counts their rows. Each run a
process of its own, alternated ``--pairs`` times: wall time, CPU, peak RSS, A/B, and A's
largest value written to state (``state_value_bytes``).

    .venv/bin/python benchmarks/system/join_by_id.py                  # 2,000,000 examples, 2 pairs
    .venv/bin/python benchmarks/system/join_by_id.py --quick          # 100,000, 1 pair

Writes benchmarks/results/join_by_id{.md,.json} (``--quick``: results/tmp/).
"""
import json
import pickle
import sys
from pathlib import Path

import apache_beam as beam
from apache_beam.coders import BytesCoder
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, TimerSpec, on_timer
from apache_beam.transforms.window import GlobalWindow, TimestampedValue
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common.machine import header  # noqa: E402
from common.results import result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress, run_timed  # noqa: E402
from unitless.parse.records import ExampleBlock  # noqa: E402
from unitless.pipelines.join_buckets import JOINED, ByBucket, JoinById  # noqa: E402

BLOCK, FEATURES, KEYS, TICK, WAIT = 500, 21, 8, 0.001, 3 * 3600.0
SOURCES = {"features": ["features/0"], "labels": ["labels/0"]}


def block(number, blocks):
    """Block ``number`` of the stream, stamped by its reading order: features blocks first,
    then the labels of the same examples (``blocks`` of each)."""
    labels, first = number >= blocks, (number % blocks) * BLOCK
    rows = np.arange(first, first + BLOCK)
    ids, keys = pa.array([f"e{i}" for i in rows]), pa.array([f"k{i % KEYS}" for i in rows])
    if labels:
        made = ExampleBlock(
            "labels/0", rows, ids, keys, (rows % 2).astype(np.float64), np.ones(BLOCK),
            np.zeros(BLOCK + 1, np.int64), np.zeros(0, np.int64), np.zeros(0),
            event_times=(rows + blocks * BLOCK) * TICK)
    else:
        rng = np.random.default_rng(number)
        made = ExampleBlock(
            "features/0", rows, ids, keys, np.full(BLOCK, np.nan), np.ones(BLOCK),
            np.arange(BLOCK + 1, dtype=np.int64) * FEATURES,
            np.tile(np.arange(FEATURES, dtype=np.int64), BLOCK), rng.normal(size=BLOCK * FEATURES),
            event_times=rows * TICK, served_scores=rng.random((BLOCK, 1)))
    yield TimestampedValue(("labels" if labels else "features", made), number)


def child(variant, examples, buckets):
    """One run in this process; prints {"rows": answered or held, "largest": bytes}."""
    blocks = examples // BLOCK
    p = beam.Pipeline(runner=FnApiRunner())
    stream = (p | beam.Create(range(2 * blocks)) | beam.FlatMap(block, blocks=blocks))
    inputs = {kind: stream | f"Only {kind}" >> beam.Filter(lambda e, k=kind: e[0] == k)
              | f"Block {kind}" >> beam.Map(lambda e: e[1]) for kind in SOURCES}
    if variant == "JoinById":
        rows = (inputs | JoinById(WAIT, buckets, SOURCES))[JOINED] | beam.Map(
            lambda answer: len(answer[0]))
    else:
        rows = (tuple(inputs[kind] | f"By bucket ({kind})" >> beam.ParDo(ByBucket(kind, buckets))
                      for kind in SOURCES) | beam.Flatten() | beam.ParDo(HeldInBag()))
    _ = rows | beam.CombineGlobally(sum) | beam.Map(lambda n: print(json.dumps({"rows": n})))
    result = p.run()
    result.wait_until_finish()
    sizes = result.metrics().query(MetricsFilter().with_name("state_value_bytes"))
    largest = max((d.committed.max for d in sizes["distributions"]), default=0)
    print(json.dumps({"largest": largest}))


class HeldInBag(beam.DoFn):
    """B's step: each bucket's blocks in a bag of Beam state, read back at the end of the
    input; yields the rows of its labels blocks."""
    BAG = BagStateSpec("blocks", BytesCoder())
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def process(self, element, bag=beam.DoFn.StateParam(BAG), end=beam.DoFn.TimerParam(END)):
        bag.add(pickle.dumps(element[1][1], protocol=pickle.HIGHEST_PROTOCOL))
        end.set(GlobalWindow().max_timestamp())

    @on_timer(END)
    def ended(self, bag=beam.DoFn.StateParam(BAG)):
        blocks = [pickle.loads(data) for data in bag.read()]
        yield sum(len(b) for b in blocks if b.source.startswith("labels"))
        bag.clear()


def main():
    args = parse_args(__doc__, examples=(int, 2_000_000), buckets=(int, 16), pairs=(int, 2),
                      child=(str, ""))
    if args.child:
        return child(args.child, args.examples, args.buckets)
    n = 100_000 if args.quick else args.examples
    pairs = 1 if args.quick else args.pairs
    h = header()
    runs = {"bag": [], "JoinById": []}
    for _ in range(pairs):
        for variant in runs:  # (alternated: the reference first)
            out = run_timed([sys.executable, __file__, "--child", variant, "--examples", str(n),
                             "--buckets", str(args.buckets)])
            got = {k: v for line in out.pop("stdout").splitlines() if line.startswith("{")
                   for k, v in json.loads(line).items()}
            assert got["rows"] == n // BLOCK * BLOCK, (variant, got)
            out.pop("stderr")
            runs[variant].append({**out, **got})
            progress(f"{variant}: {out['wall_s']:.1f} s, {out['cpu_s']:.1f} s of CPU, peak "
                     f"{out['max_rss_mib']:,.0f} MiB")
    data = {"examples": n // BLOCK * BLOCK, "buckets": args.buckets, "runs": runs}
    write_results(result_name("join_by_id", args.quick),
                  "The join keyed by example id as a Beam step, every example waiting", h,
                  render(data), data)


def render(data):
    rows, reference = [], data["runs"]["bag"]
    for variant, runs in data["runs"].items():
        def span(key, fmt="{:,.1f}"):
            values = [r[key] for r in runs]
            return f"{fmt.format(min(values))}–{fmt.format(max(values))}"
        ratios = [r["wall_s"] / b["wall_s"] for r, b in zip(runs, reference)]
        extra = [r["max_rss_mib"] - b["max_rss_mib"] for r, b in zip(runs, reference)]
        rows.append([variant, span("wall_s"), span("cpu_s"), span("max_rss_mib", "{:,.0f}"),
                     f"{min(ratios):.2f}–{max(ratios):.2f}",
                     f"{min(extra):+,.0f}–{max(extra):+,.0f}",
                     span("largest", "{:,.0f}") if variant == "JoinById" else "—"])
    return f"""{data['examples']:,} served examples of 21 features over 8 model keys, in blocks of
500, one a millisecond of record time, then each one's label, all after the last example:
every example waits at once, and each joins (a wait of three hours). FnApiRunner, each run a
process of its own, runs alternated, the ratios taken pair by pair.
`JoinById`: the join keyed by example id over {data['buckets']} buckets
(pipelines/join_buckets.py), answered at the end of the input; `bag`: the same pieces of the
same buckets into a step that only holds them in a bag of Beam state and counts them at the end.

{table(["step", "wall s", "CPU s", "peak RSS MiB", "wall / bag's", "RSS − bag's MiB",
        "largest state value, bytes"], rows)}
"""


if __name__ == "__main__":
    main()
