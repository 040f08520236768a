"""The machine a benchmark runs on and how busy it is: the header every result starts with (the
command, date, CPU, memory, versions, git commit), the cores other processes keep busy while a
block runs (``OtherLoad``; ``RUN``: the whole run), waiting for quiet before a timed run
(``IdleBudget``, ``measure``), and the peak RSS and CPU of process trees (``TreeWatch``)."""
import datetime
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from .paths import ROOT

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


RUN = OtherLoad().__enter__()  # the whole run, from when the script imports this module


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
