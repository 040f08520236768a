"""The labels join's dead letter reasons, and its rule for a record dated ahead of the reader's
clock."""
from typing import Optional

import numpy as np

from ..parse.records import ExampleBlock

SECOND_LABEL = "a second label for an example id already learned"
SECOND_FEATURES = "a second features record for an example id already waiting or learned"
NEVER_SERVED = "a label for an example id whose features never came (within --label-wait)"
LATE_LABEL = "a label that came after its example's --label-wait had passed (it expired)"
NO_LABEL = "a labels record without a label"
NO_ID = "a labels record without an example id"
NO_KEY = "a labels record without its model key (--model-key-column)"
AHEAD_OF_CLOCK = ("a record dated more than --max-time-skew after the reader's clock when it was "
                  "read: its clock is wrong, and its time would expire what waits")


def dated_ahead(block: ExampleBlock, now: Optional[float], max_skew: Optional[float]
                ) -> list[int]:
    """The rows of ``block`` dated beyond ``max_skew`` after ``now`` (s; None: no bound): a
    clock that is wrong, not a time that has come."""
    if max_skew is None or now is None or block.event_times is None:
        return []
    return np.flatnonzero(block.event_times > now + max_skew).tolist()
