"""Shared pieces of the benchmark scripts: the result header, result files, the data sets and
Vowpal Wabbit (VW) runs.

Nothing here is timed as a test; each script measures its figure in one run and writes
``benchmarks/results/<name>.md`` (markdown) and ``.json`` (and a PNG where there is a plot).
"""
import datetime
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TMP = RESULTS / "tmp"  # git-ignored scratch space (VW text files and caches)
SHUTTLE = Path(os.environ.get("UNITLESS_DATA", ROOT.parent / "shared" / "data")) / "shuttle"
if not SHUTTLE.exists():
    SHUTTLE = Path("/work/shared/data/shuttle")

# The η grid of the slides' artificial experiment.
SLIDES_ETAS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0]


# ----------------------------------------------------------------------------- header and files

def _cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib():
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _version(module):
    try:
        return __import__(module).__version__
    except Exception:  # pragma: no cover - optional packages
        try:
            from importlib.metadata import version
            return version(module)
        except Exception:
            return "not installed"


def _git(*args):
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=20).stdout.strip()
    except Exception:
        return ""


def _busy_jiffies():
    """(busy, total) CPU jiffies of the whole machine since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            parts = [int(x) for x in f.readline().split()[1:]]
        idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
        return sum(parts) - idle, sum(parts)
    except OSError:
        return None


_START = {"jiffies": _busy_jiffies(), "wall": time.time()}


def other_load():
    """Average number of cores kept busy by *other* processes since this script started
    (machine busy time minus this process's and its children's CPU time)."""
    now = _busy_jiffies()
    if now is None or _START["jiffies"] is None:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy = (now[0] - _START["jiffies"][0]) / hz
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    wall = time.time() - _START["wall"]
    return max(busy - own, 0.0) / wall if wall > 0 else None


class OtherLoad:
    """Cores kept busy by other processes while a block runs (``with OtherLoad() as m: ...``,
    then ``m.cores``): machine busy time minus this process's and its waited-for children's."""

    def __enter__(self):
        self.j0, self.t0, self.w0 = _busy_jiffies(), os.times(), time.time()
        return self

    def __exit__(self, *exc):
        j1, t1, wall = _busy_jiffies(), os.times(), time.time() - self.w0
        if self.j0 is None or j1 is None or wall <= 0:
            self.cores = float("nan")
            return False
        busy = (j1[0] - self.j0[0]) / os.sysconf("SC_CLK_TCK")
        own = sum(t1[:4]) - sum(self.t0[:4])
        self.cores = max(busy - own, 0.0) / wall
        return False


def wait_until_idle(max_wait, threshold=0.25, sample=2.0):
    """Wait (up to max_wait s) until other processes use < threshold cores over a sample.
    Returns (their load in the last sample, seconds waited)."""
    waited = 0.0
    while True:
        with OtherLoad() as m:
            time.sleep(sample)
        waited += sample
        if m.cores < threshold or waited >= max_wait:
            return m.cores, waited


def header():
    """What was run, where, with what: goes at the top of every result file."""
    cmd = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.executable, ROOT), *sys.argv])
    dirty = _git("status", "--porcelain", "--", "unitless")
    return {
        "command": cmd,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"nproc": os.cpu_count(), "cpu_model": _cpu_model(), "mem_gib": _mem_gib(),
                    "platform": platform.platform(),
                    "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]},
        "versions": {"python": platform.python_version(), "numpy": _version("numpy"),
                     "numba": _version("numba"), "pyarrow": _version("pyarrow"),
                     "vowpalwabbit": _version_vw(), "matplotlib": _version("matplotlib"),
                     "unitless_git": _git("rev-parse", "--short", "HEAD")
                     + (" (unitless/ has uncommitted changes)" if dirty else "")},
    }


def _version_vw():
    try:
        from importlib.metadata import version
        return version("vowpalwabbit")
    except Exception:
        return "not installed"


def header_md(h, seconds=None):
    m, v = h["machine"], h["versions"]
    lines = [f"* command: `{h['command']}` (from the repository root)",
             f"* date (UTC): {h['date_utc']}" + (f"; run time {seconds:.0f} s" if seconds else ""),
             f"* machine: nproc={m['nproc']}, CPU model `{m['cpu_model']}`, {m['mem_gib']} GiB, "
             f"{m['platform']}",
             f"* load: 1/5/15-min load average at start {m['loadavg_at_start']}; other processes kept "
             f"{h.get('other_processes_cores', float('nan')):.2f} of {m['nproc']} cores busy on average "
             "during the run (machine busy time minus this script's own CPU time)",
             "* versions: " + ", ".join(f"{k} {val}" for k, val in v.items())]
    return "\n".join(lines)


def write_results(name, title, h, started, body_md, data):
    """benchmarks/results/<name>.md and .json; returns the markdown path."""
    out = result_dir(name)
    seconds = time.time() - started
    load = other_load()
    h = dict(h, run_seconds=round(seconds, 1),
             other_processes_cores=round(load, 2) if load is not None else float("nan"))
    md = f"# {title}\n\n{header_md(h, seconds)}\n\n{body_md.strip()}\n"
    (out / f"{name}.md").write_text(md)
    (out / f"{name}.json").write_text(json.dumps({"header": h, **data}, indent=1,
                                                  default=_json_default) + "\n")
    print(f"wrote {out / (name + '.md')} and .json ({seconds:.0f} s)")
    return out / f"{name}.md"


def result_dir(name):
    """benchmarks/results/, or its git-ignored tmp/ for --quick smoke runs (``*_quick``)."""
    out = TMP if name.endswith("_quick") else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    return out


def _json_default(o):
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def fnum(x, digits=4):
    """A number for a table: NaN/inf shown as such, small/large in scientific form."""
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
        return f"{x:.{max(digits - 1, 1)}e}"
    return f"{x:.{digits}f}"


def feta(eta):
    return f"{eta:.3g}"


# ----------------------------------------------------------------------------------- data sets

SIGMAS = 2.0 ** np.arange(-10, 11)  # σ_i = 2⁻¹⁰ … 2¹⁰, 21 features


def artificial_weights(rng):
    """w*_i = ±1/σ_i with random signs."""
    return rng.choice([-1.0, 1.0], size=SIGMAS.size) / SIGMAS


def artificial_data(rng, n, w_star):
    """The slides' artificial data: x_i ~ N(0, σ_i²), y ~ Bernoulli(sigmoid(xᵀw*)) as ±1."""
    X = rng.standard_normal((n, SIGMAS.size)) * SIGMAS
    p = 1.0 / (1.0 + np.exp(-(X @ w_star)))
    y = np.where(rng.random(n) < p, 1.0, -1.0)
    return X, y


def load_shuttle(which="shuttle.trn"):
    """Shuttle in file order: X (n × 9, float64), labels 1..7."""
    D = np.loadtxt(SHUTTLE / which)
    return D[:, :9].copy(), D[:, 9].copy()


# ------------------------------------------------------------------------------------------ VW

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
    """Run VW's own driver (parser thread + learner, as the `vw` command does) through the
    Python bindings: ``Workspace`` with ``-d``/``--passes`` runs ``run_parser``.

    Returns (driver log text, wall seconds of construct + run + finish).
    """
    from vowpalwabbit import Workspace
    t = time.perf_counter()
    ws = Workspace(args, enable_logging=True)
    ws.finish()
    seconds = time.perf_counter() - t
    return "\n".join(ws.get_log()), seconds


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
