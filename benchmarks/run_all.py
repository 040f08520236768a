"""Measure again every result in benchmarks/results/, each by the command that wrote it (its
first lines say it; ``index.entries`` reads them), one after the other, from the repository root:

    .venv/bin/python benchmarks/run_all.py                   # every one (hours: Kafka, Flink)
    .venv/bin/python benchmarks/run_all.py --only learner    # the learners alone (minutes)
    .venv/bin/python benchmarks/run_all.py --only system --only sparse --dry-run
    .venv/bin/python benchmarks/run_all.py --quick           # smoke runs, to results/tmp/

``--only`` keeps the commands that name it (a folder, ``learner`` or ``system``, or a script);
``--dry-run`` lists them with how long each took last time. Run it on an otherwise idle machine:
the throughput figures depend on it, and each result records how busy the machine was.
"""
import argparse
import json
import shlex
import subprocess
import sys
import time

from index import RESULTS, entries

ROOT = RESULTS.parents[1]


def commands(only=()):
    """[(command, the results it wrote, seconds it took last time)], learners first, each
    command once."""
    found = {}
    for name, _, command in entries():
        if not command or (only and not any(o in command for o in only)):
            continue
        header = json.loads((RESULTS / name).with_suffix(".json").read_text()).get("header", {})
        entry = found.setdefault(command, ([], 0.0))
        entry[0].append(name)
        found[command] = (entry[0], entry[1] + float(header.get("run_seconds") or 0.0))
    return sorted(((c, names, s) for c, (names, s) in found.items()),
                  key=lambda e: ("benchmarks/learner/" not in e[0], e[0]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", default=[],
                    help="keep the commands that contain this (learner, system, a script's name)")
    ap.add_argument("--quick", action="store_true", help="smoke runs (results/tmp/)")
    ap.add_argument("--dry-run", action="store_true", help="list the commands, run none")
    args = ap.parse_args(argv)
    todo = commands(args.only)
    if not todo:
        sys.exit(f"no result's command matches {args.only}")
    failed = []
    for command, names, seconds in todo:
        # (this interpreter: a result may name the one of another checkout)
        argv_ = [sys.executable, *shlex.split(command)[1:], *(["--quick"] if args.quick else [])]
        print(f"=== {command}  ({', '.join(names)}; {seconds:.0f} s last time)",
              flush=True)
        if args.dry_run:
            continue
        began = time.time()
        if subprocess.run(argv_, cwd=ROOT).returncode != 0:
            failed.append(command)
        print(f"=== {time.time() - began:.0f} s", flush=True)
    if failed:
        sys.exit("failed:\n" + "\n".join(failed))


if __name__ == "__main__":
    main()
