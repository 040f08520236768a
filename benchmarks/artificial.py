"""The ScInOL slides' artificial experiment: features on scales 2⁻¹⁰ … 2¹⁰, logistic loss.

x ∈ R²¹, x_i ~ N(0, σ_i²) with σ_i = 2⁻¹⁰ … 2¹⁰; y ~ Bernoulli(sigmoid(xᵀw*)), w*_i = ±1/σ_i
(random signs); 5,000 training examples (one online pass, batch size 1, bias on), then the final
weights are scored with ``predict`` on 100,000 test examples; 10 repetitions with different
seeds (new w* signs and new data each time).

SGD, AdaGrad, Adam, NAG and scale-free mirror descent (omd_diagonal) run over the slides' η grid
{0.001 … 10}; ScInOL1/2, Kotłowski Alg. 1 and COCOB run untuned (defaults). Extras: NG, sNAG,
omd_pnorm over the same grid and Kotłowski Alg. 2 untuned.

    .venv/bin/python benchmarks/artificial.py            # full run
    .venv/bin/python benchmarks/artificial.py --quick    # smoke run (seconds)

Writes benchmarks/results/artificial{.md,.json,.png} (``--quick``: artificial_quick.*).
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (SLIDES_ETAS, artificial_data, artificial_weights, feta, fnum,  # noqa: E402
                     header, result_dir, table, write_results)

from unitless.learner import (dense_batch, learn, loss_values, new_state, predict,  # noqa: E402
                              predicted_class)

TUNED = ["sgd", "adagrad", "adam", "nag", "omd_diagonal"]
TUNED_EXTRA = ["ng", "snag", "omd_pnorm"]
UNTUNED = ["scinol1", "scinol2", "kotlowski1", "cocob"]
UNTUNED_EXTRA = ["kotlowski2"]
LABELS = {"omd_diagonal": "omd_diagonal (scale-free MD)", "kotlowski1": "kotlowski1 (Alg. 1)",
          "kotlowski2": "kotlowski2 (Alg. 2)"}


def evaluate(algorithm, hp, train, test, y_test, dim, bias):
    """One online pass over train, then test loss/accuracy of the final weights."""
    state = new_state(algorithm, dim, "logistic", bias_index=bias, **hp)
    try:
        res = learn(state, train)
    except Exception as e:  # a learner that crashes is reported, not hidden
        return {"test_loss": float("nan"), "test_acc": float("nan"),
                "progressive_loss": float("nan"), "error": f"{type(e).__name__}: {e}"}
    scores = predict(state, test)
    out = {"progressive_loss": float(np.mean(res.losses)), "error": None}
    if not np.all(np.isfinite(scores)):
        out.update(test_loss=float("nan"), test_acc=float("nan"),
                   error=f"non-finite test scores ({int((~np.isfinite(scores)).sum())})")
        return out
    out["test_loss"] = float(np.mean(loss_values("logistic", y_test, scores[:, 0])))
    out["test_acc"] = float(np.mean(predicted_class(scores) == y_test))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--seed", type=int, default=20190)
    args = ap.parse_args()
    started = time.time()
    h = header()
    reps = args.reps or (2 if args.quick else 10)
    n_train, n_test = (1000, 10_000) if args.quick else (5000, 100_000)
    etas = [0.01, 0.5, 10.0] if args.quick else SLIDES_ETAS
    configs = [(a, eta) for a in TUNED + TUNED_EXTRA for eta in etas]
    configs += [(a, None) for a in UNTUNED + UNTUNED_EXTRA]
    dim = 22  # 21 features + bias (dense_batch puts the bias at index 21)
    runs = {c: [] for c in configs}
    oracle = []
    for r in range(reps):
        rng = np.random.default_rng(args.seed + r)
        w_star = artificial_weights(rng)
        X, y = artificial_data(rng, n_train, w_star)
        Xt, yt = artificial_data(rng, n_test, w_star)
        train, test = dense_batch(X, y), dense_batch(Xt, yt)
        oracle.append({"test_loss": float(np.mean(loss_values("logistic", yt, Xt @ w_star))),
                       "test_acc": float(np.mean(np.where(Xt @ w_star >= 0, 1.0, -1.0) == yt))})
        for (alg, eta) in configs:
            hp = {} if eta is None else {"learning_rate": eta}
            runs[(alg, eta)].append(evaluate(alg, hp, train, test, yt, dim, dim - 1))
        print(f"repetition {r + 1}/{reps} done ({time.time() - started:.0f} s)", flush=True)

    def stats(alg, eta, key):
        v = np.array([x[key] for x in runs[(alg, eta)]])
        return float(np.mean(v)), float(np.std(v))

    # ---- summary table
    summary = {}
    rows = []
    for alg in TUNED + TUNED_EXTRA + UNTUNED + UNTUNED_EXTRA:
        if alg in TUNED + TUNED_EXTRA:
            means = {eta: stats(alg, eta, "test_loss")[0] for eta in etas}
            finite = {e: m for e, m in means.items() if np.isfinite(m)}
            best = min(finite, key=finite.get) if finite else etas[0]
        else:
            best = None
        lm, ls = stats(alg, best, "test_loss")
        am, as_ = stats(alg, best, "test_acc")
        pm, ps = stats(alg, best, "progressive_loss")
        errors = sorted({x["error"] for x in runs[(alg, best)] if x["error"]})
        summary[alg] = {"tuned": best is not None, "best_eta": best, "test_loss_mean": lm,
                        "test_loss_std": ls, "test_acc_mean": am, "test_acc_std": as_,
                        "progressive_loss_mean": pm, "errors": errors,
                        "extra": alg in TUNED_EXTRA + UNTUNED_EXTRA}
        rows.append([LABELS.get(alg, alg) + (" (extra)" if summary[alg]["extra"] else ""),
                     feta(best) if best is not None else "untuned (defaults)",
                     f"{fnum(lm)} ± {fnum(ls)}", f"{fnum(am)} ± {fnum(as_)}", fnum(pm),
                     "; ".join(errors) or ""])
    om = np.mean([o["test_loss"] for o in oracle]), np.std([o["test_loss"] for o in oracle])
    oa = np.mean([o["test_acc"] for o in oracle]), np.std([o["test_acc"] for o in oracle])
    rows.append(["w* itself (Bayes-optimal reference, not a learner)", "—",
                 f"{fnum(om[0])} ± {fnum(om[1])}", f"{fnum(oa[0])} ± {fnum(oa[1])}", "—", ""])
    summary_md = table(["learner", "η (best by mean test loss)", "test logistic loss",
                        "test accuracy", "progressive train loss", "problems"], rows)

    # ---- loss at every η
    grid_rows, grid = [], {}
    for alg in TUNED + TUNED_EXTRA:
        cells, grid[alg] = [], {}
        for eta in etas:
            m, s = stats(alg, eta, "test_loss")
            am, _ = stats(alg, eta, "test_acc")
            n_err = sum(1 for x in runs[(alg, eta)] if x["error"])
            grid[alg][feta(eta)] = {"test_loss_mean": m, "test_loss_std": s, "test_acc_mean": am,
                                    "failed_reps": n_err,
                                    "errors": sorted({x["error"] for x in runs[(alg, eta)]
                                                      if x["error"]})}
            cell = fnum(m, 3) + (f" ({n_err} failed)" if n_err else "")
            cells.append(f"**{cell}**" if eta == summary[alg]["best_eta"] else cell)
        grid_rows.append([LABELS.get(alg, alg)] + cells)
    grid_md = table(["learner \\ η"] + [feta(e) for e in etas], grid_rows)

    # ---- plot
    name = "artificial_quick" if args.quick else "artificial"
    png = result_dir(name) / f"{name}.png"
    plot(png, etas, summary, grid, om[0])

    # ---- invariance remark: scale-invariant learners are untouched by σ spread; others are not
    scinol = min(summary[a]["test_loss_mean"] for a in ("scinol1", "scinol2"))
    best_tuned = {a: summary[a]["test_loss_mean"] for a in TUNED}
    body = f"""
Setup: x ∈ R²¹, x_i ~ N(0, σ_i²), σ_i = 2⁻¹⁰ … 2¹⁰; y ~ Bernoulli(sigmoid(xᵀw*)) as ±1,
w*_i = ±1/σ_i (random signs); {n_train:,} training examples learned in one online pass (batch
size 1, predict-then-update, bias feature on, weights from zero), then the final weights score
{n_test:,} test examples with `predict()`; {reps} repetitions (seeds {args.seed}…{args.seed + reps - 1}:
new w* and new data each time). Logistic loss throughout. Tuned learners run over
η ∈ {{{", ".join(feta(e) for e in etas)}}} and the η with the lowest *mean test loss* is reported
(tuned in hindsight on the test set, as in the slides); untuned learners use the library defaults
(ScInOL ε = 1, Kotłowski α = 1.5, COCOB α = 100). Entries are mean ± std over repetitions.

## Summary

{summary_md}

## Test logistic loss at every η (mean over repetitions; best in bold)

{grid_md}

Plot: `{png.name}` (test loss vs η per tuned learner, horizontal lines for untuned learners).

## Reading

* Best untuned ScInOL test loss: {fnum(scinol)}; best-η test loss of the tuned learners:
  {", ".join(f"{a} {fnum(v)}" for a, v in best_tuned.items())}.
* The w* row is the loss of the true model, the floor any learner can approach.
"""
    data = {"setup": {"n_train": n_train, "n_test": n_test, "reps": reps, "seed": args.seed,
                      "etas": etas, "dim": dim},
            "summary": summary, "loss_by_eta": grid,
            "oracle": {"test_loss_mean": om[0], "test_loss_std": om[1], "test_acc_mean": oa[0]},
            "runs": {f"{a}@{'default' if e is None else feta(e)}": v for (a, e), v in runs.items()}}
    write_results(name, "Artificial experiment (ScInOL slides): test loss vs η", h, started,
                  body, data)


def plot(path, etas, summary, grid, oracle_loss):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(14, 6))
    tuned_colors, untuned_colors = plt.get_cmap("tab10"), plt.get_cmap("Dark2")
    for ax, zoom in zip(axes, (False, True)):
        for j, alg in enumerate(TUNED + TUNED_EXTRA):
            ys = [grid[alg][feta(e)]["test_loss_mean"] for e in etas]
            ax.plot(etas, ys, marker="o", color=tuned_colors(j), linewidth=1.8,
                    linestyle="--" if alg in TUNED_EXTRA else "-",
                    label=LABELS.get(alg, alg) + (" (extra)" if alg in TUNED_EXTRA else ""))
        for j, alg in enumerate(UNTUNED + UNTUNED_EXTRA):
            v = summary[alg]["test_loss_mean"]
            if np.isfinite(v):
                ax.axhline(v, color=untuned_colors(j), linestyle=":", linewidth=2.4,
                           label=f"{LABELS.get(alg, alg)} untuned")
        ax.axhline(oracle_loss, color="black", linewidth=1, label="w* (Bayes)")
        ax.set_xscale("log")
        ax.set_xlabel("learning rate η")
        ax.grid(True, which="both", alpha=0.3)
        if zoom:
            ax.set_ylim(oracle_loss * 0.97, 0.75)
            ax.set_title("zoom: test loss ≤ 0.75 (linear scale)")
        else:
            ax.set_yscale("log")
            ax.set_ylabel("test logistic loss (mean over repetitions)")
            ax.set_title("Artificial data, feature scales 2^-10 … 2^10 (log scale)")
    axes[0].legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
