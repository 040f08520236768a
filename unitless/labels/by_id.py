"""A bounded input's join judged example id by example id, on record time, in array operations.

``--labels`` files with ``--label-wait``: the learning step takes such an input whole at its end,
so each example's records decide its outcome alone, whatever order they were read in. For one
model key and example id, given its first features record served to wait (at time f) and its
labels in time order (then by file and line):

* the first label within the wait (|t - f| <= wait) joins the example (``JOIN``), and every
  label of the id after it is a second (``SECOND``);
* a label before that one is dead (``NEVER``: dated more than the wait before its features,
  which came too late for it), as is every label of an id whose features never came;
* an example no label joins expires at f + wait: the labels after that are late (``LATE``);
* an id closed before (joined or expired, as a resumed run's checkpoint says) makes each of its
  labels a second or late.

These are the rules the streaming join (``labels/join.py``) applies record by record against its
clocks. Since each id's outcome depends on its own records only, they apply as well to any set of
ids that holds all of their records (a bucket of ids): docs/delayed-outcomes.md.
"""
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

JOIN, NEVER, SECOND, LATE = 0, 1, 2, 3


def group_codes(keys: pa.Array, ids: pa.Array) -> np.ndarray:
    """int64 codes of (model key, example id) pairs, equal where both are: ``keys`` and ``ids``
    are string arrays of one length (a null id codes as an empty one)."""
    keys = pc.dictionary_encode(keys).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    encoded = pc.dictionary_encode(pc.fill_null(ids, ""))
    ids = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return keys * len(encoded.dictionary) + ids


def first_of_each(groups: np.ndarray) -> np.ndarray:
    """The indices of the first element of each group code in ``groups``, in order."""
    _, first = np.unique(groups, return_index=True)
    return np.sort(first)


def judge(f_group: npt.ArrayLike, f_time: npt.ArrayLike, l_group: npt.ArrayLike,
          l_time: np.ndarray, wait: float, closed_group: npt.ArrayLike = (),
          closed_expired: npt.ArrayLike = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The labels' outcomes.

    ``f_group``/``f_time``: the examples waiting, one per group code, and their times;
    ``l_group``/``l_time``: the labels, in the order the join takes them (time, then file and
    line); ``closed_group``/``closed_expired``: the groups closed before, and whether by expiry.
    Returns (the outcome of each label, the index of the example each ``JOIN`` label joins else
    -1, whether each example was joined)."""
    f_group, l_group = np.asarray(f_group, np.int64), np.asarray(l_group, np.int64)
    n = len(l_group)
    by_group = np.argsort(f_group, kind="stable")
    sorted_f = f_group[by_group]
    f_time = np.append(np.asarray(f_time, np.float64), np.nan)  # (index -1: no example)
    if len(sorted_f):
        at = np.minimum(np.searchsorted(sorted_f, l_group), len(sorted_f) - 1)
        has_f = sorted_f[at] == l_group
        f_of = np.where(has_f, by_group[at], -1)
    else:
        has_f, f_of = np.zeros(n, bool), np.full(n, -1)
    came = f_time[f_of]
    # (as the streaming join compares: a label later than came + wait, came later than t + wait)
    late, early = l_time > came + wait, came > l_time + wait
    within = has_f & ~late & ~early
    closed_group = np.asarray(closed_group, np.int64)
    closed = np.isin(l_group, closed_group)
    expired = np.isin(l_group, closed_group[np.asarray(closed_expired, bool)])

    # each label's rank in the join's order among its group's, and its group's first within
    order = np.lexsort((np.arange(n), l_group))
    grouped = l_group[order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if n else np.zeros(0, int)
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    first = np.minimum.reduceat(np.where(within[order], np.arange(n), n), starts) if n else rank
    first_within = np.empty(n, np.int64)
    first_within[order] = np.repeat(first, np.diff(np.r_[starts, n]))

    outcome = np.select(
        [closed & expired, closed, ~has_f, (first_within < n) & (rank == first_within),
         (first_within < n) & (rank > first_within), (first_within == n) & late],
        [LATE, SECOND, NEVER, JOIN, SECOND, LATE], NEVER).astype(np.int8)
    joined = np.zeros(len(f_group), bool)
    joined[f_of[outcome == JOIN]] = True
    return outcome, np.where(outcome == JOIN, f_of, -1), joined
