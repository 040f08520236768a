"""Every example given to ``Learn`` accounted for, counted inside the pipeline.

A run's identity: each example read is learned, refused or replayed (skipped as learned before
a resume). Serving and delayed outcomes add their terms to ``Tally`` and to ``Tally.accounted``
and nothing else. The counts are taken from the PCollections themselves (the blocks going in,
the prediction and dead-letter tables coming out) and summed by one global combine, so a
retried or split bundle counts once, as its committed outputs do; Beam metrics may count a
retry twice or, on some runners, not at all. When the input ends and the identity does not
hold, the run fails with one line (``AccountingError``).
"""
import typing

import apache_beam as beam
from apache_beam.transforms import trigger, window

ACCOUNTS = "accounts"  # the tag of a step's Tally output


class Tally(typing.NamedTuple):
    read: int = 0      # examples (or the user's own records) given to Learn
    learned: int = 0   # examples predicted, then learned
    refused: int = 0   # records sent to the dead letters instead
    replayed: int = 0  # examples a resumed run read again and skipped, as learned before

    def __add__(self, other):
        return Tally(*(a + b for a, b in zip(self, other)))

    @property
    def accounted(self):
        return self.learned + self.refused + self.replayed

    def problem(self):
        """None when every example read is accounted for exactly once, else the one line
        saying how many are not."""
        missing = self.read - self.accounted
        if not missing:
            return None
        what = (f"{missing:,} of {self.read:,} examples given to Learn were neither learned, "
                "refused nor replayed (lost)" if missing > 0 else
                f"{-missing:,} more examples were learned, refused or replayed than the "
                f"{self.read:,} given to Learn (counted twice)")
        return (f"{what}: learned {self.learned:,}, refused {self.refused:,}, replayed "
                f"{self.replayed:,}; the run is not a success (a bug: please report it with the "
                "runner used)")


class AccountingError(RuntimeError):
    """A run whose examples do not add up (``Tally.problem``)."""


def _sum(tallies):
    return sum(tallies, Tally())


def _check(total):
    problem = total.problem()
    if problem:
        raise AccountingError(problem)
    return total


class CheckAccounts(beam.PTransform):
    """Tallies -> their sum, once the input has ended; fails the run when it does not add up.

    In the global window with a watermark trigger, so that it fires once at the end of a
    bounded input and of a stream that ends (never for one that does not)."""

    def expand(self, tallies):
        return (tallies
                | "Whole run" >> beam.WindowInto(
                    window.GlobalWindows(), trigger=trigger.AfterWatermark(),
                    accumulation_mode=trigger.AccumulationMode.DISCARDING)
                | "Sum" >> beam.CombineGlobally(_sum).without_defaults()
                | "Check" >> beam.Map(_check))


def count_as(*fields):
    """A step turning each ExampleBlock or Arrow table into a Tally of its rows as ``fields``."""
    def tally(item):
        return Tally(**dict.fromkeys(fields, len(item)))
    return beam.Map(tally).with_output_types(Tally)
