"""Result files: ``benchmarks/results/<name>.md`` (the header on top, then the script's tables)
and ``.json`` (every number), ``--quick`` smoke runs' in the git-ignored ``results/tmp/``; and
how numbers are shown in their tables."""
import json
import math
import time

import numpy as np

from .machine import RUN
from .paths import RESULTS, ROOT, TMP

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
    seconds = time.time() - RUN.w0
    h = dict(h, run_seconds=round(seconds, 1), other_processes_cores=round(RUN.now(), 2))
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


def result_name(base, quick):
    """``base``, or ``base_quick`` (written to results/tmp/) for a --quick smoke run."""
    return f"{base}_quick" if quick else base


def mean_std(values):
    v = np.asarray(values, dtype=float)
    return float(np.mean(v)), float(np.std(v))


def pm(values, digits=4):
    """'mean ± std' of values, for a table."""
    m, s = mean_std(values)
    return f"{fnum(m, digits)} ± {fnum(s, digits)}"


def relative_command(cmd):
    """A command line for a results file: paths under the repository and the temp dir short."""
    import tempfile
    return cmd.replace(str(ROOT) + "/", "").replace(tempfile.gettempdir() + "/", "$TMP/")
