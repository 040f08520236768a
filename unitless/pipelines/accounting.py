"""Every example given to ``Learn`` accounted for, counted inside the pipeline.

Each example read is learned, served, refused or replayed, and the models grew by the examples
learned, counted from the steps' outputs; each model's learning is checked as an unbroken chain
of ``examples_seen`` against the predictions (``fingerprint``). A bounded run whose counts do
not add up fails with one line (``AccountingError``). Why it is counted so:
docs/design.md, "Accounting"; what it promises: docs/guarantees.md.
"""
import hashlib
import typing
from typing import Iterable, List, Optional, Tuple

import apache_beam as beam
from apache_beam.transforms import trigger, window
import numpy as np
import pyarrow.compute as pc

from ..models.predictions import served_count

ACCOUNTS = "accounts"  # the tag of a step's Tally output
# the tag of a stateful step's models' ranges as they leave state: (the step's key,
# ((model key, examples_seen when this run made or read it, examples_seen as it left), ...))
RANGES = "ranges"
MASK = (1 << 64) - 1


class Tally(typing.NamedTuple):
    read: int = 0       # examples (or the user's own records) given to Learn
    learned: int = 0    # examples predicted, then learned
    refused: int = 0    # records sent to the dead letters instead
    replayed: int = 0   # examples a resumed run read again and skipped, as learned before
    in_models: int = 0  # examples the models learned in this run, by their own count
    served: int = 0     # examples without a label, predicted and not learned
    # examples a model key learned again, in a range of its examples_seen it had covered before
    # (its state was lost, or an older one read back)
    overlapping: int = 0
    learned_print: int = 0    # ``fingerprint`` of the learned predictions' (model key, seen)
    in_models_print: int = 0  # the same of the ranges the models reported
    # ``--labels``: served examples that started waiting for their labels less those that
    # stopped (joined or expired): none once a bounded input has ended
    waiting: int = 0
    expired: int = 0          # served examples whose label did not come (within --label-wait)
    expired_learned: int = 0  # ... learned with --expired-label: a prediction without a record

    def __add__(self, other):
        return Tally(*(a + b for a, b in zip(self, other)))

    def problem(self, resumed: bool, models_counted: bool = True) -> Optional[str]:
        """None when every example read is accounted for exactly once, else the one line
        saying what is not. ``models_counted``: the models reported ``in_models``."""
        missing = (self.read + self.expired_learned
                   - (self.learned + self.served + self.refused + self.replayed))
        counts = (f"learned {self.learned:,}, served {self.served:,}, refused "
                  f"{self.refused:,}, replayed {self.replayed:,}"
                  + (f", of them expired and learned {self.expired_learned:,}"
                     if self.expired_learned else ""))
        if missing > 0:
            what = (f"{missing:,} of {self.read:,} examples given to Learn were neither "
                    f"learned, served, refused nor replayed (lost): {counts}")
        elif missing < 0:
            what = (f"{-missing:,} more examples were learned, served, refused or replayed "
                    f"than the {self.read:,} given to Learn (counted twice): {counts}")
        elif self.waiting:
            what = (f"{self.waiting:,} served examples still wait for their labels once the "
                    f"input has ended (expired: {self.expired:,}): the join lost track of them")
        elif self.replayed and not resumed:
            what = (f"{self.replayed:,} examples were skipped as learned before in a run that "
                    "did not resume: a model met its examples out of input order")
        elif models_counted and self.in_models != self.learned:
            what = (f"the models learned {self.in_models:,} examples by their own count, and "
                    f"predicted {self.learned:,}: a model's state was lost or written twice")
        elif models_counted and self.overlapping:
            what = (f"models learned {self.overlapping:,} of the {self.read:,} examples given "
                    "to Learn at examples_seen counts they had passed before in this run (a "
                    "model's state was lost and started again, or an older state read back): "
                    f"examples learned twice or lost: {counts}")
        elif models_counted and (self.learned_print - self.in_models_print) & MASK:
            what = (f"the {self.learned:,} predictions learned are not the examples the models "
                    f"counted (their model keys and examples_seen): {counts}")
        else:
            return None
        return (f"{what}; the run is not a success (a bug: please report it with the runner "
                "used)")


class AccountingError(RuntimeError):
    """A run whose examples do not add up (``Tally.problem``)."""


def count_as(*fields: str) -> beam.PTransform:
    """A step counting the rows of each ExampleBlock or Arrow table as ``fields`` of a Tally,
    item by item (the combine sums them within a bundle before the shuffle)."""
    def tally(item):
        return Tally(**dict.fromkeys(fields, len(item)))
    return beam.Map(tally).with_output_types(Tally)


def count_predictions() -> beam.PTransform:
    """A step counting each prediction table's rows (``predictions_tally``)."""
    return beam.Map(predictions_tally).with_output_types(Tally)


def predictions_tally(table):
    """A prediction table's rows as learned or served (its ``served`` column), with the
    learned rows' ``fingerprint``."""
    served = served_count(table)
    learned = table.filter(pc.invert(table.column("served"))) if served else table
    keys = pc.dictionary_encode(learned.column("model_key")).combine_chunks()
    return Tally(learned=table.num_rows - served, served=served, learned_print=fingerprint(
        key_hashes(keys.dictionary.to_pylist())[keys.indices.to_numpy()],
        learned.column("examples_seen").to_numpy()))


def key_hashes(keys: Iterable[str]) -> np.ndarray:
    """Model keys -> their 64-bit hashes (uint64; the same in every process)."""
    return np.array([int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(),
                                    "little") for k in keys], dtype=np.uint64)


def fingerprint(key_hashes: np.ndarray, seen: np.ndarray) -> int:
    """The sum (mod 2**64) of a mixing hash (splitmix64's) of each (model key's hash,
    examples_seen) pair: equal for two collections of pairs when they hold the same pairs, as
    a multiset, and unequal otherwise but with a chance of 2**-64."""
    z = key_hashes ^ (np.asarray(seen).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return int((z ^ (z >> np.uint64(31))).sum(dtype=np.uint64))


def models_left(step_key: str, ranges: Iterable[Tuple[str, int, int]]
                ) -> List[beam.pvalue.TaggedOutput]:
    """The outputs of a stateful step whose models leave state (the end of its input, or idle):
    ``ranges`` [(model key, examples_seen when this run made or read it back, as it leaves)]
    counted as learned by the models themselves (``Tally.in_models`` and its print) and
    reported for the check of overlaps (``RANGES``)."""
    ranges = tuple(ranges)
    starts = np.array([start for _, start, _ in ranges], dtype=np.int64)
    lengths = np.array([end for _, _, end in ranges], dtype=np.int64) - starts
    # every range's examples_seen, start + 1 to end, one after the other
    firsts = np.repeat(starts + 1 - (np.cumsum(lengths) - lengths), lengths)
    seen = np.arange(int(lengths.sum())) + firsts
    printed = fingerprint(np.repeat(key_hashes([k for k, _, _ in ranges]), lengths), seen)
    return [beam.pvalue.TaggedOutput(ACCOUNTS, Tally(in_models=int(lengths.sum()),
                                                     in_models_print=printed)),
            beam.pvalue.TaggedOutput(RANGES, (step_key, ranges))]


def covered_twice(ranges: Iterable[Tuple[str, int, int]]) -> int:
    """How many examples_seen of the ranges [(model key, start, end)] (each covering start + 1
    to end) were covered by an earlier range of the same model key."""
    reach: dict[str, int]
    twice, reach = 0, {}
    for key, start, end in sorted(ranges):
        covered = reach.get(key, start)
        twice += max(0, min(end, covered) - start)
        reach[key] = max(covered, end)
    return twice


class CountOverlaps(beam.PTransform):
    """(step key, ranges) reports (``models_left``) -> a Tally of the examples learned in an
    overlapping range, per step key once its input has ended (every report of a model key
    comes from its one step key)."""

    def expand(self, reports):
        return (reports
                | "Whole run" >> whole_run()
                | "By step key" >> beam.GroupByKey()
                | "Overlaps" >> beam.Map(lambda kv: Tally(overlapping=covered_twice(
                    [r for ranges in kv[1] for r in ranges]))).with_output_types(Tally)
                | "As the other tallies" >> beam.WindowInto(window.GlobalWindows()))


def whole_run() -> beam.WindowInto:
    """Into one pane, fired once the input has ended (the watermark past the end of the global
    window: a run whose input has an end but whose steps are streaming is summed too)."""
    return beam.WindowInto(window.GlobalWindows(), trigger=trigger.AfterWatermark(),
                           accumulation_mode=trigger.AccumulationMode.DISCARDING)


def _check(total, resumed, models_counted):
    problem = total.problem(resumed, models_counted)
    if problem:
        raise AccountingError(problem)
    return total


class CheckAccounts(beam.PTransform):
    """Tallies -> the run's total, once its input has ended; fails the run when it does not
    add up (``Tally.problem``). For a bounded input: a global combine that fires when the
    watermark passes the end of the global window (so a run whose input has an end but whose
    steps are streaming, over feature shards, is summed at its end too). A stream that never
    ends is not summed: it would only hold a partial sum per bundle for ever."""

    def __init__(self, resumed, models_counted=True):
        super().__init__()
        self.resumed, self.models_counted = resumed, models_counted

    def expand(self, tallies):
        return (tallies
                | "Whole run" >> whole_run()
                | "Sum" >> beam.CombineGlobally(sum_tallies).without_defaults()
                | "Check" >> beam.Map(_check, self.resumed, self.models_counted))


def sum_tallies(tallies):
    return sum(tallies, Tally())
