"""The first run after installing: what compiling costs, and what ``python -m unitless.compile``
(run by the project's setup) saves the first `unitless train`.

Each in a process of its own over an empty numba cache (``NUMBA_CACHE_DIR``), ``unitless train``
on the bundled example data (5,000 rows):
* cold: the first run compiles what it calls;
* after ``python -m unitless.compile`` (timed too): the first run, then a second one;
* the learning loop alone (300,000 dense examples, ScInOL2 and NAG) compiled for this machine's
  CPU and for a generic x86-64 one (``NUMBA_CPU_NAME=generic``: what the worker images use, so
  that their cache fits any worker), alternated.

    .venv/bin/python benchmarks/system/first_run.py [--quick]
"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.machine import header  # noqa: E402
from common.results import result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress, run_timed, unitless_command  # noqa: E402

LOOP = """
import time, numpy as np
from unitless.learner import new_state, learn, dense_batch
rng = np.random.default_rng(0)
X = rng.normal(size=(300_000, 21)) * 10.0 ** rng.uniform(-3, 3, 21)
b = dense_batch(X, np.sign(rng.normal(size=300_000)))
for alg in ("scinol2", "nag"):
    best = min(_time(alg) for _ in range(4))
    print(alg, best)
"""
LOOP = LOOP.replace("for alg", """def _time(alg):
    s = new_state(alg, dim=22, loss="logistic", bias_index=21)
    t = time.perf_counter(); learn(s, b); return time.perf_counter() - t
for alg""")


def train(cache, work, name):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    out = work / name
    cmd = unitless_command(["train", "--predictions", str(out / "p"), "--model-dir",
                            str(out / "m"), "--dead-letter", str(out / "d")])
    r = run_timed(cmd, cwd=work, env=env)
    rate = re.search(r"\(([0-9,]+) examples/s", r["stdout"])
    r["examples_per_s"] = int(rate.group(1).replace(",", "")) if rate else None
    r["notice"] = "compiled" in r["stdout"]
    return r


def loop_seconds(cpu_name, cache):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    if cpu_name:
        env["NUMBA_CPU_NAME"] = cpu_name
    subprocess.run([sys.executable, "-c", LOOP], env=env, check=True, capture_output=True)
    out = subprocess.run([sys.executable, "-c", LOOP], env=env, check=True, capture_output=True,
                         text=True).stdout
    return {alg: float(s) for alg, s in (line.split() for line in out.splitlines())}


def _range(values):
    return f"{min(values):.3f}–{max(values):.3f}"


def main():
    args = parse_args(__doc__)
    h = header()
    repeats = 1 if args.quick else 3
    rows, loops, data = [], {"host": [], "generic": []}, []
    with tempfile.TemporaryDirectory(prefix="first_run_") as tmp:
        work = Path(tmp)
        for rep in range(repeats):
            cold = train(work / f"cold{rep}", work, f"cold{rep}")
            cache = work / f"compiled{rep}"
            compile_run = run_timed([sys.executable, "-m", "unitless.compile"], cwd=work,
                                    env={**os.environ, "NUMBA_CACHE_DIR": str(cache)})
            first = train(cache, work, f"first{rep}")
            second = train(cache, work, f"second{rep}")
            data.append({"cold": cold, "compile": compile_run, "first": first, "second": second})
            rows.append([rep + 1, f"{cold['wall_s']:.1f} s, {cold['examples_per_s']:,}/s",
                         f"{compile_run['wall_s']:.1f} s",
                         f"{first['wall_s']:.1f} s, {first['examples_per_s']:,}/s",
                         f"{second['wall_s']:.1f} s, {second['examples_per_s']:,}/s",
                         f"{first['examples_per_s'] / second['examples_per_s']:.2f}",
                         "yes" if cold["notice"] and not first["notice"] else "NO"])
            for name in ("host", "generic"):
                loops[name].append(loop_seconds(None if name == "host" else "generic",
                                                work / f"loop_{name}{rep}"))
            progress(f"repetition {rep + 1} done")
    for d in data:
        for r in d.values():
            r.pop("stdout", None)
            r.pop("stderr", None)
    loop_rows = [[alg] + [_range([x[alg] for x in loops[n]]) for n in ("host", "generic")]
                 for alg in ("scinol2", "nag")]
    body = f"""
`unitless train` on the bundled data (5,000 examples), each run a process of its own over a
numba cache directory of its own; the run's own examples/s is what its summary line prints.

{table(["rep", "cold run (compiles)", "python -m unitless.compile", "first run after it",
        "second run", "first / second examples/s", "notice only when compiling"], rows)}

The learning loop alone, 300,000 dense examples × 21 features, best of 4 passes (s), compiled
for this CPU and for a generic x86-64 CPU (`NUMBA_CPU_NAME=generic`, as the worker images are),
{repeats} alternated runs:

{table(["learner", "this CPU", "generic x86-64"], loop_rows)}
"""
    write_results(result_name("first_run", args.quick),
                  "The first run after installing: compiling ahead", h, body,
                  {"runs": data, "loop_seconds": loops})


if __name__ == "__main__":
    main()
