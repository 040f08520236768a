"""What a finished training run tells its user: a line per model key (examples, progressive
loss, error rate, checkpoint), the run's totals, and whether it refused too much of its input
to count as a success. Free of Beam: it reads the checkpoints and the dead letters where they were written."""
import heapq
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..connectors.storage import join, list_dir, modified, read_text
from ..learner import read_metadata
from ..parse.records import clip
from ..store.by_group import load_located, locator, part_models
from ..store.catalog import load_latest, model_keys, newest_summaries, where_of
from ..store.shards import sharded_models


@dataclass
class RunCounts:
    """What this run did (from the runner's metrics)."""
    examples: int   # examples learned
    refused: int    # records sent to the dead letters
    seconds: float  # wall time of the pipeline
    skipped: int = 0  # examples read again after --resume and skipped, as learned before
    served: int = 0   # examples without a label, predicted and not learned
    # --labels: served examples whose label did not come, and of them those learned with
    # --expired-label (counted in ``examples`` too)
    expired: int = 0
    expired_learned: int = 0

    @property
    def read(self) -> int:
        """Records read: each example learned from its record, served, or skipped, and each
        record refused (an example learned with --expired-label has no record of its own)."""
        return (self.examples - self.expired_learned + self.served + self.skipped
                + self.refused)

    @property
    def learned_from_labels(self) -> int:
        """Examples learned with a label their input gave them."""
        return self.examples - self.expired_learned


@dataclass
class ModelLine:
    key: Optional[str]
    examples: int            # examples the model has learned (over every run, with --resume)
    progressive_loss: float
    error_rate: Optional[float]  # None for regression losses
    checkpoint: str


@dataclass
class ModelsShown:
    """What a summary shows of a model directory's models: the ``top`` with most examples
    (ties by key), and the totals over every one of them."""
    top: list[ModelLine]
    count: int
    examples: int
    progressive_loss: float  # over every model's examples


def model_lines(model_dir: str) -> list[ModelLine]:
    """A ModelLine for each model key with a checkpoint, most examples first: its newest valid
    one (a sharded model: its consistent cut); `unitless inspect`'s."""
    found = []
    for key in model_keys(model_dir):
        newest = load_latest(model_dir, key)
        if newest is not None:
            found.append((key, newest[0], read_metadata(newest[1])))
    # models over feature shards: their consistent cut (shard 0 counts the errors)
    found += [(key, pattern, meta) for key, _, pattern, meta, _ in sharded_models(model_dir)]
    lines = [model_line(key, path, meta) for key, path, meta in found]
    return sorted(lines, key=lambda m: (-m.examples, m.key))


def shown(lines: list[ModelLine], top: int = 20) -> ModelsShown:
    """What a summary shows of ``lines`` (``model_lines``' order)."""
    total = sum(m.examples for m in lines)
    return ModelsShown(lines[:top], len(lines), total,
                       sum(m.progressive_loss * m.examples for m in lines) / max(total, 1))


def newest_shown(model_dir: str, top: int = 20) -> ModelsShown:
    """What a summary shows of the newest checkpoints listed, from what their manifests hold of
    them (``newest_summaries``: a run's own summary of the checkpoints it has just written,
    which reads no part), a ModelLine made only for the ``top`` (a million models' take
    seconds)."""
    found = [*newest_summaries(model_dir).items(),
             *((key, (pattern, meta)) for key, _, pattern, meta, _
               in sharded_models(model_dir, verify=False))]
    examples = np.fromiter((int(meta["examples_seen"]) for _, (_, meta) in found), np.int64,
                           len(found))
    losses = np.fromiter((float(meta["progressive_loss"]) for _, (_, meta) in found),
                         np.float64, len(found))
    keys = [key for key, _ in found]
    lines = [model_line(keys[i], where_of(found[i][1][0]), found[i][1][1])
             for i in _most_examples(examples, keys, top)]
    total = int(examples.sum())
    return ModelsShown(lines, len(found), total, float((losses * examples).sum()) / max(total, 1))


def _most_examples(examples, keys, top):
    """The indices of the ``top`` models with most ``examples``, ties by key, in that order."""
    chosen = list(range(len(keys)))
    if len(keys) > top > 0:
        least = np.partition(examples, len(keys) - top)[len(keys) - top]  # (the top-th most)
        chosen = np.flatnonzero(examples > least).tolist()
        chosen += heapq.nsmallest(top - len(chosen), np.flatnonzero(examples == least).tolist(),
                                  key=keys.__getitem__)
    return sorted(chosen, key=lambda i: (-examples[i], keys[i]))[:max(top, 0)]


def model_line(key: Optional[str], checkpoint: str, meta: dict) -> ModelLine:
    """The ModelLine of a model's checkpoint from its metadata."""
    seen = int(meta["examples_seen"])
    classification = meta["loss"] in ("logistic", "hinge")
    return ModelLine(key, seen, float(meta["progressive_loss"]),
                     float(meta.get("errors", 0.0)) / max(seen, 1) if classification else None,
                     checkpoint)


def part_lines(part_path: str) -> list[ModelLine]:
    """A ModelLine for each model of a group's part file, in the part's order, each checkpoint
    named by its locator (``<part>#<n>``); every one verified (ValueError naming the first that
    is not valid)."""
    lines = []
    for n, key, _ in part_models(part_path):
        located = locator(part_path, n)
        try:
            table = load_located(part_path, n)[0]
        except ValueError as err:
            raise ValueError(f"invalid checkpoint {located}: {err}") from None
        lines.append(model_line(key, located, read_metadata(table)))
    return lines


def render(models: ModelsShown, counts: RunCounts) -> str:
    """The run's table: the models shown, the totals, and the run."""
    predicted = counts.examples + counts.served
    rate = predicted / counts.seconds if counts.seconds > 0 else 0.0
    skipped = (f", {counts.skipped:,} skipped (learned before --resume)" if counts.skipped
               else "")
    served = f", {counts.served:,} served (no label)" if counts.served else ""
    return (render_models(models) + "\n"
            f"this run: {counts.examples:,} examples learned{served} ({rate:,.0f} examples/s "
            f"over {counts.seconds:.1f} s), {counts.refused:,} records refused{skipped}"
            f"{expired_text(counts)}")


def expired_text(counts: RunCounts) -> str:
    """What the summary says of the examples whose label did not come (--labels)."""
    if not counts.expired:
        return ""
    learned = (", learned with --expired-label" if counts.expired_learned == counts.expired
               else f", {counts.expired_learned:,} of them learned with --expired-label"
               if counts.expired_learned else "")
    return f", {counts.expired:,} expired without their label{learned}"


def render_models(models: ModelsShown) -> str:
    """A line per model shown, then the totals."""
    out = [f"{'model key':<24} {'examples':>10} {'prog. loss':>11} {'error':>7}  checkpoint"]
    for m in models.top:
        error = "" if m.error_rate is None else f"{m.error_rate:.4f}"
        out.append(f"{clip(repr(m.key), 24):<24} {m.examples:>10,} {m.progressive_loss:>11.6f} "
                   f"{error:>7}  {m.checkpoint}")
    if models.count > len(models.top):
        out.append(f"... and {models.count - len(models.top)} more model keys")
    if models.count:
        out.append(f"{'all ' + str(models.count) + ' models':<24} {models.examples:>10,} "
                   f"{models.progressive_loss:>11.6f}")
    return "\n".join(out)


def refusal_problem(counts: RunCounts, max_fraction: float, dead_letter_dir: Optional[str] = None,
                    since: Optional[float] = None, resumed: bool = False) -> Optional[str]:
    """None when the run learned something from its records' labels (or, resumed, found
    examples it had learned before) and refused at most ``max_fraction`` of what it read; else
    the one-line reason it failed, naming the commonest refusal reason and an example record
    when the dead letters are files (those written since ``since``). Serving is no success on
    its own: a training run is for learning, and one that only served (its labels missing, or
    none joining their examples) or only learned --expired-label's label has lost what it was
    run for."""
    read = counts.read
    if not read:
        return None if resumed else "no example was learned: the input holds no records"
    if counts.learned_from_labels or (resumed and counts.skipped):
        if counts.refused <= max_fraction * read:
            return None
        what = (f"{counts.refused:,} of {read:,} records were refused "
                f"({counts.refused / read:.0%}, more than --max-dead-fraction {max_fraction:g})")
    else:
        what = nothing_learned(counts, read)
    example = commonest_refusal(dead_letter_dir, since) if dead_letter_dir else None
    return what + (f"; commonest reason: {example}" if example else "")


def nothing_learned(counts: RunCounts, read: int) -> str:
    """Why a run whose records taught no example is not a success, in one line."""
    if counts.refused == read:
        return f"no example was learned: all {read:,} records were refused"
    parts = [f"{n:,} {what}" for n, what in (
        (counts.served, "served without a label"),
        (counts.expired, "of them expired waiting for their label"),
        (counts.expired_learned, "of them learned with --expired-label only"),
        (counts.skipped, "skipped as learned before --resume"),
        (counts.refused, "records refused")) if n]
    return (f"no example was learned from a label: of {read:,} records read, "
            + ", ".join(parts))


_VALUES = re.compile(r"'[^']*'|\"[^\"]*\"|-?\d[\d.e+-]*")


def commonest_refusal(directory: str, since: Optional[float] = None) -> Optional[str]:
    """The commonest reason among the dead letters written to ``directory`` since ``since``
    (reasons alike but for the values they quote count as one), with one record that had it."""
    rows: list[dict[str, Any]] = []
    for name in list_dir(directory)[0]:
        path = join(directory, name)
        if (name.startswith("part-") and name.endswith(".jsonl")
                and (since is None or modified(path) >= since)):
            rows.extend(json.loads(line) for line in read_text(path).split("\n") if line)
    if not rows:
        return None
    kinds = Counter(_VALUES.sub("…", r["reason"]) for r in rows)
    kind, n = kinds.most_common(1)[0]
    row = next(r for r in rows if _VALUES.sub("…", r["reason"]) == kind)
    raw = "" if row["raw"] is None else f" {clip(row['raw'], 80)!r}"
    return (f"{row['reason']} ({n:,} records), e.g. {row['source']} at "
            f"{row['position']}:{raw}")
