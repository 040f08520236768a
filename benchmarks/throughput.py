"""Learning throughput: our ``learn()`` batch call vs Vowpal Wabbit reading its binary cache.

(a) 1M dense examples with 21 features (the artificial generator of ``artificial.py``) + bias;
(b) 1M sparse examples with 40 non-zeros drawn from 2^18 indices (pre-hashed, values on scales
2⁻¹⁰ … 2¹⁰) + bias. Logistic loss, labels −1/+1.

Ours: NAG and ScInOL2, ``learn(state, batch)`` on consecutive batches of 65,536 examples, fresh
state, numba compilation excluded by a warm-up call; examples/s = examples / wall time of the
``learn()`` calls (validation included). The compiled kernel alone (``run_batch``, no
validation) and our input paths (``dense_batch``, ``make_batch``, the VW-text and CSV parsers of
``unitless.connectors.formats``) are timed too.

VW: the wheel ships no ``vw`` binary, so VW's own C++ driver is run through the Python bindings
(``Workspace("--cache_file C --passes 1 ...")`` runs the same parser thread + learner as the
``vw`` command). First the text file is turned into a cache (``-d FILE --cache_file C``, also
timed: VW's text path), then passes that read only the cache are timed, with VW's default update,
``--loss_function logistic -b 18 --quiet`` and no other output.

    .venv/bin/python benchmarks/throughput.py [--quick] [--n N] [--repeats R]
"""
import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (TMP, OtherLoad, artificial_data, artificial_weights, header,  # noqa: E402
                     table, wait_until_idle, write_results, write_vw)

from unitless.learner import learn, make_batch, new_state  # noqa: E402
from unitless.learner.kernel import run_batch  # noqa: E402
from unitless.learner.losses import LOSS_CODES  # noqa: E402

BITS = 18
VW_CONSTANT = 11650396 & ((1 << BITS) - 1)  # where VW puts its constant feature with -b 18
NNZ = 40
ALGORITHMS = ("nag", "scinol2")


def dense_data(n, rng):
    w = artificial_weights(rng)
    X, y = artificial_data(rng, n, w)
    return X, y


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


WAIT = {"max_wait": 0.0, "waits": []}
PER_RUN_WAIT = 30.0


def settle():
    """Before each timed run: wait (≤ 30 s, and ≤ what is left of the --wait-idle budget) for
    other processes to go quiet."""
    left = WAIT["max_wait"] - sum(w for _, w in WAIT["waits"])
    if left > 0:
        load, waited = wait_until_idle(min(PER_RUN_WAIT, left))
        WAIT["waits"].append((round(load, 2), waited))


def time_ours(algorithm, batch, dim, batch_size, repeats):
    """Median/min/max examples/s of learn() over the whole stream, fresh state each repeat."""
    warm = new_state(algorithm, dim, "logistic")
    learn(warm, batch.slice(0, min(1000, len(batch))))  # compile (or load the numba cache)
    n = len(batch)
    slices = [batch.slice(a, min(a + batch_size, n)) for a in range(0, n, batch_size)]
    rates, kernel_rates, cpu, others = [], [], [], []
    for _ in range(repeats):
        state = new_state(algorithm, dim, "logistic")
        settle()
        with OtherLoad() as m:
            t, c = time.perf_counter(), time.process_time()
            for b in slices:
                learn(state, b)
            rates.append(n / (time.perf_counter() - t))
            cpu.append(time.process_time() - c)
        others.append(m.cores)
        # the compiled kernel alone: no validation, no label mapping, preallocated outputs
        state = new_state(algorithm, dim, "logistic")
        hp, code = state.hp_array(), LOSS_CODES["logistic"]
        outs = [(np.empty((len(b), 1)), np.empty(len(b))) for b in slices]
        t = time.perf_counter()
        for b, (scores, losses) in zip(slices, outs):
            run_batch(state.spec.code, state.V, state.M, state.S, hp, code, 0.5,
                      b.indptr, b.indices, b.values, b.labels, b.weights, scores, losses)
        kernel_rates.append(n / (time.perf_counter() - t))
    state_bytes = state.V.nbytes + state.M.nbytes + state.S.nbytes
    return {"examples_per_s": float(np.median(rates)), "min": float(min(rates)),
            "max": float(max(rates)), "kernel_examples_per_s": float(np.median(kernel_rates)),
            "cpu_seconds": float(np.median(cpu)), "repeats": repeats,
            "other_load_cores": float(np.median(others)), "all_rates": rates,
            "state_bytes": int(state_bytes), "state_bytes_per_feature": state_bytes / dim,
            "state_vectors": list(state.spec.vectors)}


_VW_CHILD = """
import json, resource, sys, time
from vowpalwabbit import Workspace
r0 = resource.getrusage(resource.RUSAGE_SELF)
t = time.perf_counter()
ws = Workspace(sys.argv[1], enable_logging=True)
ws.finish()
wall = time.perf_counter() - t
r1 = resource.getrusage(resource.RUSAGE_SELF)
log = "\\n".join(ws.get_log())
print(json.dumps({"wall": wall, "cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, "log": log}))
"""


def vw_in_child(args):
    """One VW run in a fresh Python process (as the `vw` command would run): (wall s, CPU s of
    all its threads, log). Wall covers Workspace(...) + finish() only."""
    import json
    import subprocess
    r = subprocess.run([sys.executable, "-c", _VW_CHILD, args], capture_output=True, text=True,
                       check=True)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["wall"], out["cpu"], out["log"]


def time_vw(text_path, n, repeats):
    cache = Path(str(text_path) + ".cache")
    if cache.exists():
        cache.unlink()
    common = f"--loss_function logistic -b {BITS} --quiet"
    text_seconds, text_cpu, _ = vw_in_child(f"-d {text_path} --cache_file {cache} {common}")
    os.sync()
    rates, cpu, others = [], [], []
    for _ in range(repeats):
        settle()
        with OtherLoad() as m:
            seconds, c, _ = vw_in_child(f"--cache_file {cache} --passes 1 {common}")
        # m also counts the child's Python start-up as "own"; it is this script's, not others'
        cpu.append(c)
        rates.append(n / seconds)
        others.append(m.cores)
    # startup + teardown cost of a Workspace with this model size, no examples
    empty = TMP / "empty.vw"
    empty.write_text("")
    startup, _, _ = vw_in_child(f"-d {empty} {common}")
    return {"examples_per_s": float(np.median(rates)), "min": float(min(rates)),
            "max": float(max(rates)), "cpu_seconds": float(np.median(cpu)),
            "other_load_cores": float(np.median(others)), "all_rates": rates,
            "text_pass_examples_per_s": n / text_seconds, "text_pass_cpu_seconds": text_cpu,
            "startup_seconds": startup, "cache_bytes": cache.stat().st_size,
            "text_bytes": Path(text_path).stat().st_size, "repeats": repeats,
            "args_cache_pass": f"--cache_file {cache.name} --passes 1 {common}",
            "args_cache_creation": f"-d {Path(text_path).name} --cache_file {cache.name} {common}",
            "state_bytes_per_feature": 4 * 4, "state_note":
                "2^b weight slots × stride 4 float32 (w, adaptive Σg², normalizer max abs x, 4th slot) × 4 bytes"}


def vw_stride():
    """Stride (floats per weight slot) of VW's default update, read from the bindings."""
    try:
        from vowpalwabbit import Workspace
        ws = Workspace(f"--quiet -b {BITS} --loss_function logistic")
        ex = ws.parse("1 | 0:1")
        stride = ex.stride
        ws.finish_example(ex)
        ws.finish()
        return int(stride)
    except Exception:
        return None


def time_input_paths(X, y, idx, val, ys, dense_vw, sparse_vw, sample):
    """Our input paths (examples/s): numpy → Batch, and text → Batch."""
    from unitless.learner import dense_batch
    out = {}
    t = time.perf_counter()
    dense_batch(X, y)
    out[f"dense_batch (numpy {len(y):,}×21 → Batch)"] = len(y) / (time.perf_counter() - t)
    t = time.perf_counter()
    indptr, indices, values = csr_with_bias(idx, val, VW_CONSTANT)
    make_batch(indptr, indices, values, ys)
    out["make_batch (pre-hashed CSR arrays → Batch, incl. adding the bias column)"] = \
        len(ys) / (time.perf_counter() - t)
    from unitless.learner import check_batch
    for name, batch, dim in (("dense", dense_batch(X, y), 22), ("sparse", make_batch(
            indptr, indices, values, ys), 1 << BITS)):
        state = new_state("nag", dim, "logistic")
        t = time.perf_counter()
        for a in range(0, len(batch), 65_536):
            check_batch(state, batch.slice(a, min(a + 65_536, len(batch))))
        out[f"check_batch alone ({name}; the validation inside learn())"] = \
            len(batch) / (time.perf_counter() - t)
    try:
        from unitless.connectors.formats import RecordSpec, parse_csv, parse_vw
    except Exception as e:  # the connectors are not part of the learner library
        out["text parsers"] = f"not timed: {type(e).__name__}: {e}"
        return out
    for name, path in (("dense", dense_vw), ("sparse", sparse_vw)):
        with open(path) as f:
            lines = [next(f).rstrip("\n") for _ in range(sample)]
        t = time.perf_counter()
        block, dead = parse_vw(RecordSpec(bits=BITS), str(path), list(enumerate(lines)))
        rate = sample / (time.perf_counter() - t)
        assert not dead and len(block) == sample
        out[f"parse_vw (VW text → block, {name}, {sample:,} lines, names hashed)"] = rate
    cols = [f"x{j}" for j in range(X.shape[1])] + ["label"]
    lines = [",".join(repr(v) for v in row) + f",{lab:g}" for row, lab in zip(X[:sample], y[:sample])]
    t = time.perf_counter()
    block, dead = parse_csv(RecordSpec(bits=BITS, columns=cols), "csv", list(enumerate(lines)))
    out[f"parse_csv (CSV text → block, dense, {sample:,} lines, Arrow fast path)"] = \
        sample / (time.perf_counter() - t)
    return out


def _size(nbytes):
    return f"{nbytes / 2**20:.2f} MiB" if nbytes >= 2**20 else f"{nbytes:,} bytes"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--batch", type=int, default=65_536)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--wait-idle", type=float, default=None,
                    help="total seconds the script may spend waiting, before timed runs (≤ 30 s "
                         "each), for other processes to use < 0.25 cores (default 180; 0 with --quick)")
    args = ap.parse_args()
    WAIT["max_wait"] = args.wait_idle if args.wait_idle is not None else (0.0 if args.quick else 180.0)
    started = time.time()
    h = header()
    n = args.n or (100_000 if args.quick else 1_000_000)
    repeats = args.repeats or (1 if args.quick else 5)
    rng = np.random.default_rng(42)
    TMP.mkdir(parents=True, exist_ok=True)

    # ---- data, in both forms
    X, y = dense_data(n, rng)
    Xb = np.hstack([X, np.ones((n, 1))])
    dense = make_batch(np.arange(0, n * 22 + 1, 22), np.tile(np.arange(22), n), Xb.reshape(-1), y)
    dense_vw = write_vw(TMP / "throughput_dense.vw", np.arange(0, n * 21 + 1, 21),
                        np.tile(np.arange(21), n), X.reshape(-1), y)
    idx, val, ys = sparse_data(n, rng)
    sparse = make_batch(*csr_with_bias(idx, val, VW_CONSTANT), ys)
    indptr = np.arange(0, n * NNZ + 1, NNZ)
    sparse_vw = write_vw(TMP / "throughput_sparse.vw", indptr, idx.reshape(-1), val.reshape(-1), ys)
    os.sync()  # let the written files reach the disk before anything is timed
    print(f"data ready ({time.time() - started:.0f} s)", flush=True)

    # ---- measurements
    res = {"dense": {}, "sparse": {}}
    for kind, batch, dim, path in (("dense", dense, 22, dense_vw),
                                   ("sparse", sparse, 1 << BITS, sparse_vw)):
        for alg in ALGORITHMS:
            res[kind][alg] = time_ours(alg, batch, dim, args.batch, repeats)
        res[kind]["vw"] = time_vw(path, n, repeats)
        print(f"{kind} timed ({time.time() - started:.0f} s)", flush=True)
    stride = vw_stride()
    inputs = time_input_paths(X, y, idx, val, ys, dense_vw, sparse_vw,
                              sample=20_000 if args.quick else 50_000)

    # ---- report
    rows = []
    for kind, label in (("dense", f"(a) dense, 21 features + bias, {n:,} examples"),
                        ("sparse", f"(b) sparse, {NNZ} of 2^{BITS} + bias, {n:,} examples")):
        v = res[kind]["vw"]
        for alg in ALGORITHMS:
            o = res[kind][alg]
            ratio = o["examples_per_s"] / v["examples_per_s"]
            rows.append([label, f"ours {alg} learn()", f"{o['examples_per_s']:,.0f}",
                         f"{o['min']:,.0f} – {o['max']:,.0f}", f"{o['kernel_examples_per_s']:,.0f}",
                         f"{v['examples_per_s']:,.0f}", f"**{ratio:.2f}**",
                         "yes" if ratio >= 1.0 else "NO", f"{o['other_load_cores']:.2f}"])
            o["ratio_vs_vw"] = ratio
        rows.append([label, "VW cache pass", f"{v['examples_per_s']:,.0f}",
                     f"{v['min']:,.0f} – {v['max']:,.0f}", "—", "—", "—", "",
                     f"{v['other_load_cores']:.2f}"])
    main_md = table(["data", "learner", "examples/s (median)", f"range over {repeats} runs",
                     "kernel only (run_batch)", "VW from cache", "ratio ours/VW", "≥ 1.0?",
                     "cores used by other processes while timed (median)"], rows)
    state_rows = []
    for kind, dim in (("dense", 22), ("sparse", 1 << BITS)):
        for alg in ALGORITHMS:
            o = res[kind][alg]
            state_rows.append([kind, f"ours {alg}", f"{o['state_bytes_per_feature']:.1f}",
                               f"{len(o['state_vectors'])} float64 vectors "
                               f"({', '.join(o['state_vectors'])}) × K=1",
                               f"{_size(o['state_bytes'])} for dim {dim:,}"])
        state_rows.append([kind, "VW default", f"{4 * (stride or 4)}",
                           f"stride {stride} float32 (w, Σg², max abs x, 4th slot)",
                           f"{_size((1 << BITS) * 4 * (stride or 4))} for 2^{BITS} slots"])
    state_md = table(["data", "learner", "bytes per feature", "layout", "total"], state_rows)
    vw_rows = [[kind, f"{res[kind]['vw']['text_pass_examples_per_s']:,.0f}",
                f"{res[kind]['vw']['examples_per_s']:,.0f}",
                f"{res[kind]['vw']['cpu_seconds']:.2f} s CPU for "
                f"{n / res[kind]['vw']['examples_per_s']:.2f} s wall",
                f"{res[kind]['vw']['startup_seconds'] * 1000:.0f} ms",
                f"{res[kind]['vw']['text_bytes'] / 2**20:.0f} MiB / {res[kind]['vw']['cache_bytes'] / 2**20:.0f} MiB"]
               for kind in ("dense", "sparse")]
    vw_md = table(["data", "VW text pass (parse + cache write + learn), ex/s",
                   "VW cache pass, ex/s", "VW CPU time (all threads) in a cache pass",
                   "VW startup+teardown, no data", "text / cache size"], vw_rows)
    cpu_rows = [[kind, alg, f"{res[kind][alg]['cpu_seconds']:.2f} s CPU for "
                 f"{n / res[kind][alg]['examples_per_s']:.2f} s wall"]
                for kind in ("dense", "sparse") for alg in ALGORITHMS]
    cpu_md = table(["data", "ours", "CPU time of the learn() calls"], cpu_rows)
    input_md = table(["input path (ours)", "examples/s"],
                     [[k, f"{v:,.0f}" if isinstance(v, float) else v] for k, v in inputs.items()])
    body = f"""
Ours: `learn(state, batch)` over consecutive batches of {args.batch:,} examples (one thread),
fresh state per run, numba compilation excluded by a warm-up call; "kernel only" calls the
compiled `run_batch` on the same batches without `learn()`'s validation (`check_batch`), label
mapping and output allocation. VW: VW's C++ driver via the Python bindings (the wheel ships no
`vw` binary; `Workspace` with `--cache_file`/`--passes` runs `run_parser`, the same parser
thread + learner as the command), each run in a fresh Python process like a command: cache made first (`{res['dense']['vw']['args_cache_creation']}`),
then timed passes reading only the cache (`{res['dense']['vw']['args_cache_pass']}`; VW's default
update = adaptive + normalized + invariant), wall time of the whole `Workspace(...)` + `finish()`.
Both learn the same examples: VW text files use integer feature names in the default namespace,
which VW maps to those indices unhashed, and our sparse batches put the bias at VW's constant
slot ({VW_CONSTANT}) for -b {BITS}. Median of {repeats} runs; before each timed run the script
waited for other processes to go quiet (≤ {PER_RUN_WAIT:.0f} s per run, {sum(w for _, w in WAIT['waits']):.0f} s
of a {WAIT['max_wait']:.0f} s budget used), and the last column says
how busy they kept the machine while it was timed (VW needs both cores: parser + learner).

## Examples per second

{main_md}

## Learner state per feature

{state_md}

## VW detail

{vw_md}

VW's driver runs its parser in a second thread (this machine has {os.cpu_count()} cores), so its
CPU time can exceed its wall time; ours is one thread:

{cpu_md}

## Our input paths

{input_md}

The text parsers are the pipeline's (`unitless.connectors.formats`), pure Python per record, and
are not part of the learner call timed above; VW's corresponding figure is its text pass.
"""
    out = {"setup": {"n": n, "batch": args.batch, "repeats": repeats, "bits": BITS, "nnz": NNZ,
                     "vw_constant_slot": VW_CONSTANT, "vw_stride": stride,
                     "wait_idle_max_s": WAIT["max_wait"], "waits": WAIT["waits"]},
           "results": res, "input_paths": inputs}
    name = "throughput_quick" if args.quick else "throughput"
    write_results(name, "Throughput: our learn() vs VW from its binary cache", h, started, body, out)
    for p in (dense_vw, sparse_vw):  # large scratch files
        for q in (p, Path(str(p) + ".cache")):
            if q.exists():
                q.unlink()


if __name__ == "__main__":
    main()
