"""Everything Vowpal Wabbit (VW) for the benchmark scripts: the same examples in VW text, VW's own
driver run through the Python bindings, and its losses, scores and predictions read back.

The ``vowpalwabbit`` wheel ships no ``vw`` binary. ``Workspace("-d FILE ...")`` (or
``--cache_file ... --passes 1``) runs ``run_parser``: the same parser thread + learner loop as the
``vw`` command, with no per-example Python calls; ``python -m vowpalwabbit ARGS`` is the same
driver as a command of its own.
"""
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

from .learners import mean_logistic

@njit(cache=True)
def _put_int(buf, pos, v):
    if v < 0:
        buf[pos] = 45  # '-'
        pos += 1
        v = -v
    if v == 0:
        buf[pos] = 48
        return pos + 1
    n = 0
    tmp = v
    while tmp > 0:
        n += 1
        tmp //= 10
    for j in range(n - 1, -1, -1):
        buf[pos + j] = 48 + v % 10
        v //= 10
    return pos + n


@njit(cache=True)
def _put_float(buf, pos, v):
    """v in scientific notation with 9 significant digits (VW keeps float32: ~7)."""
    if v == math.floor(v) and abs(v) < 1e9:
        return _put_int(buf, pos, np.int64(v))
    if v < 0:
        buf[pos] = 45
        pos += 1
        v = -v
    e = int(math.floor(math.log10(v)))
    m = np.int64(round(v / 10.0 ** e * 1e8))
    if m >= 1000000000:
        m = np.int64(round(v / 10.0 ** (e + 1) * 1e8))
        e += 1
    if m < 100000000:
        m = np.int64(round(v / 10.0 ** (e - 1) * 1e8))
        e -= 1
    digits = np.empty(9, np.int64)
    for j in range(8, -1, -1):
        digits[j] = m % 10
        m //= 10
    buf[pos] = 48 + digits[0]
    buf[pos + 1] = 46  # '.'
    for j in range(1, 9):
        buf[pos + 1 + j] = 48 + digits[j]
    pos += 10
    buf[pos] = 101  # 'e'
    pos += 1
    return _put_int(buf, pos, e)


@njit(cache=True)
def _vw_lines(indptr, indices, values, labels, buf):
    pos = 0
    for n in range(labels.shape[0]):
        pos = _put_float(buf, pos, labels[n])
        buf[pos] = 32
        buf[pos + 1] = 124  # ' |'
        pos += 2
        for j in range(indptr[n], indptr[n + 1]):
            buf[pos] = 32
            pos += 1
            pos = _put_int(buf, pos, indices[j])
            buf[pos] = 58  # ':'
            pos += 1
            pos = _put_float(buf, pos, values[j])
        buf[pos] = 10
        pos += 1
    return pos


def write_vw(path, indptr, indices, values, labels, chunk=200_000):
    """Examples in VW text format, default namespace, integer feature names.

    In VW's default namespace an integer feature name *is* its index (no hashing), so VW sees
    the same feature indices as our batches; VW adds its own constant feature (the bias).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    indptr = np.asarray(indptr, np.int64)
    indices = np.asarray(indices, np.int64)
    values = np.asarray(values, np.float64)
    labels = np.asarray(labels, np.float64)
    with open(path, "wb") as f:
        for a in range(0, labels.shape[0], chunk):
            b = min(a + chunk, labels.shape[0])
            lo, hi = indptr[a], indptr[b]
            buf = np.empty(int((hi - lo) * 30 + (b - a) * 30), np.uint8)
            used = _vw_lines(indptr[a:b + 1] - lo, indices[lo:hi], values[lo:hi], labels[a:b], buf)
            f.write(buf[:used].tobytes())
    return path


def write_vw_dense(path, X, labels):
    """Dense rows (zeros dropped, as our dense_batch does) in VW text format, features 0..d-1."""
    X = np.asarray(X, np.float64)
    rows, cols = np.nonzero(X)
    indptr = np.zeros(X.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=X.shape[0]), out=indptr[1:])
    return write_vw(path, indptr, cols, X[rows, cols], labels)


def run_vw(args):
    """Run VW's own driver in this process: (driver log text, wall s of construct+run+finish)."""
    from vowpalwabbit import Workspace
    t = time.perf_counter()
    ws = Workspace(args, enable_logging=True)
    ws.finish()
    seconds = time.perf_counter() - t
    return "\n".join(ws.get_log()), seconds


_CHILD = """
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


def run_vw_in_child(args):
    """One VW run in a fresh Python process (as the `vw` command would run): (wall s, CPU s of
    all its threads, log). Wall covers Workspace(...) + finish() only."""
    r = subprocess.run([sys.executable, "-c", _CHILD, args], capture_output=True, text=True,
                       check=True)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["wall"], out["cpu"], out["log"]


def vw_stride(bits):
    """Stride (floats per weight slot) of VW's default update, read from the bindings."""
    try:
        from vowpalwabbit import Workspace
        ws = Workspace(f"--quiet -b {bits} --loss_function logistic")
        ex = ws.parse("1 | 0:1")
        stride = ex.stride
        ws.finish_example(ex)
        ws.finish()
        return int(stride)
    except Exception:
        return None


def vw_command(*args):
    """VW's driver as a command of its own (the wheel's entry point)."""
    return [sys.executable, "-m", "vowpalwabbit", *map(str, args)]


def vw_average_loss(log):
    m = re.search(r"average loss = ([-+0-9.eE]+|n\.a\.|nan|inf)", log)
    if not m:
        raise RuntimeError("VW printed no 'average loss':\n" + log[-2000:])
    try:
        return float(m.group(1))
    except ValueError:
        return float("nan")


def vw_examples(log):
    m = re.search(r"number of examples = (\d+)", log)
    return int(m.group(1)) if m else None


def vw_run(path, args="", predictions=None):
    """VW on a text file with extra args (and ``-p predictions``): args, printed average loss,
    examples, seconds."""
    args = f"-d {path} {args}".strip() + (f" -p {predictions}" if predictions else "")
    log, seconds = run_vw(args)
    return {"args": args, "average_loss": vw_average_loss(log), "examples": vw_examples(log),
            "seconds": seconds}


def vw_logistic(path, y, eta=None, with_predictions=False):
    """VW's default update with the logistic loss (labels ±1, -l eta or VW's default 0.5); with
    predictions, its progressive loss recomputed from its pre-update ``-p`` scores."""
    pred = Path(f"{path}.pred") if with_predictions else None
    out = vw_run(path, "--loss_function logistic" + (f" -l {eta}" if eta is not None else ""), pred)
    if pred is not None:
        p = np.loadtxt(pred, ndmin=1)
        out["loss_from_predictions"] = mean_logistic(y, p)
        out["max_abs_prediction"] = float(np.max(np.abs(p)))
    return out


def vw_scores(path, n_classes=1):
    """VW's scores before each update: its ``-p`` file (binary: one raw score a line) or, for
    ``--oaa K``, its ``-r`` file (``1:s1 2:s2 ... K:sK`` a line): an n × K array."""
    if n_classes == 1:
        return np.loadtxt(path, ndmin=1)[:, None]
    with open(path) as f:
        return np.array([[float(t.split(":")[1]) for t in line.split()] for line in f if line.strip()])


def vw_tagged_scores(path, n):
    """A ``-p`` file of tagged examples (``score tag`` a line, the tag an example id 0..n-1):
    the scores in id order."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    p = pacsv.read_csv(str(path), read_options=pacsv.ReadOptions(column_names=["score", "id"]),
                       parse_options=pacsv.ParseOptions(delimiter=" "),
                       convert_options=pacsv.ConvertOptions(column_types={"score": pa.float64(),
                                                                          "id": pa.int64()}))
    scores = np.full(n, np.nan)
    scores[p.column("id").to_numpy()] = p.column("score").to_numpy()
    return scores
