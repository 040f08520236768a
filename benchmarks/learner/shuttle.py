"""Ross, Mineiro, Langford (2013) Table 2 on Shuttle: NAG vs AdaGrad, raw vs max-normalized, and
Vowpal Wabbit in the same run.

Shuttle training file (43,500 rows, 9 features, classes 1..7), one-against-all over 7 classes
(``n_classes=7``, logistic loss), one online pass in file order. The metric is the progressive
0-1 loss: the class predicted from the scores made *before* each update (``predicted_class``),
compared with the label and averaged over the pass. η* is the best η of a grid
(10^(k/4) for k = −16 … 16, i.e. 1e-4 … 1e4, plus the paper's 7.5e-4, 7.4, 11, 16.4 and 16).
"Max-normalized" divides each feature by its max |x| over the training file.

Also: untuned ScInOL1/2 and Kotłowski Alg. 1 (and Alg. 2), sNAG over the grid (paper Table 3),
VW `--oaa 7` on raw and normalized data, the invariance check (NAG gives the same loss on raw and
rescaled data, AdaGrad does not), and an investigation of why the paper's 0.036 is not reached:
data order (runs of classes, shuffled passes, a class-sorted pass), the best linear one-against-all
model in hindsight, and quadratic features.

    .venv/bin/python benchmarks/learner/shuttle.py          # full run (~2-3 minutes)
    .venv/bin/python benchmarks/learner/shuttle.py --quick  # smoke run

Writes benchmarks/results/shuttle{.md,.json} (``--quick``: shuttle_quick.*).
"""
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.data import load_shuttle  # noqa: E402
from common.learners import best, hp_for, log_grid, run_dense, zero_one  # noqa: E402
from common.machine import header  # noqa: E402
from common.paths import TMP  # noqa: E402
from common.results import feta, fnum, pm, result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress  # noqa: E402
from common.vw import vw_run, write_vw_dense  # noqa: E402

K = 7
KINDS = ("raw", "norm")
PAPER = {"nag": {"raw": (7.4, 0.036), "norm": (7.4, 0.036)},
         "adagrad": {"raw": (7.5e-4, 0.040), "norm": (16.4, 0.035)},
         "snag": {"raw": (11.0, 0.026), "norm": (9.0, 0.026)}}  # Table 3 (sq-norm for "norm")
TUNED = ("nag", "adagrad", "snag")
UNTUNED = ("scinol1", "scinol2", "kotlowski1", "kotlowski2")


def grid(quick):
    if quick:
        return [7.5e-4, 0.01, 0.1, 1.0, 7.4, 16.4]
    return sorted(set(log_grid(-4, 4, 33, digits=10)) | {7.5e-4, 7.4, 11.0, 16.0, 16.4})


def kind_label(kind):
    return "raw" if kind == "raw" else "max-normalized"


def failed(error):
    return {"zero_one": float("nan"), "logloss": float("nan"), "scores": None, "error": error}


def run_ours(alg, X, y, eta=None):
    """One pass in the given order; returns dict(zero_one, logloss, scores, error)."""
    run = run_dense(alg, X, y, n_classes=K, **hp_for(eta))
    if run.error:
        return failed(run.error)
    res = run.result
    return {"zero_one": zero_one(res.scores, y), "logloss": float(np.mean(res.losses)),
            "scores": res.scores,
            "error": None if np.isfinite(res.scores).all() else "non-finite scores"}


def run_ours_squared_oaa(X, y, eta):
    """NAG with the squared loss, one-against-all by hand (7 binary learners on ±1 labels,
    argmax of their pre-update scores): the loss VW's --oaa uses by default."""
    scores = np.empty((len(y), K))
    for k in range(K):
        run = run_dense("nag", X, np.where(y == k + 1, 1.0, -1.0), loss="squared",
                        learning_rate=eta)
        if run.error:
            return failed(run.error)
        scores[:, k] = run.result.scores[:, 0]
    return {"zero_one": float(np.mean(np.argmax(scores, axis=1) + 1 != y)),
            "logloss": float("nan"), "scores": scores, "error": None}


def best_of(results):
    """(η*, loss) with the lowest finite 0-1 loss; ties go to the smaller η."""
    return best({eta: r["zero_one"] for eta, r in results.items()})


def runs_stats(y, rng, n_perm=200):
    """Number of runs of equal consecutive labels, vs a random order."""
    n = len(y)
    observed = int(1 + np.count_nonzero(np.diff(y)))
    counts = np.bincount(y.astype(int))
    expected = 1 + (n - 1) * (1 - np.sum(counts * (counts - 1)) / (n * (n - 1)))
    sims = [1 + np.count_nonzero(np.diff(rng.permutation(y))) for _ in range(n_perm)]
    return observed, float(expected), float(np.std(sims))


def average_ranks(v):
    """Ranks 0..n-1 with ties given their average rank (as Spearman's ρ needs)."""
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return (first + (counts - 1) / 2.0)[inverse]


def spearman_with_position(X):
    """Spearman's ρ between row position and each column (ties averaged)."""
    pos = np.arange(len(X), dtype=float)
    return [float(np.corrcoef(pos, average_ranks(X[:, j]))[0, 1]) for j in range(X.shape[1])]


def newton_oaa(A, y, lam=1e-6, iters=60):
    """Logistic regression per class (one-against-all) to convergence: the best linear OAA
    model in hindsight for the surrogate our learners minimise. Returns the weights [K, d]."""
    W = []
    for k in range(1, K + 1):
        t = np.where(y == k, 1.0, -1.0)
        w = np.zeros(A.shape[1])
        for _ in range(iters):
            z = np.clip(t * (A @ w), -500, 500)
            p = 1.0 / (1.0 + np.exp(-z))
            g = -(A.T @ (t * (1 - p))) + lam * w
            H = (A.T * (p * (1 - p))) @ A + lam * np.eye(A.shape[1])
            step = np.linalg.solve(H, g)
            # damped Newton: halve the step while the objective does not decrease
            f0 = np.sum(np.logaddexp(0, -t * (A @ w))) + lam / 2 * w @ w
            a = 1.0
            while a > 1e-8:
                wn = w - a * step
                if np.sum(np.logaddexp(0, -t * (A @ wn))) + lam / 2 * wn @ wn <= f0:
                    break
                a /= 2
            w = wn
            if np.max(np.abs(a * step)) < 1e-10:
                break
        W.append(w)
    return np.array(W)


def quadratic(X):
    iu = np.triu_indices(X.shape[1])
    return np.hstack([X, (X[:, :, None] * X[:, None, :])[:, iu[0], iu[1]]])


def vw_oaa(path, extra, pred_path=None):
    out = vw_run(path, f"--oaa {K} {extra}", pred_path)
    if pred_path:
        out["pred_path"] = str(pred_path)
    return out


def write_vw_lines(path, lines, order):
    """The VW text file's lines in another order."""
    with open(path, "w") as f:
        f.writelines(lines[i] for i in order)
    return path


# ------------------------------------------------------------------------------ measurements

def file_order(S):
    """Ours in file order: the tuned learners over the grid, on raw and max-normalized data."""
    S.ours = {(alg, kind): {eta: run_ours(alg, S.data[kind], S.y, eta) for eta in S.etas}
              for alg in TUNED for kind in KINDS}
    for kind in KINDS:
        S.ours[("nag_sq", kind)] = {eta: run_ours_squared_oaa(S.data[kind], S.y, eta)
                                    for eta in S.etas}
    S.untuned = {(alg, kind): run_ours(alg, S.data[kind], S.y) for alg in UNTUNED for kind in KINDS}
    progress("our learners done")


def rel_diff(a, b):
    """Largest score difference of two runs relative to the largest score (nan if one failed)."""
    if a["scores"] is None or b["scores"] is None:
        return float("nan")
    return float(np.max(np.abs(a["scores"] - b["scores"])) / max(np.max(np.abs(a["scores"])), 1e-300))


def invariance(S):
    """Raw vs max-normalized: 0-1 loss and score differences, per learner (over the grid)."""
    S.inv = {}
    for alg in ("nag", "adagrad", "snag", "nag_sq"):
        pairs = [(S.ours[(alg, "raw")][e], S.ours[(alg, "norm")][e]) for e in S.etas]
        diffs = [abs(a["zero_one"] - b["zero_one"]) for a, b in pairs]
        rel = [rel_diff(a, b) for a, b in pairs]
        S.inv[alg] = {"rel_score_diff_by_eta": dict(zip(S.etas, rel)),
                      "max_abs_diff_zero_one": float(np.nanmax(diffs)),
                      "etas_with_different_zero_one": int(np.sum(np.array(diffs) > 0)),
                      "etas_compared": len(S.etas),
                      "max_rel_score_diff": float(np.nanmax(rel)) if np.isfinite(rel).any()
                      else float("nan")}
    for alg in UNTUNED:
        a, b = S.untuned[(alg, "raw")], S.untuned[(alg, "norm")]
        S.inv[alg] = {"max_abs_diff_zero_one": abs(a["zero_one"] - b["zero_one"]),
                      "max_rel_score_diff": rel_diff(a, b)}


def vw_file_order(S):
    """VW --oaa 7 in file order: -l 7.4 (checked against -p), the grid with its default squared
    loss and with the logistic loss, and all quadratic interactions."""
    S.vw_files = {kind: write_vw_dense(TMP / f"shuttle_{kind}.vw", S.data[kind], S.y)
                  for kind in KINDS}
    S.vw = {}
    for kind in KINDS:
        pred = TMP / f"shuttle_{kind}.pred"
        r = vw_oaa(S.vw_files[kind], "-l 7.4", pred)
        r["zero_one_from_predictions"] = float(np.mean(np.loadtxt(pred) != S.y))
        S.vw[("7.4", kind)] = r
        S.vw[("grid", kind)] = {eta: vw_oaa(S.vw_files[kind], f"-l {eta}")["average_loss"]
                                for eta in S.etas}
        S.vw[("grid_logistic", kind)] = {
            eta: vw_oaa(S.vw_files[kind], f"-l {eta} --loss_function logistic")["average_loss"]
            for eta in S.etas}
    S.vw_quad = {kind: vw_oaa(S.vw_files[kind], "-l 7.4 --interactions ::") for kind in KINDS}
    progress("VW done")


def order_tests(S):
    """Is the file in random order? Class runs, class 1 share by tenth, rank correlations."""
    obs, exp, sd = runs_stats(S.y, S.rng)
    S.order = {"runs_observed": obs, "runs_expected_random": exp, "runs_sd_random": sd,
               "class1_share_by_tenth": [float(np.mean(p == 1)) for p in np.array_split(S.y, 10)],
               "spearman_position_feature": spearman_with_position(S.X),
               "spearman_position_label": spearman_with_position(S.y[:, None])[0]}


def stars(S):
    """Each learner's η* in file order (raw data), for the re-ordered passes."""
    S.nag_star = best_of(S.ours[("nag", "raw")])[0]
    S.ada_star = {kind: best_of(S.ours[("adagrad", kind)])[0] for kind in KINDS}
    S.snag_star = best_of(S.ours[("snag", "raw")])[0]
    S.vw_star = best(S.vw[("grid", "raw")])[0]


def shuffled_pass(S, perm, lines, sh):
    """One random order: every learner at its file-order η* (NAG over the whole grid), and VW."""
    Xp, yp = S.X[perm], S.y[perm]
    for eta in S.etas:
        sh["nag_grid"][eta].append(run_ours("nag", Xp, yp, eta)["zero_one"])
    sh["adagrad_raw@eta*"].append(run_ours("adagrad", Xp, yp, S.ada_star["raw"])["zero_one"])
    sh["adagrad_norm@eta*"].append(
        run_ours("adagrad", Xp / S.scale, yp, S.ada_star["norm"])["zero_one"])
    sh["snag@eta*"].append(run_ours("snag", Xp, yp, S.snag_star)["zero_one"])
    for alg in ("scinol1", "scinol2", "kotlowski1"):
        sh[alg].append(run_ours(alg, Xp, yp)["zero_one"])
    path = write_vw_lines(TMP / "shuttle_shuffled.vw", lines, perm)
    sh["vw@7.4"].append(vw_oaa(path, "-l 7.4")["average_loss"])
    sh["vw@eta*"].append(vw_oaa(path, f"-l {S.vw_star}")["average_loss"])


def reorderings(S):
    """Shuffled passes and one class-sorted pass."""
    stars(S)
    S.shuffled = {"nag_grid": {eta: [] for eta in S.etas}, "adagrad_raw@eta*": [],
                  "adagrad_norm@eta*": [], "snag@eta*": [], "scinol2": [], "scinol1": [],
                  "kotlowski1": [], "vw@7.4": [], "vw@eta*": []}
    lines = open(S.vw_files["raw"]).read().splitlines(keepends=True)
    for _ in range(S.n_shuffles):
        shuffled_pass(S, S.rng.permutation(len(S.y)), lines, S.shuffled)
    S.nag_shuf_means = {eta: float(np.mean(v)) for eta, v in S.shuffled["nag_grid"].items()}
    S.nag_shuf_star = best(S.nag_shuf_means)[0]
    order = np.argsort(S.y, kind="stable")
    S.sorted_runs = {"nag@eta*": run_ours("nag", S.X[order], S.y[order], S.nag_star)["zero_one"],
                     "vw@7.4": vw_oaa(write_vw_lines(TMP / "shuttle_sorted.vw", lines, order),
                                      "-l 7.4")["average_loss"]}
    progress("order investigation done")


def hindsight_error(A, y):
    """Training 0-1 error of the best OAA logistic model in hindsight on features A (+ bias)."""
    A = np.hstack([A, np.ones((len(y), 1))])
    return float(np.mean(np.argmax(A @ newton_oaa(A, y).T, axis=1) + 1 != y))


def capacity(S):
    """Best linear and quadratic models in hindsight; our NAG on quadratic features."""
    Q = quadratic(S.data["norm"])
    S.hindsight_linear = hindsight_error(S.data["norm"], S.y)
    S.hindsight_quad = hindsight_error(Q / np.abs(Q).max(axis=0), S.y)
    S.quad_nag = {eta: run_ours("nag", quadratic(S.X), S.y, eta)["zero_one"]
                  for eta in S.etas if eta >= 0.1}
    S.quad_star = best(S.quad_nag)
    progress("capacity investigation done")


# ------------------------------------------------------------------------------------ tables

def crash_note(S, alg, kind, eta):
    """Notes column of a tuned row: how many η crashed, and whether η* is capped by them."""
    res, etas = S.ours[(alg, kind)], S.etas
    n_err = sum(1 for r in res.values() if r["error"])
    if not n_err:
        return ""
    capped = (eta is not None and etas.index(eta) + 1 < len(etas)
              and res[etas[etas.index(eta) + 1]]["error"])
    return (f"{n_err} of {len(etas)} η crashed"
            + (f"; larger η crash, so η* is capped at {feta(eta)}" if capped else ""))


def table2(S):
    rows = []
    for alg, label in (("nag", "NAG"), ("adagrad", "AdaGrad"), ("snag", "sNAG (extra)"),
                       ("nag_sq", "NAG, squared loss, OAA by hand (extra)")):
        for kind in KINDS:
            eta, loss = best_of(S.ours[(alg, kind)])
            p_eta, p_loss = PAPER["nag" if alg == "nag_sq" else alg][kind]
            at_paper = S.ours[(alg, kind)].get(p_eta, {}).get("zero_one", float("nan"))
            table3 = (" (Table 3, sq-norm)" if kind == "norm" else " (Table 3)") if alg == "snag" else ""
            rows.append([label, kind_label(kind), feta(eta), fnum(loss),
                         fnum(at_paper) if np.isfinite(at_paper) else "(η not on the grid)",
                         feta(p_eta), fnum(p_loss, 3) + table3, crash_note(S, alg, kind, eta)])
    for alg, label in (("scinol1", "ScInOL1"), ("scinol2", "ScInOL2"),
                       ("kotlowski1", "Kotłowski Alg. 1"), ("kotlowski2", "Kotłowski Alg. 2 (extra)")):
        for kind in KINDS:
            r = S.untuned[(alg, kind)]
            rows.append([label, kind_label(kind), "untuned", fnum(r["zero_one"]), "—", "—", "—",
                         r["error"] or ""])
    for kind in KINDS:
        r, (vstar, vloss) = S.vw[("7.4", kind)], best(S.vw[("grid", kind)])
        rows.append(["VW `--oaa 7 -l 7.4`", kind_label(kind), "7.4 (fixed)",
                     fnum(r["average_loss"]), fnum(r["average_loss"]), "7.4", "0.036 (NAG)",
                     f"from -p predictions: {fnum(r['zero_one_from_predictions'])}; "
                     f"VW's own η* on the grid: {feta(vstar)} → {fnum(vloss)}"])
    return table(["learner", "data", "η*", "progressive 0-1 loss (ours, at η*)",
                  "ours at the paper's η*", "paper η*", "paper loss", "notes"], rows)


def grid_table(S):
    def ours(alg, kind):
        res = S.ours[(alg, kind)]
        return lambda e: res[e]["error"].split(":")[0] if res[e]["error"] else res[e]["zero_one"]

    cols = [("NAG raw", ours("nag", "raw")), ("NAG norm", ours("nag", "norm")),
            ("NAG rel. score diff raw/norm", lambda e: S.inv["nag"]["rel_score_diff_by_eta"][e]),
            ("NAG squared OAA raw", ours("nag_sq", "raw")), ("AdaGrad raw", ours("adagrad", "raw")),
            ("AdaGrad norm", ours("adagrad", "norm")), ("sNAG raw", ours("snag", "raw")),
            ("VW raw (squared)", lambda e: S.vw[("grid", "raw")][e]),
            ("VW norm (squared)", lambda e: S.vw[("grid", "norm")][e]),
            ("VW raw (logistic)", lambda e: S.vw[("grid_logistic", "raw")][e]),
            ("NAG shuffled (mean)", lambda e: S.nag_shuf_means[e])]
    return table(["η"] + [c for c, _ in cols],
                 [[feta(eta)] + [fnum(get(eta)) for _, get in cols] for eta in S.etas])


def file_vs_shuffled(S):
    """(label, file-order loss, the shuffled passes' losses, whether it counts for the largest
    shift: not sNAG, whose large η* is unstable, nor the η found on the shuffles) per learner."""
    sh, o = S.shuffled, S.ours
    rows = [(f"NAG η*={feta(S.nag_star)} (file-order η*)", best_of(o[("nag", "raw")])[1],
             sh["nag_grid"][S.nag_star], True),
            (f"NAG η*={feta(S.nag_shuf_star)} (best η on shuffles)",
             o[("nag", "raw")][S.nag_shuf_star]["zero_one"], sh["nag_grid"][S.nag_shuf_star], False),
            (f"AdaGrad raw η={feta(S.ada_star['raw'])}", best_of(o[("adagrad", "raw")])[1],
             sh["adagrad_raw@eta*"], True),
            (f"AdaGrad max-normalized η={feta(S.ada_star['norm'])}",
             best_of(o[("adagrad", "norm")])[1], sh["adagrad_norm@eta*"], True),
            (f"sNAG η={feta(S.snag_star)}", best_of(o[("snag", "raw")])[1], sh["snag@eta*"], False)]
    rows += [(f"{alg} (untuned)", S.untuned[(alg, "raw")]["zero_one"], sh[alg], True)
             for alg in ("scinol1", "scinol2", "kotlowski1")]
    rows += [("VW --oaa 7 -l 7.4", S.vw[("7.4", "raw")]["average_loss"], sh["vw@7.4"], True),
             (f"VW --oaa 7 -l {feta(S.vw_star)} (VW η*)", S.vw[("grid", "raw")][S.vw_star],
              sh["vw@eta*"], True)]
    return rows


def shuffle_table(S):
    rows = file_vs_shuffled(S)
    S.max_shift = max(abs(float(np.mean(v)) - f) for _, f, v, counts in rows if counts)
    return table(["learner (raw data)", "file order",
                  f"shuffled, {S.n_shuffles} random orders (mean ± std)"],
                 [[label, fnum(f), pm(v)] for label, f, v, _ in rows])


def invariance_table(S):
    return table(["learner",
                  "max abs. difference of the 0-1 loss, raw vs max-normalized (over the η grid)",
                  "η values where the 0-1 loss differs", "max relative score difference"],
                 [[a, fnum(v["max_abs_diff_zero_one"]),
                   f"{v.get('etas_with_different_zero_one', '—')}/{v.get('etas_compared', 1)}",
                   fnum(v["max_rel_score_diff"])] for a, v in S.inv.items()])


# ------------------------------------------------------------------------------------- prose

def setup_md(S):
    return f"""
One online pass over the Shuttle training file (`shuttle.trn`, {len(S.y):,} rows, 9 features,
7 classes: {S.setup['class_counts']}) in file order, one-against-all over 7 logistic-loss
learners (`n_classes=7`, bias on). The metric is the **progressive 0-1 loss**: the class predicted
by `predicted_class` from the scores made before each update, compared with the label, averaged
over the pass. η* = the η with the lowest progressive 0-1 loss on the grid
{{{", ".join(feta(e) for e in S.etas)}}}. Max-normalized = each feature divided by its max |x| over
the training file ({", ".join(f"{s:g}" for s in S.scale)}).

VW is run through its own C++ driver (`Workspace("-d FILE --oaa 7 ...")`, the same parser and
learner as the `vw` command), with VW's default update (`--adaptive --normalized --invariant`)
and VW's default loss for `--oaa`, **squared**. VW's number is the "average loss" it prints at
the end, for `--oaa` the progressive 0-1 loss; the notes column checks it against the 0-1 loss
of VW's `-p` predictions (made before each update).
"""


def table2_md(S):
    vw_sq, vw_lg = best(S.vw[("grid", "raw")]), best(S.vw[("grid_logistic", "raw")])
    nsq_eta, nsq_loss = best_of(S.ours[("nag_sq", "raw")])
    crashed = sorted(e for e in S.etas if S.ours[("nag", "raw")][e]["error"])
    crash = "" if not crashed else (
        "\nNAG (logistic) **crashed with ZeroDivisionError** at η ∈ {"
        + ", ".join(feta(e) for e in crashed)
        + "} (library problem: (g·x)² underflows to 0 while g ≠ 0, so G_i stays 0 and the update"
        " divides by √G_i = 0; see the crash list below). Its η* is therefore the best"
        " *non-crashing* η.\n")
    return f"""
## Table 2, side by side (file order)

{table2(S)}

Which loss: the paper ran VW, whose `--oaa` uses the squared loss by default; VW's squared-loss
grid optimum is -l {feta(vw_sq[0])} ({fnum(vw_sq[1])}), close to the paper's η* = 7.4, while with
`--loss_function logistic` VW's optimum moves to -l {feta(vw_lg[0])} ({fnum(vw_lg[1])}), as does
ours (logistic NAG η* = {feta(best_of(S.ours[("nag", "raw")])[0])}). So the paper's η* fits VW's
squared-loss setup, and the logistic η* is not comparable with it. Our NAG with the squared loss
(one-against-all by hand) is much worse ({fnum(nsq_loss)} at η={feta(nsq_eta)}): VW clips each
prediction to the label range [−1, 1] before taking the gradient and uses its
importance-invariant update; our squared loss does neither, so large unclipped scores give
large steps.
{crash}"""


def nag_invariance_md(S):
    etas, inv = S.etas, S.inv["nag"]
    rel = inv["rel_score_diff_by_eta"]
    same = [e for e in etas if S.ours[("nag", "raw")][e]["zero_one"]
            == S.ours[("nag", "norm")][e]["zero_one"]]
    tight = [e for e in etas if rel[e] <= 1e-9]
    tight_max = max(e for e in etas if all(rel[x] <= 1e-9 for x in etas if x <= e)) \
        if rel[etas[0]] <= 1e-9 else None
    scores = (f"scores equal to a relative {fnum(max(rel[e] for e in tight)) if tight else '—'} "
              f"for η ≤ {feta(tight_max) if tight_max else '—'}")
    if len(same) == len(etas):
        return (f"**Verified: NAG gives the same progressive 0-1 loss on raw and max-normalized "
                f"data at every one of the {len(etas)} η values**, {scores}.")
    differ = [e for e in etas if e not in same]
    return (
        f"**Verified: NAG gives the same progressive 0-1 loss on raw and max-normalized data at "
        f"{len(same)} of {len(etas)} η values, including every η ≤ "
        f"{feta(max(e for e in etas if all(x in same for x in etas if x <= e)))}**, with {scores}. "
        f"At the very large η {{{', '.join(feta(e) for e in differ)}}} the two runs drift apart "
        f"(0-1 loss differs by at most {fnum(inv['max_abs_diff_zero_one'])}, relative score "
        f"difference up to {fnum(inv['max_rel_score_diff'])}): there the logistic loss saturates "
        "(scores in the hundreds), e^(−z) and (g·x_i)² underflow, and whether a coordinate's "
        "(g·x_i)² underflows to 0 (and the update skips it) depends on the scale of x_i: a "
        "numerical, not an algorithmic, break of invariance; rounding differences are also "
        "amplified at such η.")


def invariance_md(S):
    inv = S.inv
    crashes = sorted({(alg, kind, feta(eta), r["error"]) for (alg, kind), res in S.ours.items()
                      for eta, r in res.items() if r["error"]})
    crash_md = "\n".join(f"  * {alg} {kind} η={eta}: `{err}`" for alg, kind, eta, err in crashes) \
        or "  * none"
    return f"""
## Invariance check (raw vs max-normalized data)

{invariance_table(S)}

{nag_invariance_md(S)} ScInOL1/2 and Kotłowski Alg. 1 give the same loss too; Kotłowski Alg. 2
differs on {round(inv['kotlowski2']['max_abs_diff_zero_one'] * len(S.y))} of {len(S.y):,}
predictions (its pseudo-inverse update has a rank tolerance). **AdaGrad's loss differs at
{inv['adagrad']['etas_with_different_zero_one']} of {len(S.etas)} η values** (by up to
{fnum(inv['adagrad']['max_abs_diff_zero_one'])}).

## Progressive 0-1 loss at every η (file order)

{grid_table(S)}

Learner runs that crashed (reported, not hidden):
{crash_md}
"""


def order_md(S):
    o, shuf_md = S.order, shuffle_table(S)
    return f"""
## Why 0.036 is not reached: what was checked

**1. The file is not sorted; its order is already random.** Labels change
{o['runs_observed']:,} times + 1 (runs of equal consecutive labels); a random order of the same
labels gives {o['runs_expected_random']:,.0f} ± {o['runs_sd_random']:.0f}. The share of class 1
in each tenth of the file is {", ".join(f"{t:.3f}" for t in o['class1_share_by_tenth'])}. Rank
correlation of row position with each feature: max |ρ| =
{max(abs(r) for r in o['spearman_position_feature']):.3f}, with the label:
{o['spearman_position_label']:.3f}. The class shares are flat along the file, the number of class
runs is what a random order gives, and no feature trends with position: as far as these tests
can tell the file is already in random order, and shuffling it changes little:

{shuf_md}

Progressive loss *is* very sensitive to order when the order carries information: a pass over
the class-sorted file (all class 1 first, then 2, …) gives NAG η={feta(S.nag_star)}:
{fnum(S.sorted_runs['nag@eta*'])} and VW -l 7.4: {fnum(S.sorted_runs['vw@7.4'])}, because the
learner only has to follow the current class (mostly through the bias). A file with partly
sorted or time-ordered rows could therefore give figures like the paper's; but the training file
as distributed is in random order (the Statlog description of the data set says its original
time order was randomised), and random re-orderings move the figures by at most
{fnum(S.max_shift)} (mean over {S.n_shuffles} orders vs file order; sNAG at its large η* is the
exception: it is unstable from one order to the next, std
{fnum(float(np.std(S.shuffled['snag@eta*'])))}).
"""


def capacity_md(S):
    nag_eta, nag_loss = best_of(S.ours[("nag", "raw")])
    tuned_linear = [nag_loss, best_of(S.ours[("adagrad", "raw")])[1],
                    best_of(S.ours[("adagrad", "norm")])[1], best_of(S.ours[("snag", "raw")])[1],
                    S.vw[("7.4", "raw")]["average_loss"], min(S.vw[("grid", "raw")].values()),
                    min(S.vw[("grid", "norm")].values())]
    return f"""
**2. A linear model cannot get there.** The best one-against-all *linear* logistic model in
hindsight (fitted to convergence by Newton's method on the whole training file, then scored on
that same file) has a training 0-1 error of {fnum(S.hindsight_linear)}. On data in random order
the progressive loss of a linear learner estimates the error of the linear models it passes
through on unseen rows, which is not expected to fall below the in-sample error of the best
linear fit; the paper's 0.036 is {0.036 / S.hindsight_linear:.0%} of that in-sample figure. (The
logistic fit does not minimise the 0-1 loss itself, so a linear model with a somewhat lower 0-1
error may exist, but none of the linear learners here, online or offline, gets anywhere near
0.036.) The tuned linear learners land between {fnum(min(tuned_linear))} and
{fnum(max(tuned_linear))} (NAG {fnum(nag_loss)} at η={feta(nag_eta)}, VW
{fnum(S.vw[('7.4', 'raw')]['average_loss'])} at -l 7.4, AdaGrad {fnum(tuned_linear[1])} raw /
{fnum(tuned_linear[2])} max-normalized); ScInOL and Kotłowski run untuned and land higher.

**3. Quadratic features do get there.** VW with all quadratic interactions (`--oaa 7 -l 7.4
--interactions ::`) gives {fnum(S.vw_quad['raw']['average_loss'])} raw and
{fnum(S.vw_quad['norm']['average_loss'])} max-normalized; our NAG on the 9 features plus their 45
products x_i·x_j (i ≤ j) gives {fnum(S.quad_star[1])} at η={feta(S.quad_star[0])}; the best
quadratic OAA logistic model in hindsight has training error {fnum(S.hindsight_quad)}. The
paper's 0.036 (and sNAG's 0.026) is in the range of a model with more capacity than a linear one
on the 9 raw features; its text does not say which features VW was given, so this is a plausible
explanation, not a proven one.
"""


def conclusion_md(S):
    return f"""
**Conclusion.** Our NAG matches today's VW on the same setup (file order, η=7.4: ours
{fnum(S.ours[('nag', 'raw')].get(7.4, {}).get('zero_one'))}; VW
{fnum(S.vw[('7.4', 'raw')]['average_loss'])} with its default squared loss,
{fnum(S.vw[('grid_logistic', 'raw')].get(7.4))} with the logistic loss ours uses), and the
invariance claim (same loss on raw and max-normalized data for NAG; not for AdaGrad) holds at
every practical η. The paper's absolute figure 0.036 is not reachable by a linear model on the
9 raw features in one pass, in file order or shuffled; with all quadratic features VW gets
{fnum(S.vw_quad['raw']['average_loss'])}.
"""


# -------------------------------------------------------------------------------------- main

def to_json(S):
    def strip(res):
        return {feta(eta): {k: r[k] for k in ("zero_one", "logloss", "error")}
                for eta, r in res.items()}

    def by_eta(d):
        return {feta(e): v for e, v in d.items()}

    vw = {"7.4/raw": S.vw[("7.4", "raw")], "7.4/norm": S.vw[("7.4", "norm")],
          **{f"{g}/{kind}": by_eta(S.vw[(key, kind)]) for kind in KINDS
             for g, key in (("grid_squared", "grid"), ("grid_logistic", "grid_logistic"))},
          "quadratic": S.vw_quad}
    order = dict(S.order, nag_best_eta_on_shuffles=S.nag_shuf_star, class_sorted=S.sorted_runs,
                 shuffled={k: by_eta(v) if isinstance(v, dict) else v
                           for k, v in S.shuffled.items()})
    return {"setup": S.setup,
            "ours": {f"{alg}/{kind}": strip(res) for (alg, kind), res in S.ours.items()},
            "best": {f"{alg}/{kind}": dict(zip(("eta", "zero_one"), best_of(res)))
                     for (alg, kind), res in S.ours.items()},
            "untuned": {f"{alg}/{kind}": {k: r[k] for k in ("zero_one", "logloss", "error")}
                        for (alg, kind), r in S.untuned.items()},
            "paper": PAPER, "invariance": S.inv, "vw": vw, "order": order,
            "capacity": {"hindsight_linear_oaa_logistic_train_error": S.hindsight_linear,
                         "hindsight_quadratic_oaa_logistic_train_error": S.hindsight_quad,
                         "nag_quadratic_features": by_eta(S.quad_nag)}}


def main():
    args = parse_args(__doc__, shuffles=(int, None), seed=(int, 2013))
    h = header()
    X, y = load_shuttle()
    scale = np.abs(X).max(axis=0)
    S = SimpleNamespace(X=X, y=y, scale=scale, data={"raw": X, "norm": X / scale},
                        etas=grid(args.quick), n_shuffles=args.shuffles or (2 if args.quick else 10),
                        rng=np.random.default_rng(args.seed))
    S.setup = {"rows": len(y), "features": X.shape[1], "classes": K, "etas": S.etas,
               "max_abs_per_feature": scale.tolist(), "shuffles": S.n_shuffles, "seed": args.seed,
               "class_counts": np.bincount(y.astype(int))[1:].tolist()}
    for step in (file_order, invariance, vw_file_order, order_tests, reorderings, capacity):
        step(S)
    body = "".join(part(S) for part in (setup_md, table2_md, invariance_md, order_md,
                                        capacity_md, conclusion_md))
    write_results(result_name("shuttle", args.quick),
                  "Shuttle: Ross et al. Table 2 (NAG vs AdaGrad, raw vs max-normalized) and VW",
                  h, body, to_json(S))


if __name__ == "__main__":
    main()
