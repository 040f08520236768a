"""Every example given to ``Learn`` accounted for, counted inside the pipeline.

A run's identity: each example read is learned, served (predicted without a label, not
learned), refused or replayed (skipped as learned before a resume, which only a resumed run may
do), and the models grew by the examples learned. Delayed outcomes add their terms to ``Tally``
and to ``Tally.problem``, nothing else. The counts are taken from the steps' outputs themselves
(the blocks going in, the prediction and dead-letter tables coming out, and each model's
examples at the end of its input), so a retried or split bundle counts once, as its committed
outputs do; Beam metrics may count a retry twice or, on some runners, not at all. Once a
bounded input has ended, a run whose counts do not add up fails with one line
(``AccountingError``).
"""
import typing

import apache_beam as beam
from apache_beam.transforms import trigger, window

from ..store.keyed_model import served_count

ACCOUNTS = "accounts"  # the tag of a step's Tally output


class Tally(typing.NamedTuple):
    read: int = 0       # examples (or the user's own records) given to Learn
    learned: int = 0    # examples predicted, then learned
    refused: int = 0    # records sent to the dead letters instead
    replayed: int = 0   # examples a resumed run read again and skipped, as learned before
    in_models: int = 0  # examples the models learned in this run, by their own count
    served: int = 0     # examples without a label, predicted and not learned

    def __add__(self, other):
        return Tally(*(a + b for a, b in zip(self, other)))

    def problem(self, resumed, models_counted=True):
        """None when every example read is accounted for exactly once, else the one line
        saying what is not. ``models_counted``: the models reported ``in_models``."""
        missing = self.read - (self.learned + self.served + self.refused + self.replayed)
        counts = (f"learned {self.learned:,}, served {self.served:,}, refused "
                  f"{self.refused:,}, replayed {self.replayed:,}")
        if missing > 0:
            what = (f"{missing:,} of {self.read:,} examples given to Learn were neither "
                    f"learned, served, refused nor replayed (lost): {counts}")
        elif missing < 0:
            what = (f"{-missing:,} more examples were learned, served, refused or replayed "
                    f"than the {self.read:,} given to Learn (counted twice): {counts}")
        elif self.replayed and not resumed:
            what = (f"{self.replayed:,} examples were skipped as learned before in a run that "
                    "did not resume: a model met its examples out of input order")
        elif models_counted and self.in_models != self.learned:
            what = (f"the models learned {self.in_models:,} examples by their own count, and "
                    f"predicted {self.learned:,}: a model's state was lost or written twice")
        else:
            return None
        return (f"{what}; the run is not a success (a bug: please report it with the runner "
                "used)")


class AccountingError(RuntimeError):
    """A run whose examples do not add up (``Tally.problem``)."""


def count_as(*fields):
    """A step counting the rows of each ExampleBlock or Arrow table as ``fields`` of a Tally,
    item by item (the combine sums them within a bundle before the shuffle)."""
    def tally(item):
        return Tally(**dict.fromkeys(fields, len(item)))
    return beam.Map(tally).with_output_types(Tally)


def count_predictions():
    """A step counting each prediction table's rows as learned or served (its ``served``
    column)."""
    def tally(table):
        served = served_count(table)
        return Tally(learned=table.num_rows - served, served=served)
    return beam.Map(tally).with_output_types(Tally)


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
                | "Whole run" >> beam.WindowInto(
                    window.GlobalWindows(), trigger=trigger.AfterWatermark(),
                    accumulation_mode=trigger.AccumulationMode.DISCARDING)
                | "Sum" >> beam.CombineGlobally(sum_tallies).without_defaults()
                | "Check" >> beam.Map(_check, self.resumed, self.models_counted))


def sum_tallies(tallies):
    return sum(tallies, Tally())
