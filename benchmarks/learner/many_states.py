"""Many models in shared columnar state, learned in one call: the learner alone, without Beam.

Data: the ScInOL slides' artificial stream (21 features and a bias) as in ``pipeline.py``,
2M examples (``--rows``), in blocks of 10,000 as the learning step gets them. Each block's
examples are split over K model keys (K = 1, 64, 1,000, 10,000, 1,000,000; round-robin, and
Zipf-skewed with a fixed seed) and learned by ``ManyStates.learn`` (NAG, logistic, η = 0.5):
one compiled call per block, the row lookup of the block's distinct keys included. The
reference is one ``LearnerState`` learning every block with ``learn_or_refuse``, measured
alternately with each run (A, B, A, B). Reported: wall seconds (range over the repeats),
examples/s against the reference's, bytes per model (the arrays, ``ManyStates.nbytes``, and the
resident memory the models added, which counts the key objects and the key → row map too).

    .venv/bin/python benchmarks/learner/many_states.py           # 2M rows, two alternated pairs
    .venv/bin/python benchmarks/learner/many_states.py --quick   # 200k rows, up to 10,000 keys

Writes benchmarks/results/many_states{.md,.json} (``--quick``: results/tmp/).
"""
import gc
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.data import artificial_stream  # noqa: E402
from common.machine import header  # noqa: E402
from common.results import result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress  # noqa: E402

from unitless.learner import dense_batch, learn_or_refuse, new_state  # noqa: E402
from unitless.learner.many import ManyStates  # noqa: E402

BLOCK = 10_000
KEY_COUNTS = (1, 64, 1_000, 10_000, 1_000_000)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reference(batch, dim):
    state = new_state("nag", dim, learning_rate=0.5)
    t = time.perf_counter()
    for a in range(0, len(batch), BLOCK):
        learn_or_refuse(state, batch.slice(a, min(a + BLOCK, len(batch))))
    return time.perf_counter() - t


def many(batch, dim, keys, k):
    """Learn the batch over model keys ``keys`` (an index per example into k names)."""
    names = [f"key {i}" for i in range(k)]
    gc.collect()
    before = rss_bytes()
    models = ManyStates(new_state("nag", dim, learning_rate=0.5))
    t = time.perf_counter()
    for a in range(0, len(batch), BLOCK):
        part = keys[a:a + BLOCK]
        distinct, codes = np.unique(part, return_inverse=True)
        rows = models.rows([names[i] for i in distinct])[codes]
        models.learn(rows, batch.slice(a, min(a + BLOCK, len(batch))))
    seconds = time.perf_counter() - t
    n_models = len(models)
    added = rss_bytes() - before
    return {"seconds": seconds, "models": n_models, "array_bytes": models.nbytes / n_models,
            "rss_bytes": added / n_models}


def key_splits(n, counts, seed):
    rng = np.random.default_rng(seed)
    splits = {}
    for k in counts:
        splits[("round-robin", k)] = np.arange(n) % k
        if k > 1:
            p = 1.0 / np.arange(1, k + 1)
            splits[("Zipf", k)] = rng.choice(k, size=n, p=p / p.sum())
    return splits


def main():
    args = parse_args(__doc__, rows=(int, 2_000_000, "examples"), repeats=(int, 2),
                      seed=(int, 0))
    n = 200_000 if args.quick else args.rows
    counts = tuple(k for k in KEY_COUNTS if k <= n // 2 and (k < 1_000_000 or not args.quick))
    h = header()
    X, y, _ = artificial_stream(n, args.seed)
    batch = dense_batch(X, y)
    dim = X.shape[1] + 1
    ManyStates(new_state("nag", dim)).learn(np.zeros(10, dtype=np.int64), batch.slice(0, 10))
    reference(batch.slice(0, BLOCK), dim)  # (compiled code loaded before anything is timed)
    runs = {}
    for (split, k), keys in key_splits(n, counts, args.seed).items():
        for _ in range(args.repeats):
            ref = reference(batch, dim)
            got = many(batch, dim, keys, k)
            runs.setdefault(f"{split} {k}", []).append({"reference_s": ref, **got})
            progress(f"{split} {k:,}: {got['seconds']:.2f} s (one LearnerState {ref:.2f} s), "
                     f"{got['array_bytes']:,.0f} B of arrays per model")
    data = {"rows": n, "block": BLOCK, "runs": runs}
    write_results(result_name("many_states", args.quick),
                  "Many models in shared columnar state: the learner alone", h, render(data), data)


def render(data):
    n, rows = data["rows"], []
    for name, reps in data["runs"].items():
        split, k = name.rsplit(" ", 1)
        secs = [r["seconds"] for r in reps]
        ratio = [r["reference_s"] / r["seconds"] for r in reps]
        rows.append([split, f"{int(k):,}", f"{min(secs):.2f}–{max(secs):.2f}",
                     f"{n / max(secs):,.0f}–{n / min(secs):,.0f}",
                     f"{min(ratio):.2f}–{max(ratio):.2f}",
                     f"{reps[-1]['array_bytes']:,.0f}",
                     f"{reps[-1]['rss_bytes']:,.0f}" if int(k) >= 100_000 else "—"])
    return f"""{n:,} examples of 22 features (21 and a bias), NAG, in blocks of {data['block']:,},
each block learned in one `ManyStates.learn` call over the model keys it holds. The reference
is one `LearnerState` learning every block (`learn_or_refuse`), run alternately with each
repeat; ranges are over the repeats.

{table(["keys", "model keys", "wall s", "examples/s", "× one LearnerState's examples/s",
        "array bytes per model", "resident bytes per model"], rows)}

Array bytes: `ManyStates.nbytes` over the models (slots of every vector, the feature tables,
scalars and counters, with the arrays' room to grow). Resident bytes: what the process's
resident memory grew by while the models were built, over the models (the key strings, the key
→ row map and the allocator's slack too), given from 100,000 models on: below that it is within
what the allocator keeps from the runs before.
"""


if __name__ == "__main__":
    main()
