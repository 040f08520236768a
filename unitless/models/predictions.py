"""A prediction row, as every step writes it (the ``unitless.prediction`` schema): the outcome
columns of scores, and a learned or served block's rows."""
from typing import TYPE_CHECKING, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..learner import mistakes, predicted_class, probability
from ..learner.losses import CLASSIFICATION_LOSSES
from ..schemas import PREDICTION_SCHEMA

if TYPE_CHECKING:
    from ..learner import BatchResult, LearnerState
    from ..learner.many import RowState


def served_count(table: pa.Table) -> int:
    """How many rows of a prediction table were served (predicted without a label)."""
    return pc.sum(table.column("served")).as_py() or 0


def outcome_columns(state: Union["LearnerState", "RowState"], scores: np.ndarray,
                    labels: np.ndarray) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(prediction, probability, error) columns for scores [n, K] made by ``state``: the score
    (binary, regression) or the predicted class (one-against-all); P(y = +1) for a logistic
    binary model, else null; 1/0 for a wrong/right predicted class (classification), null for
    regression or where there is no label (scoring)."""
    n = len(labels)
    single = state.n_classes == 1
    prediction = pa.array(scores[:, 0] if single else predicted_class(scores))
    prob = (pa.array(probability(scores[:, 0])) if single and state.loss == "logistic"
            else pa.nulls(n, pa.float64()))
    if state.loss not in CLASSIFICATION_LOSSES:
        return prediction, prob, pa.nulls(n, pa.float64())
    error = mistakes(state, scores, labels)
    return prediction, prob, pa.array(error, mask=np.isnan(labels))


def prediction_table(keys: Union[pa.Array, str], state: Union["LearnerState", "RowState"],
                     ids: pa.Array, labels: np.ndarray, result: "BatchResult",
                     examples_seen: np.ndarray, sources: Union[pa.Array, str],
                     positions: np.ndarray, checkpoint_ids: Union[pa.Array, str, None] = None,
                     event_times: Optional[np.ndarray] = None,
                     served_losses: Optional[np.ndarray] = None,
                     ages: Optional[np.ndarray] = None, stale: Optional[np.ndarray] = None
                     ) -> pa.Table:
    """The predictions (PREDICTION_SCHEMA) of examples predicted by models of learner settings
    ``state``: ``keys`` their model keys (a string array, or one key for all), ``result`` their
    BatchResult, ``examples_seen`` each one's model's count after it (``seen_after``),
    ``sources`` a string array (or one source for all), ``checkpoint_ids`` each one's
    model's last checkpoint (an array, or one for all). An example without a label (NaN) was
    served, not learned: its label, loss and error are null, and its ``examples_seen`` is the
    model's count when it served it; a learned example's is the count with it (so a served
    example and its labeled twin right after it share one). ``ages`` and ``stale``: of rows
    served apart from learning (``pipelines/serve.py``; NaN age: a model not published yet),
    else null."""
    n = len(labels)
    served = np.isnan(labels)
    prediction, prob, error = outcome_columns(state, result.scores, labels)
    return pa.table([
        ids, _column(keys, n), prediction, prob,
        pa.array(labels, mask=served), pa.array(result.losses, mask=served), error,
        pa.array(examples_seen, pa.int64()), _column(sources, n),
        pa.array(positions), _column(checkpoint_ids, n),
        pa.array(event_times, pa.float64()) if event_times is not None
        else pa.nulls(n, pa.float64()), pa.array(served),
        # (NaN: served before a resume, with a prediction no longer known)
        pa.array(served_losses, pa.float64(), mask=np.isnan(served_losses))
        if served_losses is not None
        else pa.nulls(n, pa.float64()),
        pa.array(ages, pa.float64(), mask=np.isnan(ages)) if ages is not None
        else pa.nulls(n, pa.float64()),
        pa.array(stale, pa.bool_()) if stale is not None else pa.nulls(n, pa.bool_()),
    ], schema=PREDICTION_SCHEMA)


def seen_after(start: int, labels: np.ndarray) -> np.ndarray:
    """Each example's model's examples_seen after it, for examples of one model that had
    learned ``start`` before the first (one served, without a label, is not counted)."""
    return start + np.cumsum(~np.isnan(labels), dtype=np.int64)


def _column(value, n):
    """A string column of n rows: ``value`` itself if it is an array, else n times it."""
    if value is None or isinstance(value, str):
        return pa.repeat(pa.scalar(value, pa.string()), n)
    return value
