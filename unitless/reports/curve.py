"""`unitless curve`: learning progress from the predictions `unitless train` wrote.

Per model key, the progressive loss (the running mean of each prediction's ``loss``, made
before the model learned the example) and, for classification, the running error rate (the
mean of the predictions' ``error`` column, set by the model that made them) against examples
seen. Free of Beam; matplotlib (the ``plot`` extra) is imported only to draw.

Delivery is at least once: a prediction repeated after a restart has the same
``(model_key, examples_seen)`` and is counted once; part files are in no order. Served
predictions (``served``: no label, so no loss) are not part of a learning curve.
"""
import glob
import json
import logging
import math
import os
from typing import Any, Iterable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from ..parse.formats import FORMATS, OUTPUT_FORMATS
from ..parse.records import clip

log = logging.getLogger("unitless")
COLUMNS = {"model_key": pa.string(), "examples_seen": pa.int64(), "loss": pa.float64(),
           "error": pa.float64(), "served": pa.bool_()}
SUFFIXES = tuple(ending for name in OUTPUT_FORMATS for ending in FORMATS[name].extensions)


def prediction_files(paths: Iterable[str]) -> list[str]:
    """The part files named by ``paths``: a directory gives its ``part-*`` files, a file itself.
    A path that does not exist is an error."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            files.extend(sorted(f for f in glob.glob(os.path.join(path, "part-*"))
                                if f.endswith(SUFFIXES) and os.path.isfile(f)))
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise FileNotFoundError(f"predictions not found: {path}")
    return files


def _read_file(path):
    """(rows as a dict of numpy arrays or None, malformed rows skipped) for one part file."""
    try:
        if path.endswith(".parquet"):
            table = pq.read_table(path, columns=[c for c in COLUMNS
                                                 if c in pq.read_schema(path).names])
        elif path.endswith(".csv"):
            table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
                column_types=COLUMNS, include_columns=list(COLUMNS),
                include_missing_columns=True))
        else:
            table = pajson.read_json(path, parse_options=pajson.ParseOptions(
                explicit_schema=pa.schema(COLUMNS), unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
        if path.endswith((".parquet", ".csv")):
            log.warning("skipped %s: not a readable prediction file", path)
            return None, 0
        return _read_json_lines(path)  # some line is malformed: read line by line
    n = table.num_rows
    cols = {c: table.column(c) if c in table.column_names else pa.nulls(n, t)
            for c, t in COLUMNS.items()}
    rows = {"key": np.array(cols["model_key"].fill_null("").to_pylist(), dtype=object),
            "seen": cols["examples_seen"].cast(pa.float64()).to_numpy(zero_copy_only=False),
            "loss": cols["loss"].cast(pa.float64()).to_numpy(zero_copy_only=False),
            "error": cols["error"].cast(pa.float64()).to_numpy(zero_copy_only=False)}
    served = cols["served"].fill_null(False).to_numpy(zero_copy_only=False)
    good = np.isfinite(rows["seen"]) & (rows["seen"] >= 1) & np.isfinite(rows["loss"])
    return {k: v[good & ~served] for k, v in rows.items()}, int(n - (good | served).sum())


def _read_json_lines(path):
    keys, seen, loss, error, bad = [], [], [], [], 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if row.get("served") is True:
                    continue
                key, s, l, e = (row.get("model_key") or "", row["examples_seen"], row["loss"],
                                row.get("error"))
                if not (isinstance(key, str) and type(s) is int and s >= 1 and math.isfinite(l)
                        and (e is None or isinstance(e, (int, float)))):
                    raise ValueError
            except (ValueError, KeyError, TypeError, AttributeError):
                bad += 1
                continue
            keys.append(key), seen.append(s), loss.append(float(l))
            error.append(math.nan if e is None else float(e))
    return {"key": np.array(keys, dtype=object), "seen": np.array(seen, dtype=np.float64),
            "loss": np.array(loss), "error": np.array(error)}, bad


def read_predictions(paths: Iterable[str]) -> tuple[
        dict[str, tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]], int]:
    """{model key: (examples_seen, loss, error or None)}: numpy arrays per key, sorted by
    examples_seen, one row per (model_key, examples_seen) (the first read of duplicates); and
    the number of malformed rows skipped. ``error`` is None unless every row has one."""
    parts, skipped = [], 0
    for path in prediction_files(paths):
        rows, bad = _read_file(path)
        skipped += bad
        if rows is not None and len(rows["key"]):
            parts.append(rows)
    if skipped:
        log.warning("skipped %d malformed prediction rows", skipped)
    if not parts:
        return {}, skipped
    rows = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    names, which = np.unique(rows["key"].astype(str), return_inverse=True)
    seen = rows["seen"].astype(np.int64)
    order = np.lexsort((seen, which))  # by key, then examples seen; stable: first read first
    which, seen = which[order], seen[order]
    first = np.r_[True, (np.diff(which) != 0) | (np.diff(seen) != 0)]
    order, which, seen = order[first], which[first], seen[first]
    starts = np.r_[0, np.flatnonzero(np.diff(which)) + 1, len(which)]
    out = {}
    for a, b in zip(starts[:-1], starts[1:]):
        loss, error = rows["loss"][order[a:b]], rows["error"][order[a:b]]
        out[str(names[which[a]])] = (seen[a:b], loss,
                                     error if np.isfinite(error).all() else None)
    short = {k: (len(s), int(s[-1])) for k, (s, _, _) in out.items() if len(s) < s[-1]}
    if short:
        key, (n, last) = next(iter(short.items()))
        log.warning("%d model key(s) have no prediction here for some examples they saw (e.g. "
                    "%s: %d of %d); their curves are over the predictions found", len(short),
                    clip(repr(key), 40), n, last)
    return out, skipped


def running_mean(values: np.ndarray) -> np.ndarray:
    """The mean of the first i values, for each i (the cumulative sum taken in order, as the
    learner sums its progressive loss)."""
    return np.cumsum(values) / np.arange(1, len(values) + 1)


def curves(predictions: dict[str, tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]]
           ) -> dict[str, dict[str, Any]]:
    """{model key: dict(seen, loss, error)}: progressive loss and error rate (None for
    regression) after each prediction, against examples seen."""
    return {key: {"seen": seen, "loss": running_mean(loss),
                  "error": None if error is None else running_mean(error)}
            for key, (seen, loss, error) in predictions.items()}


def by_examples(found: dict[str, dict[str, Any]]) -> list[str]:
    """The model keys, most predictions first (then by key)."""
    return sorted(found, key=lambda k: (-len(found[k]["seen"]), k))


def render(found: dict[str, dict[str, Any]], top: int = 20) -> str:
    """A line per model key (the ``top`` with most predictions): predictions, the last examples
    seen, final progressive loss and error rate."""
    out = [f"{'model key':<24} {'predictions':>11} {'last seen':>10} {'prog. loss':>11} "
           f"{'error':>7}"]
    keys = by_examples(found)
    for key in keys[:top]:
        c = found[key]
        error = "" if c["error"] is None else f"{c['error'][-1]:.4f}"
        out.append(f"{clip(repr(key), 24):<24} {len(c['seen']):>11,} {int(c['seen'][-1]):>10,} "
                   f"{c['loss'][-1]:>11.6f} {error:>7}".rstrip())
    if len(keys) > top:
        out.append(f"... and {len(keys) - top} more model keys")
    return "\n".join(out)


def _thin(n, points=4000):
    """Indices of at most ~``points`` of n points, spaced evenly on a log scale (the last one
    always in), so a million-example curve draws quickly and looks the same."""
    if n <= points:
        return np.arange(n)
    return np.unique(np.r_[np.geomspace(1, n, points).astype(np.int64) - 1, n - 1])


def plot(found: dict[str, dict[str, Any]], output: str, top: int = 10) -> None:
    """Draw the curves of the ``top`` model keys with most predictions into the PNG ``output``:
    progressive loss, and error rate when any key is a classifier."""
    try:
        import matplotlib
    except ImportError:
        raise ValueError("drawing the curve needs matplotlib: pip install 'unitless[plot]'"
                         ) from None
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # not its font cache notes
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = by_examples(found)[:top]
    panels = [("progressive loss", "loss")]
    if any(found[k]["error"] is not None for k in keys):
        panels.append(("error rate", "error"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    log_x = max(len(found[k]["seen"]) for k in keys) >= 1000
    for ax, (title, name) in zip(axes[0], panels):
        for key in keys:
            c = found[key]
            if c[name] is None:
                continue
            i = _thin(len(c["seen"]))
            ax.plot(c["seen"][i], c[name][i], label=clip(repr(key), 30), linewidth=1.2)
        ax.set_xscale("log" if log_x else "linear")
        ax.set_xlabel("examples seen")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    shown = (f"{len(keys)} of {len(found)} model keys (most examples)" if len(found) > len(keys)
             else f"{len(keys)} model key{'s' if len(keys) > 1 else ''}")
    axes[0][0].legend(title=shown, fontsize="small")
    fig.suptitle("unitless: learning progress")
    fig.tight_layout()
    directory = os.path.dirname(os.path.abspath(output))
    os.makedirs(directory, exist_ok=True)
    fig.savefig(output, format="png", dpi=110)
    plt.close(fig)
