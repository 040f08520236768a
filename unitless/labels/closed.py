"""The ids a model's join has closed (joined, or let expire): id -> (expired, seq, the example's
time). The streaming join closes and looks them up one at a time, in a dict. A bounded input's
join closes them all at its end and then only hands them on to the checkpoint, so it adds them
as columns: about 30 bytes an id against about 250 in a dict, which at millions of ids is most
of what such a run holds at its end. Columns move into the dict the first time anything looks
one id up, so every lookup sees them."""
from typing import Any, Collection, Iterable, Optional, Union

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc


class ClosedIds:
    one_by_one: dict[str, tuple[bool, int, float]]
    columns: Optional[tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray]]

    def __init__(self) -> None:
        self.one_by_one = {}
        self.columns = None  # (ids: Arrow strings, expired: bool, seq: int64, time: float64)

    def _as_dict(self):
        if self.columns is not None:
            ids, expired, seq, time = self.columns
            self.columns = None
            self.one_by_one.update(zip(ids.to_pylist(),
                                       zip(expired.tolist(), seq.tolist(), time.tolist())))
        return self.one_by_one

    def __contains__(self, i):
        return i in self._as_dict()

    def __getitem__(self, i):
        return self._as_dict()[i]

    def __setitem__(self, i, value):
        self._as_dict()[i] = value

    def __delitem__(self, i):
        del self._as_dict()[i]

    def update(self, closed: Iterable[tuple[str, tuple[bool, int, float]]]) -> None:
        """Close each id of ``closed`` [(id, (expired, seq, time))], as ``dict.update``."""
        self._as_dict().update(closed)

    def get(self, i: str, default: Any = None) -> Any:
        return self._as_dict().get(i, default)

    def add_columns(self, ids: pa.Array, expired: npt.ArrayLike, seq: npt.ArrayLike,
                    time: npt.ArrayLike) -> None:
        """Close ``ids`` (Arrow strings, none of them twice) as ``dict.update`` would: an id
        already closed takes the new values."""
        if self.one_by_one and len(ids):
            again = pc.is_in(pa.array(list(self.one_by_one), pa.string()), value_set=ids)
            for i in np.array(list(self.one_by_one), dtype=object)[
                    again.to_numpy(zero_copy_only=False)].tolist():
                del self.one_by_one[i]
        new = (ids, np.asarray(expired, bool), np.asarray(seq, np.int64),
               np.asarray(time, np.float64))
        if self.columns is not None:
            keep = pc.invert(pc.is_in(self.columns[0], value_set=ids))
            mask = keep.to_numpy(zero_copy_only=False)
            new = (pa.concat_arrays([self.columns[0].filter(keep), ids]),
                   *(np.concatenate([a[mask], b]) for a, b in zip(self.columns[1:], new[1:])))
        self.columns = new

    def contains(self, ids: list[str]) -> np.ndarray:
        """Which of ``ids`` (a list) are closed, without moving the columns into the dict."""
        found = np.array([i in self.one_by_one for i in ids], dtype=bool)
        if self.columns is not None and len(ids):
            found |= pc.is_in(pa.array(ids, pa.string()), value_set=self.columns[0]).to_numpy(
                zero_copy_only=False)
        return found

    def arrays(self) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray]:
        """(ids: Arrow strings, expired, seq, time) of every id, those closed one by one
        first."""
        values = list(self.one_by_one.values())
        arrays = (pa.array(list(self.one_by_one), pa.string()),
                  np.array([v[0] for v in values], dtype=bool),
                  np.array([v[1] for v in values], dtype=np.int64),
                  np.array([v[2] for v in values], dtype=np.float64))
        if self.columns is None:
            return arrays
        return (pa.concat_arrays([arrays[0], self.columns[0]]),
                *(np.concatenate([a, b]) for a, b in zip(arrays[1:], self.columns[1:])))

    def to_json(self, held: Collection[str] = ()) -> dict[str, list]:
        """The ids but ``held`` as a checkpoint keeps them: {"ids", "expired", "times" (None:
        no time)}, a list each (``restore`` reads them back)."""
        ids, expired, _, time = self.arrays()
        if held:
            keep = pc.invert(pc.is_in(ids, value_set=pa.array(list(held), pa.string())))
            ids, mask = ids.filter(keep), keep.to_numpy(zero_copy_only=False)
            expired, time = expired[mask], time[mask]
        times = time.tolist()
        for r in np.flatnonzero(~np.isfinite(time)).tolist():
            times[r] = None
        return {"ids": ids.to_pylist(), "expired": expired.tolist(), "times": times}

    @staticmethod
    def from_json(saved: Union[dict, list]) -> Iterable[tuple[str, bool, Optional[float]]]:
        """(id, expired, time or None) of each id ``to_json`` kept (or, from checkpoints
        written before it, of each [id, expired, time] listed)."""
        if isinstance(saved, dict):
            return zip(saved["ids"], saved["expired"], saved["times"])
        return saved
