"""What splitting one model over feature shards costs in loss: S shards × delay bound τ.

Progressive logistic loss (each example predicted before it is learned) of NAG (η = 0.5, the
default) and ScInOL2 (untuned) over S ∈ {1, 2, 8} shards and τ ∈ {0, 100, 1,000, 10,000},
beside the unsharded learner, on two streams:

* artificial: the ScInOL slides' stream (x ∈ R²¹, σ_i = 2⁻¹⁰ … 2¹⁰, y ~ Bernoulli(sigmoid(xᵀw*))),
  bias on;
* sparse: 40 of a vocabulary of 1M features per example (Zipf-distributed, exponent 1.1), each
  feature hashed into 2^24 and on its own scale 10^U(−4, 4), weights w*_f = N(0, 1)/σ_f,
  y ~ Bernoulli(sigmoid(xᵀw*)), bias on.

The shards run in one process (``unitless.learner.sharded.learn_with_delay``: blocks of τ + 1
examples, so example j of a block misses the gradients of the j before it, at most τ): the
loss a distributed run with that bound gets at its worst. τ = 0 is the unsharded learner up to
the order of the sums over shards; the table shows the largest difference in ŷ, and the
largest shard's learner state (its arrays, which double as they fill) beside the unsharded
learner's.

    .venv/bin/python benchmarks/learner/feature_shards.py            # full run (minutes)
    .venv/bin/python benchmarks/learner/feature_shards.py --quick    # smoke run

Writes benchmarks/results/feature_shards{.md,.json} (``--quick``: feature_shards_quick.*).
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.data import SPARSE_BITS, artificial_stream, sparse_stream  # noqa: E402
from common.machine import header  # noqa: E402
from common.results import fnum, result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress  # noqa: E402

from unitless.learner import dense_batch, learn, new_state  # noqa: E402
from unitless.learner.sharded import learn_with_delay, new_shards  # noqa: E402

LEARNERS = ("nag", "scinol2")
SHARDS = (1, 2, 8)
DELAYS = (0, 100, 1_000, 10_000)


def streams(quick, seed):
    n_artificial, n_sparse = (5_000, 5_000) if quick else (100_000, 200_000)
    X, y, _ = artificial_stream(n_artificial, seed)
    sparse, bias = sparse_stream(n_sparse, seed)
    return {"artificial": (dense_batch(X, y), X.shape[1] + 1, X.shape[1]),
            "sparse 2^24": (sparse, 1 << SPARSE_BITS, bias)}


def run_all(args):
    out = {}
    for name, (batch, dim, bias) in streams(args.quick, args.seed).items():
        for algorithm in LEARNERS:
            state = new_state(algorithm, dim, bias_index=bias)
            alone = learn(state, batch)
            row = {"examples": len(batch), "unsharded": float(alone.losses.mean()),
                   "unsharded state MiB": state.nbytes / 2**20}
            for n_shards in SHARDS:
                for tau in DELAYS:
                    shards = new_shards(n_shards, algorithm, dim, bias_index=bias)
                    result = learn_with_delay(shards, batch, max_delay=tau)
                    row[f"S={n_shards} tau={tau}"] = float(result.losses.mean())
                    if tau == 0:
                        row[f"S={n_shards} max |dy_hat| at tau=0"] = float(
                            np.abs(result.scores - alone.scores).max())
                        row[f"S={n_shards} largest shard state MiB"] = max(
                            shard.nbytes for shard in shards) / 2**20
                    progress(f"{name} {algorithm} S={n_shards} τ={tau}: "
                             f"{row[f'S={n_shards} tau={tau}']:.5f}")
            out[f"{name} {algorithm}"] = row
    return out


def render(data):
    rows = []
    for key, row in data.items():
        for n_shards in SHARDS:
            rows.append([key, f"{row['examples']:,}", fnum(row["unsharded"]), n_shards,
                         *(fnum(row[f"S={n_shards} tau={tau}"]) for tau in DELAYS),
                         fnum(row[f"S={n_shards} max |dy_hat| at tau=0"], 2),
                         f"{row[f'S={n_shards} largest shard state MiB']:.3g} of "
                         f"{row['unsharded state MiB']:.3g}"])
    spread = max(abs(row[f"S={s} tau={tau}"] / row[f"S=1 tau={tau}"] - 1.0)
                 for row in data.values() for s in SHARDS for tau in DELAYS)
    within = []
    for key, row in data.items():
        good = [t for t in DELAYS if row[f"S=1 tau={t}"] <= 1.01 * row["unsharded"]]
        within.append(f"{key}: τ ≤ {max(good, default=0):,}")
    return (table(["stream, learner", "examples", "unsharded", "shards S",
                   *(f"τ = {tau:,}" for tau in DELAYS), "max |Δŷ| at τ = 0",
                   "largest shard's state MiB, of the unsharded"], rows)
            + f"\n\n* At each τ the loss with 2 or 8 shards differs from one shard's by at most "
              f"{spread:.1e} (relative): what a delay withholds is the same for every shard here, so the "
              f"delay costs loss, the number of shards does not.\n"
              f"* Largest τ measured whose loss is within 1% of the unsharded learner's: "
            + "; ".join(within) + ".")


def main():
    args = parse_args(__doc__, seed=(int, 0, "data seed"))
    h = header()
    data = run_all(args)
    body = ("Progressive logistic loss (mean over the stream); shards in one process with "
            "the delay at its bound (see the script's docstring).\n\n" + render(data))
    write_results(result_name("feature_shards", args.quick),
                  "One model over feature shards: progressive loss by shards and delay bound",
                  h, body, {"streams": data})


if __name__ == "__main__":
    main()
