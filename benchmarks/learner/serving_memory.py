"""Serving memory: a model scores 1,000,000 examples of features it has never seen, and its
process's resident memory and the model's slots are read as it goes.

Issue #57: serving (``predict_next``) gave each unseen feature a slot in the served model and
grew its arrays, so a model in front of traffic grew with it. Each learner here is trained on
1,000 examples of 100 features, then serves batches of 1,000 examples of 20 features drawn from
the other 2^18 - 100, in a process of its own (numba's compiled code loaded before the first
reading). Beside it, the old way as it was (the model's own ``map_features`` for the batch's
features, what serving did), for the slot count only.

    .venv/bin/python benchmarks/learner/serving_memory.py            # 1,000,000 examples a learner
    .venv/bin/python benchmarks/learner/serving_memory.py --quick    # 100,000

Writes benchmarks/results/serving_memory{.md,.json} (``--quick``: in results/tmp/).
"""
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.machine import header  # noqa: E402
from common.results import result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress  # noqa: E402

LEARNERS = ("nag", "scinol2", "omd_pnorm")

SERVE = """
import json, sys
import numpy as np
from unitless.learner import learn, make_batch, new_state, predict_next
algorithm, batches, old_way = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "old"
dim, rng = 1 << 18, np.random.default_rng(0)
state = new_state(algorithm, dim)
learn(state, make_batch(np.arange(0, 3001, 3), rng.integers(0, 100, 3000),
                        rng.normal(size=3000), np.where(rng.random(1000) < 0.5, 1.0, -1.0)))
trained = state.n_slots

def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / (1 << 20)

readings = []
for b in range(batches):
    batch = make_batch(np.arange(0, 20_001, 20), rng.integers(100, dim, 20_000),
                       rng.normal(size=20_000), np.ones(1000))
    if old_way:
        state.map_features(batch.indices)  # (what serving did to the model, the step aside)
    else:
        predict_next(state, batch)
    if b == 0 or (b + 1) % max(1, batches // 4) == 0:
        readings.append([(b + 1) * 1000, round(rss_mib(), 1), int(state.n_slots)])
print(json.dumps({"trained_slots": trained, "readings": readings}))
"""


def serve(algorithm, batches, way):
    out = subprocess.run([sys.executable, "-c", SERVE, algorithm, str(batches), way],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    args = parse_args(__doc__)
    h = header()
    batches = 100 if args.quick else 1000
    runs = {}
    for algorithm in LEARNERS:
        runs[algorithm] = {way: serve(algorithm, batches, way) for way in ("new", "old")}
        progress(f"{algorithm}: {runs[algorithm]['new']['readings'][-1]}")
    rows = []
    for algorithm, run in runs.items():
        new, old = run["new"]["readings"], run["old"]["readings"]
        rows.append([algorithm, f"{new[0][0]:,}", f"{new[-1][0]:,}",
                     f"{new[0][1]:.0f} → {new[-1][1]:.0f}",
                     f"{run['new']['trained_slots']} → {new[-1][2]}",
                     f"{run['old']['trained_slots']} → {old[-1][2]:,}"])
    body = f"""
Each learner trained on 1,000 examples of 100 features, then serving {batches * 1000:,}
examples of 20 features it never saw (2^18 features). Resident memory of the serving process
(MiB) from the first batch to the last, and the model's slots; last column: the slots the old
way gave the model for the same examples.

{table(["learner", "examples at first reading", "examples at last", "RSS MiB, first → last",
        "model slots (now)", "model slots (old way)"], rows)}
"""
    write_results(result_name("serving_memory", args.quick),
                  "Serving memory: 1,000,000 examples of unseen features", h, body, runs)


if __name__ == "__main__":
    main()
