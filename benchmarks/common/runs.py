"""A benchmark script's command line and progress lines, and commands timed from outside as
processes of their own (wall, CPU, peak RSS): `unitless train` and its arguments, scratch
directories."""
import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .machine import RUN
from .paths import ROOT

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


def progress(msg):
    """A progress line with the clock and the seconds since the script started."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg} ({time.time() - RUN.w0:.0f} s)", flush=True)


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


def unitless_command(args):
    """The ``unitless`` command (the virtualenv's entry point, else ``python -m unitless.cli``)."""
    exe = Path(sys.executable).parent / "unitless"
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "unitless.cli", *args]
