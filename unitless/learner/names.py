"""Feature names, index -> name, in two columns: sorted indices and their names.

A block of hashed sparse text names ~10^5 features and a model keeps every name it was given; as
a dict that is a Python object per name each time a block is merged, pickled into Beam state or
sent between stages. In columns it pickles as a few buffers and merges with array operations.
The rule is one for every path: an index keeps the first name it was given.
"""
from collections.abc import Iterable, Mapping
from typing import Optional

import numpy as np
import pyarrow as pa


class FeatureNames(Mapping):
    """A read-only mapping index -> name; ``merged`` gives a new one with more names."""
    __slots__ = ("indices", "names")

    def __init__(self, indices: Optional[np.ndarray] = None,
                 names: Optional[pa.Array] = None) -> None:
        self.indices = np.zeros(0, np.int64) if indices is None else indices  # sorted, unique
        self.names = pa.array([], pa.string()) if names is None else names  # string, no nulls

    @classmethod
    def of(cls, names: Mapping[int, str]) -> "FeatureNames":
        """A FeatureNames of a mapping (itself if it is one)."""
        if isinstance(names, FeatureNames):
            return names
        return cls.from_arrays(np.fromiter(names.keys(), np.int64, len(names)),
                               pa.array(list(names.values()), pa.string()))

    @classmethod
    def from_arrays(cls, indices: np.ndarray, names: pa.Array) -> "FeatureNames":
        """Indices in any order and their names (a string array); an index given more than
        once keeps the name of its first place."""
        indices = np.asarray(indices, np.int64)
        order = np.argsort(indices, kind="stable")
        indices = indices[order]
        first = np.ones(len(indices), bool)
        first[1:] = indices[1:] != indices[:-1]
        if not first.all():
            order, indices = order[first], indices[first]
        if not (len(order) == len(names) and (order[1:] > order[:-1]).all()):
            names = names.take(pa.array(order))
        return cls(indices, names)

    def __len__(self):
        return len(self.indices)

    def __iter__(self):
        return iter(self.indices.tolist())

    def __getitem__(self, index):
        at = int(np.searchsorted(self.indices, index))
        if at == len(self.indices) or self.indices[at] != index:
            raise KeyError(index)
        return self.names[at].as_py()

    def __repr__(self):
        return f"FeatureNames({dict(self.items())!r})"

    def lookup(self, indices: np.ndarray) -> pa.Array:
        """The names of these indices, an Arrow string array with nulls where there is none."""
        indices = np.asarray(indices, np.int64)
        if not len(self.indices):
            return pa.nulls(len(indices), pa.string())
        at = np.minimum(np.searchsorted(self.indices, indices), len(self.indices) - 1)
        return self.names.take(pa.array(at, mask=self.indices[at] != indices))

    def only(self, indices: np.ndarray) -> "FeatureNames":
        """These names of ``indices`` only (a part of a block carries those its rows use)."""
        keep = np.isin(self.indices, indices)
        if keep.all():
            return self
        return FeatureNames(self.indices[keep], self.names.filter(pa.array(keep)))

    def merged(self, other: Mapping[int, str]) -> "FeatureNames":
        """These names, and those of ``other`` (a mapping) for indices without one here."""
        if not len(other):
            return self
        other = FeatureNames.of(other)
        if not len(self.indices):
            return other
        at = np.searchsorted(self.indices, other.indices)
        new = self.indices[np.minimum(at, len(self.indices) - 1)] != other.indices
        if not new.any():
            return self
        # the new ones inserted where they sort (both are sorted): no sort of the whole
        at, n = at[new], len(self.indices)
        order = np.insert(np.arange(n), at, np.arange(n, n + len(at)))
        names = pa.concat_arrays([self.names, other.names.filter(pa.array(new))])
        return FeatureNames(np.insert(self.indices, at, other.indices[new]),
                            names.take(pa.array(order)))


def merged_names(mappings: Iterable[Mapping[int, str]]) -> FeatureNames:
    """The names of several mappings in one, the first given for an index kept."""
    out = FeatureNames()
    for names in mappings:
        out = out.merged(names)
    return out
