"""Learning throughput: our ``learn()`` batch call vs Vowpal Wabbit reading its binary cache.

(a) 1M dense examples with 21 features (the artificial generator of ``artificial.py``) + bias;
(b) 1M sparse examples with 40 non-zeros drawn from 2^18 indices (pre-hashed, values on scales
2⁻¹⁰ … 2¹⁰) + bias. Logistic loss, labels −1/+1.

Ours: NAG, ScInOL2, coin and mix, ``learn(state, batch)`` on consecutive batches of 65,536
examples, fresh state, numba compilation excluded by a warm-up call; examples/s = examples /
wall time of the ``learn()`` calls (validation included). The compiled kernel alone (``run_batch``, no
validation) and our input paths (``dense_batch``, ``make_batch``, the VW-text and CSV parsers of
``unitless.parse``) are timed too.

VW: the wheel ships no ``vw`` binary, so VW's own C++ driver is run through the Python bindings
(``Workspace("--cache_file C --passes 1 ...")`` runs the same parser thread + learner as the
``vw`` command). First the text file is turned into a cache (``-d FILE --cache_file C``, also
timed: VW's text path), then passes that read only the cache are timed, with VW's default update,
``--loss_function logistic -b 18 --quiet`` and no other output.

    .venv/bin/python benchmarks/learner/throughput.py [--quick] [--n N] [--repeats R]
"""
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.data import artificial_stream  # noqa: E402
from common.machine import header, IdleBudget, measure  # noqa: E402
from common.paths import TMP  # noqa: E402
from common.results import result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress  # noqa: E402
from common.vw import run_vw_in_child, vw_stride, write_vw  # noqa: E402

from unitless.learner import learn, make_batch, new_state  # noqa: E402
from unitless.learner.kernel import run_batch  # noqa: E402
from unitless.learner.losses import LOSS_CODES  # noqa: E402

BITS = 18
VW_CONSTANT = 11650396 & ((1 << BITS) - 1)  # where VW puts its constant feature with -b 18
NNZ = 40
ALGORITHMS = ("nag", "scinol2", "coin", "mix")
DIMS = {"dense": 22, "sparse": 1 << BITS}


def sparse_data(n, rng):
    """40 indices per row uniform in 2^18 (the bias slot excluded), values N(0, σ_j²) with a
    per-feature scale σ_j = 2^u, u ~ U(−10, 10); labels from a sparse logistic model."""
    dim = 1 << BITS
    scale = 2.0 ** rng.uniform(-10, 10, dim)
    w_star = rng.choice([-1.0, 1.0], dim) / scale / np.sqrt(NNZ)
    idx = rng.integers(0, dim - 1, (n, NNZ))
    idx[idx >= VW_CONSTANT] += 1  # keep the bias slot for the bias
    val = rng.standard_normal((n, NNZ)) * scale[idx]
    margin = np.einsum("ij,ij->i", val, w_star[idx])
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-margin)), 1.0, -1.0)
    return idx, val, y


def csr_with_bias(idx, val, bias_index):
    """CSR arrays of rows idx/val (n × k) with a bias feature (value 1) appended to each row."""
    n, k = idx.shape
    indices = np.hstack([idx, np.full((n, 1), bias_index)]).reshape(-1)
    values = np.hstack([val, np.ones((n, 1))]).reshape(-1)
    indptr = np.arange(0, n * (k + 1) + 1, k + 1, dtype=np.int64)
    return indptr, indices, values


def time_kernel(algorithm, dim, slices):
    """examples/s of the compiled kernel alone: no validation, no label mapping, preallocated
    outputs."""
    state = new_state(algorithm, dim, "logistic")
    hp, code = state.hp_array(), LOSS_CODES["logistic"]
    outs = [(np.empty((len(b), 1)), np.empty(len(b))) for b in slices]
    learned = [np.zeros(len(b), dtype=np.bool_) for b in slices]  # (none served)
    slots = [state.map_features(b.indices) for b in slices]  # each feature's slot, untimed

    def kernel():
        for b, at, served, (scores, losses) in zip(slices, slots, learned, outs):
            run_batch(state.spec.code, state.V, state.M, state.S, hp, code, 0.5,
                      b.indptr, at, b.values, b.labels, b.weights, served, scores, losses)
    return sum(len(b) for b in slices) / measure(kernel).wall, state


def time_ours(algorithm, batch, dim, batch_size, repeats, idle):
    """Median/min/max examples/s of learn() over the whole stream, fresh state each repeat."""
    learn(new_state(algorithm, dim, "logistic"), batch.slice(0, min(1000, len(batch))))  # compile
    n = len(batch)
    slices = [batch.slice(a, min(a + batch_size, n)) for a in range(0, n, batch_size)]
    runs, kernel_rates = [], []
    for _ in range(repeats):
        state = new_state(algorithm, dim, "logistic")
        runs.append(measure(lambda: [learn(state, b) for b in slices], idle))
        rate, state = time_kernel(algorithm, dim, slices)
        kernel_rates.append(rate)
    rates = [n / r.wall for r in runs]
    state_bytes = sum(a.nbytes for a in (state.V, state.M, state.S, state.slot_index,
                                         state.table))
    return {"examples_per_s": float(np.median(rates)), "min": float(min(rates)),
            "max": float(max(rates)), "kernel_examples_per_s": float(np.median(kernel_rates)),
            "cpu_seconds": float(np.median([r.cpu for r in runs])), "repeats": repeats,
            "other_load_cores": float(np.median([r.other for r in runs])), "all_rates": rates,
            "state_bytes": int(state_bytes), "features_kept": int(state.n_slots),
            "state_bytes_per_feature": state_bytes / state.n_slots,
            "state_vectors": list(state.spec.vectors)}


def time_vw(text_path, n, repeats, idle):
    """VW: the cache made from the text file (timed: VW's text path), then timed cache passes,
    each in a fresh process; and the start-up + teardown of a Workspace with no data."""
    cache = Path(str(text_path) + ".cache")
    cache.unlink(missing_ok=True)
    common = f"--loss_function logistic -b {BITS} --quiet"
    text_seconds, text_cpu, _ = run_vw_in_child(f"-d {text_path} --cache_file {cache} {common}")
    os.sync()
    # measure() also counts the child's Python start-up as "own": it is this script's, not others'
    runs = [measure(lambda: run_vw_in_child(f"--cache_file {cache} --passes 1 {common}"), idle)
            for _ in range(repeats)]
    rates = [n / r.value[0] for r in runs]  # the child's own wall time of Workspace + finish
    empty = TMP / "empty.vw"
    empty.write_text("")
    startup, _, _ = run_vw_in_child(f"-d {empty} {common}")
    return {"examples_per_s": float(np.median(rates)), "min": float(min(rates)),
            "max": float(max(rates)), "cpu_seconds": float(np.median([r.value[1] for r in runs])),
            "other_load_cores": float(np.median([r.other for r in runs])), "all_rates": rates,
            "text_pass_examples_per_s": n / text_seconds, "text_pass_cpu_seconds": text_cpu,
            "startup_seconds": startup, "cache_bytes": cache.stat().st_size,
            "text_bytes": Path(text_path).stat().st_size, "repeats": repeats,
            "args_cache_pass": f"--cache_file {cache.name} --passes 1 {common}",
            "args_cache_creation": f"-d {Path(text_path).name} --cache_file {cache.name} {common}",
            "state_bytes_per_feature": 4 * 4, "state_note":
                "2^b weight slots × stride 4 float32 (w, adaptive Σg², normalizer max abs x, 4th slot) × 4 bytes"}


def rate(n, fn):
    """examples/s of fn() over n examples."""
    return n / measure(fn).wall


def time_batch_paths(D):
    """Our numpy → Batch paths and check_batch (the validation inside learn()), examples/s."""
    from unitless.learner import check_batch, dense_batch
    X, y, ys = D["X"], D["y"], D["ys"]
    csr = csr_with_bias(D["idx"], D["val"], VW_CONSTANT)
    out = {f"dense_batch (numpy {len(y):,}×21 → Batch)": rate(len(y), lambda: dense_batch(X, y)),
           "make_batch (pre-hashed CSR arrays → Batch, incl. adding the bias column)": rate(
               len(ys), lambda: make_batch(*csr_with_bias(D["idx"], D["val"], VW_CONSTANT), ys))}
    for name, batch in (("dense", dense_batch(X, y)), ("sparse", make_batch(*csr, ys))):
        state = new_state("nag", DIMS[name], "logistic")
        out[f"check_batch alone ({name}; the validation inside learn())"] = rate(len(batch), lambda: [
            check_batch(state, batch.slice(a, min(a + 65_536, len(batch))))
            for a in range(0, len(batch), 65_536)])
    return out


def time_parsers(D, sample):
    """The pipeline's text parsers (VW text, CSV) on the first `sample` lines, examples/s."""
    from unitless.parse.csv import parse_csv
    from unitless.parse.spec import RecordSpec
    from unitless.parse.vw import parse_vw
    out = {}
    for name in ("dense", "sparse"):
        path = D[f"{name}_vw"]
        with open(path) as f:
            lines = list(enumerate(next(f).rstrip("\n") for _ in range(sample)))
        parsed = measure(lambda: parse_vw(RecordSpec(bits=BITS), str(path), lines))
        assert not parsed.value[1] and len(parsed.value[0]) == sample
        out[f"parse_vw (VW text → block, {name}, {sample:,} lines, names hashed)"] = sample / parsed.wall
    X, y = D["X"][:sample], D["y"][:sample]
    cols = [f"x{j}" for j in range(X.shape[1])] + ["label"]
    lines = list(enumerate(",".join(repr(v) for v in row) + f",{lab:g}" for row, lab in zip(X, y)))
    out[f"parse_csv (CSV text → block, dense, {sample:,} lines, Arrow fast path)"] = rate(
        sample, lambda: parse_csv(RecordSpec(bits=BITS, columns=cols), "csv", lines))
    return out


def make_data(n):
    """Both streams as our batches and as VW text files (same indices and values)."""
    rng = np.random.default_rng(42)
    X, y, _ = artificial_stream(n, rng)
    Xb = np.hstack([X, np.ones((n, 1))])
    idx, val, ys = sparse_data(n, rng)
    D = {"X": X, "y": y, "idx": idx, "val": val, "ys": ys,
         "dense": make_batch(np.arange(0, n * 22 + 1, 22), np.tile(np.arange(22), n),
                             Xb.reshape(-1), y),
         "dense_vw": write_vw(TMP / "throughput_dense.vw", np.arange(0, n * 21 + 1, 21),
                              np.tile(np.arange(21), n), X.reshape(-1), y),
         "sparse": make_batch(*csr_with_bias(idx, val, VW_CONSTANT), ys),
         "sparse_vw": write_vw(TMP / "throughput_sparse.vw", np.arange(0, n * NNZ + 1, NNZ),
                               idx.reshape(-1), val.reshape(-1), ys)}
    os.sync()  # let the written files reach the disk before anything is timed
    progress("data ready")
    return D


def measure_all(D, n, batch, repeats, idle):
    res = {"dense": {}, "sparse": {}}
    for kind in res:
        for alg in ALGORITHMS:
            res[kind][alg] = time_ours(alg, D[kind], DIMS[kind], batch, repeats, idle)
        res[kind]["vw"] = time_vw(D[f"{kind}_vw"], n, repeats, idle)
        progress(f"{kind} timed")
    return res


def _size(nbytes):
    return f"{nbytes / 2**20:.2f} MiB" if nbytes >= 2**20 else f"{nbytes:,} bytes"


def rate_table(res, n, repeats):
    rows = []
    for kind, label in (("dense", f"(a) dense, 21 features + bias, {n:,} examples"),
                        ("sparse", f"(b) sparse, {NNZ} of 2^{BITS} + bias, {n:,} examples")):
        v = res[kind]["vw"]
        for alg in ALGORITHMS:
            o = res[kind][alg]
            o["ratio_vs_vw"] = ratio = o["examples_per_s"] / v["examples_per_s"]
            rows.append([label, f"ours {alg} learn()", f"{o['examples_per_s']:,.0f}",
                         f"{o['min']:,.0f} – {o['max']:,.0f}", f"{o['kernel_examples_per_s']:,.0f}",
                         f"{v['examples_per_s']:,.0f}", f"**{ratio:.2f}**",
                         "yes" if ratio >= 1.0 else "NO", f"{o['other_load_cores']:.2f}"])
        rows.append([label, "VW cache pass", f"{v['examples_per_s']:,.0f}",
                     f"{v['min']:,.0f} – {v['max']:,.0f}", "—", "—", "—", "",
                     f"{v['other_load_cores']:.2f}"])
    return table(["data", "learner", "examples/s (median)", f"range over {repeats} runs",
                  "kernel only (run_batch)", "VW from cache", "ratio ours/VW", "≥ 1.0?",
                  "cores used by other processes while timed (median)"], rows)


def state_table(res, stride):
    rows = []
    for kind, dim in DIMS.items():
        for alg in ALGORITHMS:
            o = res[kind][alg]
            rows.append([kind, f"ours {alg}", f"{o['state_bytes_per_feature']:.1f}",
                         f"{len(o['state_vectors'])} float64 vectors "
                         f"({', '.join(o['state_vectors'])}) × K=1 per slot (room for up to "
                         f"twice the features carried) + slot index and table",
                         f"{_size(o['state_bytes'])} for {o['features_kept']:,} of {dim:,} "
                         f"features carried"])
        rows.append([kind, "VW default", f"{4 * (stride or 4)}",
                     f"stride {stride} float32 (w, Σg², max abs x, 4th slot)",
                     f"{_size((1 << BITS) * 4 * (stride or 4))} for 2^{BITS} slots"])
    return table(["data", "learner", "bytes per feature carried", "layout", "total"], rows)


def vw_table(res, n):
    rows = []
    for kind in DIMS:
        v = res[kind]["vw"]
        rows.append([kind, f"{v['text_pass_examples_per_s']:,.0f}", f"{v['examples_per_s']:,.0f}",
                     f"{v['cpu_seconds']:.2f} s CPU for {n / v['examples_per_s']:.2f} s wall",
                     f"{v['startup_seconds'] * 1000:.0f} ms",
                     f"{v['text_bytes'] / 2**20:.0f} MiB / {v['cache_bytes'] / 2**20:.0f} MiB"])
    return table(["data", "VW text pass (parse + cache write + learn), ex/s",
                  "VW cache pass, ex/s", "VW CPU time (all threads) in a cache pass",
                  "VW startup+teardown, no data", "text / cache size"], rows)


def cpu_table(res, n):
    """Each learner's CPU time, and as a multiple of ScInOL2's over the same examples."""
    return table(["data", "ours", "CPU time of the learn() calls", "÷ scinol2's"],
                 [[kind, alg, f"{res[kind][alg]['cpu_seconds']:.2f} s CPU for "
                   f"{n / res[kind][alg]['examples_per_s']:.2f} s wall",
                   f"{res[kind][alg]['cpu_seconds'] / res[kind]['scinol2']['cpu_seconds']:.2f}"]
                  for kind in DIMS for alg in ALGORITHMS])


def report(res, inputs, n, args, repeats, stride, idle):
    main_md = rate_table(res, n, repeats)
    v = res["dense"]["vw"]
    return f"""
Ours: `learn(state, batch)` over consecutive batches of {args.batch:,} examples (one thread),
fresh state per run, numba compilation excluded by a warm-up call; "kernel only" calls the
compiled `run_batch` on the same batches without `learn()`'s validation (`check_batch`), label
mapping and output allocation. VW: VW's C++ driver via the Python bindings (`Workspace` with
`--cache_file`/`--passes` runs `run_parser`, the same parser thread + learner as the command),
each run in a fresh Python process like a command: cache made first
(`{v['args_cache_creation']}`), then timed passes reading only the cache
(`{v['args_cache_pass']}`; VW's default update = adaptive + normalized + invariant), wall time
of the whole `Workspace(...)` + `finish()`. Both learn the same examples: VW text files use
integer feature names in the default namespace, which VW maps to those indices unhashed, and our
sparse batches put the bias at VW's constant slot ({VW_CONSTANT}) for -b {BITS}. Median of
{repeats} runs; before each timed run the script waited for other processes to go quiet
(≤ {idle.per_run:.0f} s per run, {idle.used:.0f} s of a {idle.max_wait:.0f} s budget used), and
the last column says how busy they kept the machine while it was timed (VW needs both cores:
parser + learner).

## Examples per second

{main_md}

## Learner state per feature

{state_table(res, stride)}

## VW detail

{vw_table(res, n)}

VW's driver runs its parser in a second thread (this machine has {os.cpu_count()} cores), so its
CPU time can exceed its wall time; ours is one thread:

{cpu_table(res, n)}

`mix` runs coin and three NAG learners on every example (issue #62 asks for at most 3× ScInOL2's
CPU): on the sparse rows its 12 state vectors per feature are read from memory far apart, once
each, where ScInOL2 reads 5.

## Our input paths

{table(["input path (ours)", "examples/s"],
       [[k, f"{v:,.0f}" if isinstance(v, float) else v] for k, v in inputs.items()])}

The text parsers are the pipeline's (`unitless.parse`), pure Python per record, and
are not part of the learner call timed above; VW's corresponding figure is its text pass.
"""


def main():
    args = parse_args(__doc__, n=(int, None), batch=(int, 65_536), repeats=(int, None), wait_idle=(
        float, None, "total seconds the script may spend waiting, before timed runs (≤ 30 s each), "
        "for other processes to use < 0.25 cores (default 180; 0 with --quick)"))
    idle = IdleBudget(args.wait_idle if args.wait_idle is not None else (0.0 if args.quick else 180.0))
    h = header()
    n = args.n or (100_000 if args.quick else 1_000_000)
    repeats = args.repeats or (1 if args.quick else 5)
    D = make_data(n)
    res = measure_all(D, n, args.batch, repeats, idle)
    stride = vw_stride(BITS)
    inputs = {**time_batch_paths(D), **time_parsers(D, 20_000 if args.quick else 50_000)}
    body = report(res, inputs, n, args, repeats, stride, idle)
    out = {"setup": {"n": n, "batch": args.batch, "repeats": repeats, "bits": BITS, "nnz": NNZ,
                     "vw_constant_slot": VW_CONSTANT, "vw_stride": stride,
                     "wait_idle_max_s": idle.max_wait, "waits": idle.waits},
           "results": res, "input_paths": inputs}
    write_results(result_name("throughput", args.quick),
                  "Throughput: our learn() vs VW from its binary cache", h, body, out)
    for p in (D["dense_vw"], D["sparse_vw"]):  # large scratch files
        p.unlink(missing_ok=True)
        Path(str(p) + ".cache").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
