"""Sparse text data end to end: `unitless train` on VW text and on libsvm against Vowpal Wabbit
(VW) on the same examples, and the compiled reader's parse rate alone.

Data: N examples of 40 features each, names drawn Zipf-like (exponent 1.1) from 2^18 (a few hot
names, most rare), or with ``--names uniform`` uniformly from 2^18 (every example touches cold
features: VW's flat weight table costs it one memory access per feature there), each name with
its own scale 10^u, u uniform in [-3, 3] (six orders of magnitude), values written with 6
significant digits; labels ±1 from a logistic model in the unscaled features. Written once as VW
text (``label | f17:0.25 ...``, hashed into 2^24 by both tools) and once as libsvm (``label
18:0.25 ...``). VW reads only its own text format, so VW's time on the VW file is the reference
for both.

Each command runs as a process of its own, alternated A/B/C per repetition:
* VW's own driver: ``python -m vowpalwabbit -d FILE -b 24 --loss_function logistic -p PREDS``
  (its parser thread and learner; the wheel has no ``vw`` executable);
* ``unitless train --format vw|libsvm --bits 24 --loss logistic`` (default learner, FnApiRunner,
  parquet predictions), and on VW text streaming on Prism when ``UNITLESS_PRISM`` names its
  binary (``deploy/prism/build_prism.sh`` prints it).
Every example must be predicted once, with no dead letters.

    .venv/bin/python benchmarks/system/sparse.py [--quick] [--examples N] [--repeats R]
        [--names zipf|uniform]

Writes benchmarks/results/sparse{.md,.json}, with ``--names uniform`` sparse_uniform{.md,.json}
(``--quick``: results/tmp/…_quick.*).
"""
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.machine import header  # noqa: E402
from common.results import fnum, relative_command, result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress, run_timed, scratch, unitless_command  # noqa: E402
from common.vw import vw_average_loss, vw_command, vw_examples  # noqa: E402
from pipeline import append_lines  # noqa: E402

NAMES, FEATURES, BITS = 1 << 18, 40, 24
DRAWS = {  # how an example's names are drawn from 0..NAMES-1, m at a time
    "zipf": lambda rng, m: (rng.zipf(1.1, m) - 1) % NAMES,
    "uniform": lambda rng, m: rng.integers(0, NAMES, m),
}
ABOUT = {"zipf": "Zipf-like over 2^18: a few hot names, most rare",
         "uniform": "drawn uniformly over 2^18: every example touches cold features"}


def write_data(directory, n, draw=DRAWS["zipf"], seed=5, chunk=100_000):
    """The VW text and libsvm files of n examples; (paths, features written)."""
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-3, 3, NAMES)
    weight = rng.normal(0, 1, NAMES)
    paths = {"vw": directory / "data.vw", "libsvm": directory / "data.libsvm"}
    for p in paths.values():
        p.write_text("")
    for a in range(0, n, chunk):
        m = min(chunk, n - a)
        names = draw(rng, m * FEATURES)
        x = rng.normal(0, 1, m * FEATURES)
        margin = (x * weight[names]).reshape(m, FEATURES).sum(axis=1) / np.sqrt(FEATURES)
        y = np.where(rng.random(m) < 1 / (1 + np.exp(-margin)), 1, -1)
        values = _six_digits(x * scale[names])
        labels = pc.cast(pa.array(y), pa.string())
        offsets = pa.array(np.arange(0, m * FEATURES + 1, FEATURES, dtype=np.int32))
        for fmt, prefix, first in (("vw", "f", 0), ("libsvm", "", 1)):
            ids = pc.cast(pa.array(names + first), pa.string())
            tokens = pc.binary_join_element_wise(pa.scalar(prefix), ids, pa.scalar(":"), values,
                                                 "")
            rows = pc.binary_join(pa.ListArray.from_arrays(offsets, tokens), " ")
            head = pc.binary_join_element_wise(labels, pa.scalar(" |" if fmt == "vw" else ""),
                                               "")
            append_lines(paths[fmt], pc.binary_join_element_wise(head, rows, " "))
    return paths


def _six_digits(v):
    """v as text with 6 significant digits, d.ddddde±x (Arrow string array)."""
    e = np.floor(np.log10(np.abs(v))).astype(np.int64)
    m = np.round(np.abs(v) / 10.0 ** (e - 5)).astype(np.int64)
    carry = m >= 1_000_000
    m, e = np.where(carry, m // 10, m), e + carry
    text = [pa.array(np.where(v < 0, "-", "")), _text(m // 100_000), pa.scalar("."),
            pc.utf8_lpad(_text(m % 100_000), 5, "0"), pa.scalar("e"), _text(e)]
    return pc.binary_join_element_wise(*text, "")


def _text(ints):
    return pc.cast(pa.array(ints), pa.string())


def run_ours(work, fmt, path, n, name=None, runner=()):
    from unitless.connectors.files import read_output
    out = work / (name or f"ours_{fmt}")
    shutil.rmtree(out, ignore_errors=True)
    r = run_timed(unitless_command([
        "train", "--input", str(path), "--format", fmt, "--bits", str(BITS), "--loss",
        "logistic", "--predictions", str(out / "predictions"), "--model-dir",
        str(out / "models"), "--dead-letter", str(out / "dead"), *runner]))
    preds, dead = read_output(str(out / "predictions")), read_output(str(out / "dead"))
    if preds is None or preds.num_rows != n or dead is not None:
        raise RuntimeError(f"{fmt}: {0 if preds is None else preds.num_rows} predictions, "
                           f"{0 if dead is None else dead.num_rows} dead letters for {n}")
    r["progressive_loss"] = float(pc.mean(preds.column("loss")).as_py())
    shutil.rmtree(out, ignore_errors=True)
    return r


def run_vw(work, path, n):
    preds = work / "vw.preds"
    r = run_timed(vw_command("-d", path, "-b", BITS, "--loss_function", "logistic", "-p", preds))
    if vw_examples(r["stderr"]) != n:
        raise RuntimeError(f"VW read {vw_examples(r['stderr'])} examples of {n}")
    r["progressive_loss"] = vw_average_loss(r["stderr"])
    preds.unlink()
    return r


def parse_rate(path, fmt, limit_bytes=64 << 20):
    """Features/s of the compiled reader alone (read_file over the first ``limit_bytes`` of the
    file, in this process, after one warm-up pass that compiles)."""
    from unitless.connectors.files import read_file
    from unitless.parse.spec import RecordSpec
    sample = path.parent / f"sample.{fmt}"
    with open(path, "rb") as f:
        data = f.read(limit_bytes)
    sample.write_bytes(data[:data.rfind(b"\n") + 1])
    spec = RecordSpec(bits=BITS)
    rates = []
    for _ in range(4):
        t = time.perf_counter()
        features = sum(len(b.values) - len(b) for b, _ in read_file(str(sample), fmt, spec))
        rates.append(features / (time.perf_counter() - t))
    sample.unlink()
    return max(rates[1:]), features


def _range(rs):
    walls = [r["wall_s"] for r in rs]
    return f"{min(walls):.2f}–{max(walls):.2f}"


def main():
    args = parse_args(__doc__, examples=(int, None), repeats=(int, None), names=(
        str, "zipf", "how names are drawn: " + ", ".join(DRAWS)))
    if args.names not in DRAWS:
        raise SystemExit(f"--names {args.names}: choose one of {', '.join(DRAWS)}")
    n = args.examples or (20_000 if args.quick else 1_000_000)
    repeats = args.repeats or (1 if args.quick else 3)
    h = header()
    runs = {"vw": [], "ours_vw": [], "ours_libsvm": [], "ours_vw_one_line": []}
    # streaming on Prism, where reading and learning run at once (on the FnApiRunner a batch
    # run's stages run one after the other), when a Prism binary is at hand
    prism = os.environ.get("UNITLESS_PRISM")
    if prism:
        runs["ours_vw_prism_streaming"] = []
        on_prism = ("--runner", "PrismRunner", "--prism_location", prism, "--streaming")
    with scratch(None, "sparse_") as work:
        paths = write_data(work, n, DRAWS[args.names])
        one_line = work / "one.vw"
        with open(paths["vw"], "rb") as f:
            one_line.write_bytes(f.readline())
        sizes = {fmt: p.stat().st_size for fmt, p in paths.items()}
        progress(f"data written: {n:,} examples, {sizes['vw'] / 2**20:.0f} MiB of VW text")
        rates = {fmt: parse_rate(p, fmt) for fmt, p in paths.items()}
        for rep in range(repeats):
            runs["vw"].append(run_vw(work, paths["vw"], n))
            for fmt in ("vw", "libsvm"):
                runs[f"ours_{fmt}"].append(run_ours(work, fmt, paths[fmt], n))
            # the fixed cost of a run: Python, Beam, building and starting the pipeline
            runs["ours_vw_one_line"].append(run_ours(work, "vw", one_line, 1, "one"))
            if prism:
                runs["ours_vw_prism_streaming"].append(
                    run_ours(work, "vw", paths["vw"], n, "prism", on_prism))
            progress(f"repetition {rep + 1}: " + ", ".join(
                f"{k} {v[-1]['wall_s']:.1f} s" for k, v in runs.items()))
    vw_walls = [r["wall_s"] for r in runs["vw"]]
    rows = []
    for name, rs in runs.items():
        if name == "ours_vw_one_line":
            continue
        walls = [r["wall_s"] for r in rs]
        ratios = [w / v for w, v in zip(walls, vw_walls)]
        rows.append([name, f"{min(walls):.2f}–{max(walls):.2f}", f"{n / max(walls):,.0f}–"
                     f"{n / min(walls):,.0f}", f"{min(r['cpu_s'] for r in rs):.1f}",
                     f"{max(r['max_rss_mib'] for r in rs):,.0f}",
                     f"{min(ratios):.2f}–{max(ratios):.2f}", fnum(rs[0]["progressive_loss"], 4)])
    commands = "\n".join(f"* {k}: `{relative_command(v[0]['command'])}`" for k, v in runs.items())
    body = f"""
{n:,} examples of {FEATURES} features (names {ABOUT[args.names]}; per-name scales 10^-3…10^3,
6 significant digits), hashed into 2^{BITS}: VW text {sizes['vw'] / 2**20:,.0f} MiB, libsvm
{sizes['libsvm'] / 2**20:,.0f} MiB. {repeats} repetitions, VW and ours alternated; each ratio
is a run's wall time over VW's in the same repetition.

{table(["command", "wall s", "examples/s", "CPU s (min)", "peak RSS MiB", "wall / VW's",
        "progressive loss"], rows)}

A run over a one-line file (the fixed cost: starting Python, importing Beam, building and
running the pipeline, writing the outputs) took {_range(runs["ours_vw_one_line"])} s.

Reading alone (`read_file`: the compiled reader, each buffer parsed on a thread while the one
before is handed on; warm, best of three passes over the first 64 MiB): VW text
{rates['vw'][0] / 1e6:.1f}M features/s, libsvm {rates['libsvm'][0] / 1e6:.1f}M features/s.

Commands:
{commands}
"""
    out = {"examples": n, "repeats": repeats, "names": args.names, "bytes": sizes,
           "parse_features_per_s": {k: v[0] for k, v in rates.items()},
           "runs": {k: [{x: y for x, y in r.items() if x not in ("stdout", "stderr")}
                        for r in v] for k, v in runs.items()}}
    base, title = "sparse", "Sparse text end to end: unitless train against Vowpal Wabbit"
    if args.names != "zipf":
        base, title = f"sparse_{args.names}", f"{title}, names drawn {args.names}ly"
    write_results(result_name(base, args.quick), title, h, body, out)


if __name__ == "__main__":
    main()
