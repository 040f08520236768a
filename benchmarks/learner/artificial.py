"""The ScInOL slides' artificial experiment: features on scales 2⁻¹⁰ … 2¹⁰, logistic loss.

x ∈ R²¹, x_i ~ N(0, σ_i²) with σ_i = 2⁻¹⁰ … 2¹⁰; y ~ Bernoulli(sigmoid(xᵀw*)), w*_i = ±1/σ_i
(random signs); 5,000 training examples (one online pass, batch size 1, bias on), then the final
weights are scored with ``predict`` on 100,000 test examples; 10 repetitions with different
seeds (new w* signs and new data each time).

SGD, AdaGrad, Adam, NAG and scale-free mirror descent (omd_diagonal) run over the slides' η grid
{0.001 … 10}; ScInOL1/2, Kotłowski Alg. 1 and COCOB run untuned (defaults). Extras: NG, sNAG,
omd_pnorm over the same grid and Kotłowski Alg. 2 untuned.

    .venv/bin/python benchmarks/learner/artificial.py            # full run
    .venv/bin/python benchmarks/learner/artificial.py --quick    # smoke run (seconds)

Writes benchmarks/results/artificial{.md,.json,.png} (``--quick``: artificial_quick.*).
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.data import artificial_data, artificial_stream  # noqa: E402
from common.learners import SLIDES_ETAS, best, hp_for, run_learner  # noqa: E402
from common.machine import header  # noqa: E402
from common.results import (feta, fnum, mean_std, pm, result_dir, result_name, table,  # noqa: E402
                            write_results)
from common.runs import parse_args, progress  # noqa: E402

from unitless.learner import dense_batch, loss_values, predict, predicted_class  # noqa: E402

TUNED = ["sgd", "adagrad", "adam", "nag", "omd_diagonal"]
TUNED_EXTRA = ["ng", "snag", "omd_pnorm"]
UNTUNED = ["scinol1", "scinol2", "kotlowski1", "cocob"]
UNTUNED_EXTRA = ["kotlowski2"]
ALL = TUNED + TUNED_EXTRA + UNTUNED + UNTUNED_EXTRA
LABELS = {"omd_diagonal": "omd_diagonal (scale-free MD)", "kotlowski1": "kotlowski1 (Alg. 1)",
          "kotlowski2": "kotlowski2 (Alg. 2)"}
DIM = 22  # 21 features + bias (dense_batch puts the bias at index 21)


def label(alg):
    return LABELS.get(alg, alg) + (" (extra)" if alg in TUNED_EXTRA + UNTUNED_EXTRA else "")


def evaluate(algorithm, eta, train, test, y_test):
    """One online pass over train, then test loss/accuracy of the final weights."""
    run = run_learner(algorithm, train, DIM, bias=DIM - 1, **hp_for(eta))
    if run.error:
        return {"test_loss": float("nan"), "test_acc": float("nan"),
                "progressive_loss": float("nan"), "error": run.error}
    scores = predict(run.state, test)
    out = {"progressive_loss": float(np.mean(run.result.losses)), "error": None}
    if not np.all(np.isfinite(scores)):
        out.update(test_loss=float("nan"), test_acc=float("nan"),
                   error=f"non-finite test scores ({int((~np.isfinite(scores)).sum())})")
        return out
    out["test_loss"] = float(np.mean(loss_values("logistic", y_test, scores[:, 0])))
    out["test_acc"] = float(np.mean(predicted_class(scores) == y_test))
    return out


def repetition(seed, n_train, n_test, configs):
    """New w* and data; every configuration's result, and w*'s own (the Bayes reference)."""
    rng = np.random.default_rng(seed)
    X, y, w_star = artificial_stream(n_train, rng)
    Xt, yt = artificial_data(rng, n_test, w_star)
    train, test = dense_batch(X, y), dense_batch(Xt, yt)
    oracle = {"test_loss": float(np.mean(loss_values("logistic", yt, Xt @ w_star))),
              "test_acc": float(np.mean(np.where(Xt @ w_star >= 0, 1.0, -1.0) == yt))}
    return {c: evaluate(*c, train, test, yt) for c in configs}, oracle


def summarize(runs, etas):
    """Per learner: its best η (by mean test loss; tuned learners) and mean ± std at it."""
    summary = {}
    for alg in ALL:
        eta = None
        if alg in TUNED + TUNED_EXTRA:
            eta = best({e: mean_std([x["test_loss"] for x in runs[(alg, e)]])[0] for e in etas})[0]
            eta = etas[0] if eta is None else eta
        rs = runs[(alg, eta)]
        (lm, ls), (am, as_), (pm_, _) = (mean_std([x[k] for x in rs]) for k in
                                         ("test_loss", "test_acc", "progressive_loss"))
        summary[alg] = {"tuned": eta is not None, "best_eta": eta, "test_loss_mean": lm,
                        "test_loss_std": ls, "test_acc_mean": am, "test_acc_std": as_,
                        "progressive_loss_mean": pm_,
                        "errors": sorted({x["error"] for x in rs if x["error"]}),
                        "extra": alg in TUNED_EXTRA + UNTUNED_EXTRA}
    return summary


def summary_table(summary, oracle):
    rows = [[label(a), feta(s["best_eta"]) if s["tuned"] else "untuned (defaults)",
             f"{fnum(s['test_loss_mean'])} ± {fnum(s['test_loss_std'])}",
             f"{fnum(s['test_acc_mean'])} ± {fnum(s['test_acc_std'])}",
             fnum(s["progressive_loss_mean"]), "; ".join(s["errors"])] for a, s in summary.items()]
    rows.append(["w* itself (Bayes-optimal reference, not a learner)", "—",
                 pm([o["test_loss"] for o in oracle]), pm([o["test_acc"] for o in oracle]), "—", ""])
    return table(["learner", "η (best by mean test loss)", "test logistic loss", "test accuracy",
                  "progressive train loss", "problems"], rows)


def grid_results(runs, etas, summary):
    """Test loss at every η of the tuned learners: (JSON dict, markdown table, best in bold)."""
    grid, rows = {}, []
    for alg in TUNED + TUNED_EXTRA:
        grid[alg], cells = {}, []
        for eta in etas:
            rs = runs[(alg, eta)]
            m, s = mean_std([x["test_loss"] for x in rs])
            errors = sorted({x["error"] for x in rs if x["error"]})
            n_err = sum(1 for x in rs if x["error"])
            grid[alg][feta(eta)] = {"test_loss_mean": m, "test_loss_std": s,
                                    "test_acc_mean": mean_std([x["test_acc"] for x in rs])[0],
                                    "failed_reps": n_err, "errors": errors}
            cell = fnum(m, 3) + (f" ({n_err} failed)" if n_err else "")
            cells.append(f"**{cell}**" if eta == summary[alg]["best_eta"] else cell)
        rows.append([LABELS.get(alg, alg)] + cells)
    return grid, table(["learner \\ η"] + [feta(e) for e in etas], rows)


def report(setup, summary, oracle, grid_md, png):
    scinol = min(summary[a]["test_loss_mean"] for a in ("scinol1", "scinol2"))
    tuned = ", ".join(f"{a} {fnum(summary[a]['test_loss_mean'])}" for a in TUNED)
    seed, reps = setup["seed"], setup["reps"]
    return f"""
Setup: x ∈ R²¹, x_i ~ N(0, σ_i²), σ_i = 2⁻¹⁰ … 2¹⁰; y ~ Bernoulli(sigmoid(xᵀw*)) as ±1,
w*_i = ±1/σ_i (random signs); {setup['n_train']:,} training examples learned in one online pass
(batch size 1, predict-then-update, bias feature on, weights from zero), then the final weights
score {setup['n_test']:,} test examples with `predict()`; {reps} repetitions (seeds
{seed}…{seed + reps - 1}: new w* and new data each time). Logistic loss throughout. Tuned
learners run over η ∈ {{{", ".join(feta(e) for e in setup['etas'])}}} and the η with the lowest
*mean test loss* is reported (tuned in hindsight on the test set, as in the slides); untuned
learners use the library defaults (ScInOL ε = 1, Kotłowski α = 1.5, COCOB α = 100). Entries are
mean ± std over repetitions.

## Summary

{summary_table(summary, oracle)}

## Test logistic loss at every η (mean over repetitions; best in bold)

{grid_md}

Plot: `{png.name}` (test loss vs η per tuned learner, horizontal lines for untuned learners).

## Reading

* Best untuned ScInOL test loss: {fnum(scinol)}; best-η test loss of the tuned learners: {tuned}.
* The w* row is the loss of the true model, the floor any learner can approach.
"""


def main():
    args = parse_args(__doc__, reps=(int, None), seed=(int, 20190))
    h = header()
    reps = args.reps or (2 if args.quick else 10)
    n_train, n_test = (1000, 10_000) if args.quick else (5000, 100_000)
    etas = [0.01, 0.5, 10.0] if args.quick else SLIDES_ETAS
    configs = [(a, eta) for a in TUNED + TUNED_EXTRA for eta in etas]
    configs += [(a, None) for a in UNTUNED + UNTUNED_EXTRA]
    runs, oracle = {c: [] for c in configs}, []
    for r in range(reps):
        res, o = repetition(args.seed + r, n_train, n_test, configs)
        for c, x in res.items():
            runs[c].append(x)
        oracle.append(o)
        progress(f"repetition {r + 1}/{reps} done")
    summary = summarize(runs, etas)
    grid, grid_md = grid_results(runs, etas, summary)
    name = result_name("artificial", args.quick)
    png = result_dir(name) / f"{name}.png"
    om, os_ = mean_std([o["test_loss"] for o in oracle])
    plot(png, etas, summary, grid, om)
    setup = {"n_train": n_train, "n_test": n_test, "reps": reps, "seed": args.seed,
             "etas": etas, "dim": DIM}
    data = {"setup": setup, "summary": summary, "loss_by_eta": grid,
            "oracle": {"test_loss_mean": om, "test_loss_std": os_,
                       "test_acc_mean": mean_std([o["test_acc"] for o in oracle])[0]},
            "runs": {f"{a}@{'default' if e is None else feta(e)}": v for (a, e), v in runs.items()}}
    write_results(name, "Artificial experiment (ScInOL slides): test loss vs η", h,
                  report(setup, summary, oracle, grid_md, png), data)


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
