"""Shared pieces of the benchmark scripts: command line, result header and files, tables, the
data sets, our learners over a stream, learning-rate grids and best in hindsight, timing with
idle-waiting, and commands timed from outside (wall, CPU, peak RSS). Everything VW: ``_vw.py``.

Nothing here is timed as a test; each script measures its figure in one run and writes
``benchmarks/results/<name>.md`` (markdown) and ``.json`` (and a PNG where there is a plot);
``--quick`` smoke runs write ``<name>_quick.*`` to the git-ignored ``benchmarks/results/tmp/``.
"""
import argparse
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
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TMP = RESULTS / "tmp"  # git-ignored scratch space (VW text files and caches)
DATA = Path(os.environ.get("UNITLESS_DATA", ROOT.parent / "shared" / "data"))
if not (DATA / "shuttle").exists():
    DATA = Path("/work/shared/data")
SHUTTLE = DATA / "shuttle"

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


def _version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:  # optional packages
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


class OtherLoad:
    """Cores kept busy by other processes while a block runs (``with OtherLoad() as m: ...``,
    then ``m.cores``): machine busy time minus this process's and its waited-for children's."""

    def __enter__(self):
        self.j0, self.t0, self.w0 = _busy_jiffies(), os.times(), time.time()
        return self

    def now(self):
        """Cores other processes kept busy on average since the block began (nan: unknown)."""
        j1, t1, wall = _busy_jiffies(), os.times(), time.time() - self.w0
        if self.j0 is None or j1 is None or wall <= 0:
            return float("nan")
        busy = (j1[0] - self.j0[0]) / os.sysconf("SC_CLK_TCK")
        return max(busy - (sum(t1[:4]) - sum(self.t0[:4])), 0.0) / wall

    def __exit__(self, *exc):
        self.cores = self.now()
        return False


_RUN = OtherLoad().__enter__()  # the whole run, from when the script imports this module


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
                     "apache-beam": _version("apache-beam"),
                     "vowpalwabbit": _version("vowpalwabbit"), "matplotlib": _version("matplotlib"),
                     "unitless_git": _git("rev-parse", "--short", "HEAD")
                     + (" (unitless/ has uncommitted changes)" if dirty else "")},
    }


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


def write_results(name, title, h, body_md, data):
    """benchmarks/results/<name>.md and .json (``*_quick``: in results/tmp/), the header ``h``
    (from ``header()`` at the start) on top; returns the markdown path."""
    out = result_dir(name)
    seconds = time.time() - _RUN.w0
    h = dict(h, run_seconds=round(seconds, 1), other_processes_cores=round(_RUN.now(), 2))
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


def fnum(x, digits=4, sci=True):
    """A number for a table: NaN/inf shown as such, small/large in scientific form (``sci``),
    else fixed with thousands separators."""
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    if not math.isfinite(x):
        return str(x)
    if sci and x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
        return f"{x:.{max(digits - 1, 1)}e}"
    return f"{x:,.{digits}f}" if not sci else f"{x:.{digits}f}"


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


def read_examples(path, fmt, spec, limit=None):
    """A file's examples as ``unitless train`` parses them (``connectors.files.read_file`` with
    a ``RecordSpec``: hashed feature names, one-hot categoricals, bias, label mapping), in file
    order: CSR arrays over the hashed indices, labels, {index: feature name}, dead letters."""
    from unitless.connectors.files import read_file
    blocks, dead, names = [], [], {}
    for block, d in read_file(str(path), fmt, spec):
        blocks.append(block)
        dead += d
        names.update(block.names)
    indptr = np.concatenate([[0]] + [b.indptr[1:] + s for b, s in
                                     zip(blocks, np.cumsum([0] + [b.indptr[-1] for b in blocks]))])
    ex = {"indptr": indptr, "indices": np.concatenate([b.indices for b in blocks]),
          "values": np.concatenate([b.values for b in blocks]),
          "labels": np.concatenate([b.labels for b in blocks]), "names": names, "dead": dead}
    return head(ex, limit) if limit else ex


def head(ex, n):
    """The first n examples of CSR arrays (a dict with indptr, indices, values, labels)."""
    end = ex["indptr"][min(n, len(ex["labels"]))]
    return dict(ex, indptr=ex["indptr"][:n + 1], indices=ex["indices"][:end],
                values=ex["values"][:end], labels=ex["labels"][:n])


def mean_logistic(y, scores):
    """Mean logistic loss log(1 + e^(−y·s)) of scores against ±1 labels."""
    return float(np.mean(np.logaddexp(0.0, -np.asarray(y) * np.asarray(scores))))


def artificial_stream(n, rng):
    """n examples of the slides' artificial stream with new w* signs: (X, y, w*). ``rng`` is a
    seed or a numpy Generator (then drawn from where it stands)."""
    rng = np.random.default_rng(rng)
    w_star = artificial_weights(rng)
    X, y = artificial_data(rng, n, w_star)
    return X, y, w_star


def write_csv(path, X, y, keys=None, chunk=250_000, first_id=0, label=True, times=None):
    """A CSV file ``id[,key],label,x1..xd[,t]`` of dense rows (ids first_id.., labels as integers
    when they are), every number as the shortest text that reads back as the same float64;
    ``keys``: a string per row (e.g. model keys); ``label`` False: without the label column;
    ``times``: a record time per row (s), as column t. Written with Arrow in chunks; returns
    the path."""
    import pyarrow as pa
    import pyarrow.compute as pc
    n, d = X.shape
    names = ["id", *(["key"] if keys is not None else []), *(["label"] if label else []),
             *(f"x{j + 1}" for j in range(d)), *(["t"] if times is not None else [])]
    y = y.astype(np.int64) if np.array_equal(y, np.round(y)) else y
    with open(path, "w") as f:
        f.write(",".join(names) + "\n")
        for a in range(0, n, chunk):  # chunks keep each Arrow string array far below 2 GiB
            b = min(a + chunk, n)
            cols = [pc.cast(pa.array(np.arange(a, b) + first_id), pa.string())]
            cols += [pa.array(keys[a:b], pa.string())] if keys is not None else []
            cols += [pc.cast(pa.array(v), pa.string())
                     for v in ((y[a:b],) if label else ()) + tuple(X[a:b].T)
                     + ((times[a:b],) if times is not None else ())]
            lines = pc.binary_join_element_wise(*cols, ",").to_pylist()
            f.write("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------------- command line, log

def parse_args(doc, quick_help="small smoke run", **options):
    """The command line: --quick, and each option ``name=(type, default[, help])`` as
    ``--name`` (underscores as dashes; type ``bool``: a flag). Description: the docstring's
    first line."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    for name, (kind, default, *help_) in options.items():
        flag = "--" + name.replace("_", "-")
        if kind is bool:
            ap.add_argument(flag, action="store_true", help=help_[0] if help_ else None)
        else:
            ap.add_argument(flag, type=kind, default=default, help=help_[0] if help_ else None)
    return ap.parse_args()


def result_name(base, quick):
    """``base``, or ``base_quick`` (written to results/tmp/) for a --quick smoke run."""
    return f"{base}_quick" if quick else base


def progress(msg):
    """A progress line with the clock and the seconds since the script started."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg} ({time.time() - _RUN.w0:.0f} s)", flush=True)


# ------------------------------------------------------------------------- our learners, grids

def hp_for(eta):
    """Hyperparameters for a learning rate η (None: the learner's defaults)."""
    return {} if eta is None else {"learning_rate": eta}


def run_learner(algorithm, batch, dim, bias=-1, loss="logistic", n_classes=1, catch=True, **hp):
    """A fresh state learns the stream in one ``learn()`` call (predict-then-update). Returns
    .state, .result (the BatchResult; None if the learner raised), .error (its text, or None)
    and .seconds; ``catch=False`` lets the exception through."""
    from unitless.learner import learn, new_state
    state = new_state(algorithm, dim, loss, n_classes=n_classes, bias_index=bias, **hp)
    t = time.perf_counter()
    try:
        result, error = learn(state, batch), None
    except Exception as e:  # a learner that crashes is reported, not hidden
        if not catch:
            raise
        result, error = None, f"{type(e).__name__}: {e}"
    return SimpleNamespace(state=state, result=result, error=error,
                           seconds=time.perf_counter() - t)


def run_dense(algorithm, X, y, **kw):
    """``run_learner`` over dense rows, with dense_batch's bias feature after the columns."""
    from unitless.learner import dense_batch
    return run_learner(algorithm, dense_batch(X, y), X.shape[1] + 1, bias=X.shape[1], **kw)


def zero_one(scores, y):
    """Progressive 0-1 loss: how often the class predicted from the pre-update scores is wrong."""
    from unitless.learner import predicted_class
    return float(np.mean(predicted_class(scores) != y))


def log_grid(lo, hi, num, digits=None, sig=None):
    """num learning rates log-spaced from 10^lo to 10^hi, rounded to `digits` decimals or to
    `sig` significant digits."""
    xs = [float(x) for x in np.logspace(lo, hi, num)]
    if sig is not None:
        return [float(f"{x:.{sig}g}") for x in xs]
    return [round(x, digits) for x in xs] if digits is not None else xs


def best(losses):
    """Best in hindsight: (η, loss) with the lowest finite loss in {η: loss}, ties to the
    smaller η; (None, nan) when none is finite."""
    ok = [(v, e) for e, v in losses.items() if v is not None and math.isfinite(v)]
    if not ok:
        return None, float("nan")
    v, e = min(ok)
    return e, v


def mean_std(values):
    v = np.asarray(values, dtype=float)
    return float(np.mean(v)), float(np.std(v))


def pm(values, digits=4):
    """'mean ± std' of values, for a table."""
    m, s = mean_std(values)
    return f"{fnum(m, digits)} ± {fnum(s, digits)}"


# ------------------------------------------------------------------- timing, commands from outside

class IdleBudget:
    """Before each timed run, wait (≤ per_run s, and ≤ what is left of max_wait in all) for other
    processes to use < 0.25 cores; .waits lists (their load in the last sample, seconds waited)."""

    def __init__(self, max_wait, per_run=30.0):
        self.max_wait, self.per_run, self.waits = max_wait, per_run, []

    @property
    def used(self):
        return sum(w for _, w in self.waits)

    def settle(self):
        left = self.max_wait - self.used
        if left > 0:
            load, waited = wait_until_idle(min(self.per_run, left))
            self.waits.append((round(load, 2), waited))


def measure(fn, idle=None):
    """Run fn() timed, after waiting for quiet (``idle``: an IdleBudget): .wall and .cpu seconds
    (this process), .other (cores other processes kept busy meanwhile), .value (what fn gave)."""
    if idle is not None:
        idle.settle()
    with OtherLoad() as m:
        t, c = time.perf_counter(), time.process_time()
        value = fn()
        wall, cpu = time.perf_counter() - t, time.process_time() - c
    return SimpleNamespace(wall=wall, cpu=cpu, other=m.cores, value=value)


TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else None


def rate_beyond(n, tries, m, small_tries):
    """Examples/s a run sustains beyond the cost every job pays once: ``n`` examples' tries
    beside the same job's tries on ``m`` of them, (n − m) over the median wall time beyond the
    small job's median (None where it is not beyond: tiny inputs)."""
    beyond = (np.median([t["wall_s"] for t in tries])
              - np.median([t["wall_s"] for t in small_tries]))
    return (n - m) / beyond if beyond > 0 else None


def run_timed(cmd, cwd=ROOT, env=None):
    """Run a command as a process of its own under ``/usr/bin/time -v``: wall s, CPU s
    (user+sys of the child, and each), peak RSS MiB, the 1-min load average before and after,
    its output."""
    import resource
    full = [TIME, "-v", *cmd] if TIME else cmd
    load_before = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(full, cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    # without /usr/bin/time: the largest child so far (only exact for a new maximum)
    rss = int(m.group(1)) / 1024 if m else after.ru_maxrss / 1024
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {"wall_s": wall, "cpu_s": user + system, "user_s": user, "sys_s": system,
            "max_rss_mib": rss,
            "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "stdout": proc.stdout, "stderr": proc.stderr, "command": shlex.join(cmd)}


def train_args(inp, predictions, model_dir, dead_letter, *extra, eta=0.5):
    """``unitless train`` arguments (NAG, logistic loss, η) for one input and its outputs."""
    return ["train", "--input", str(inp), "--algorithm", "nag", "--loss", "logistic",
            "--learning-rate", str(eta), "--predictions", str(predictions),
            "--model-dir", str(model_dir), "--dead-letter", str(dead_letter), *map(str, extra)]


@contextmanager
def scratch(workdir, prefix):
    """The directory ``workdir`` (kept), or a new temporary one removed afterwards."""
    import shutil
    import tempfile
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    try:
        yield work
    finally:
        if not workdir:
            shutil.rmtree(work, ignore_errors=True)


def relative_command(cmd):
    """A command line for a results file: paths under the repository and the temp dir short."""
    import tempfile
    return cmd.replace(str(ROOT) + "/", "").replace(tempfile.gettempdir() + "/", "$TMP/")


def unitless_command(args):
    """The ``unitless`` command (the virtualenv's entry point, else ``python -m unitless.cli``)."""
    exe = Path(sys.executable).parent / "unitless"
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "unitless.cli", *args]



def _proc_tree(root):
    """pid ``root`` and its descendants alive now (from /proc/*/stat)."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def _rss_cpu(pid):
    """(resident MiB, CPU s of the process and its reaped children) of one pid; None if gone."""
    try:
        rss = next(int(line.split()[1]) for line in open(f"/proc/{pid}/status")
                   if line.startswith("VmRSS"))
        fields = open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1].split()
    except (OSError, StopIteration, IndexError):
        return None
    return rss / 1024, sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class TreeWatch:
    """Peak RSS (MiB, summed over the tree, sampled every ``interval`` s) and CPU seconds of the
    process trees rooted at ``roots`` ({name: pid}, e.g. servers a timed command talks to) while
    a block runs: ``with TreeWatch({"jvm": pid}) as w: ...``, then ``w.result()``."""

    def __init__(self, roots, interval=0.5):
        import threading
        self.roots, self.interval, self.stop = dict(roots), interval, threading.Event()
        self.peak = {name: 0.0 for name in self.roots}
        self.largest = {name: 0.0 for name in self.roots}  # one process of the tree's RSS
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        out = {}
        for name, root in self.roots.items():
            vals = [v for v in map(_rss_cpu, _proc_tree(root)) if v is not None]
            out[name] = (sum(r for r, _ in vals), sum(c for _, c in vals))
            self.peak[name] = max(self.peak[name], out[name][0])
            self.largest[name] = max([self.largest[name], *(r for r, _ in vals)])
        return out

    def _run(self):
        while not self.stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        self.start = self._sample()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.end = self._sample()
        return False

    def cpu(self):
        """{name: CPU seconds its tree has used so far} (to time a part of the block)."""
        return {name: cpu for name, (_, cpu) in self._sample().items()}

    def result(self):
        """{name: {"max_rss_mib", "largest_process_mib", "cpu_s"}} (CPU of processes that
        exited unreaped is missed)."""
        return {name: {"max_rss_mib": round(self.peak[name], 1),
                       "largest_process_mib": round(self.largest[name], 1),
                       "cpu_s": round(self.end[name][1] - self.start[name][1], 2)}
                for name in self.roots}
