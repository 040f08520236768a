"""Batches of examples in compressed sparse rows (CSR): the one input format of the kernel.

Only non-zero feature values are stored (a zero value leaves every learner's state unchanged).
Dense rows map column j to feature j with the bias at index d; named sparse features are hashed
into 2^bits with the bias at the index of the name ``constant``.
"""
import zlib
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np
import numpy.typing as npt

BIAS_NAME = "constant"


@dataclass
class Batch:
    indptr: np.ndarray   # int64, n+1
    indices: np.ndarray  # int64, nnz
    values: np.ndarray   # float64, nnz
    labels: np.ndarray   # float64, n
    weights: np.ndarray  # float64, n (importance weights)

    def __len__(self):
        return self.labels.shape[0]

    def slice(self, start: int, stop: int) -> "Batch":
        """Examples start..stop-1 as a new batch (views where possible)."""
        a, b = self.indptr[start], self.indptr[stop]
        return Batch(self.indptr[start:stop + 1] - a, self.indices[a:b], self.values[a:b],
                     self.labels[start:stop], self.weights[start:stop])

    def take(self, rows: np.ndarray, lengths: Optional[np.ndarray] = None) -> "Batch":
        """The examples at the given positions, in that order (``lengths``: ``np.diff`` of
        ``indptr``, from a caller taking from this batch many times)."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = (np.diff(self.indptr) if lengths is None else lengths)[rows]
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        # entry j of new row r comes from old entry indptr_old[rows[r]] + j
        gather = np.repeat(self.indptr[rows] - indptr[:-1], lengths) + np.arange(indptr[-1])
        return Batch(indptr, self.indices[gather], self.values[gather],
                     self.labels[rows], self.weights[rows])


def make_batch(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, labels: npt.ArrayLike,
               weights: Optional[np.ndarray] = None) -> "Batch":
    """A batch from CSR arrays; explicit zero values are dropped (a zero is an absent feature)."""
    labels = np.ascontiguousarray(labels, dtype=np.float64)
    if weights is None:
        weights = np.ones(labels.shape[0])
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    indices = np.ascontiguousarray(indices, dtype=np.int64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    zero = values == 0.0
    if zero.any():
        rows = np.repeat(np.arange(labels.shape[0]), np.diff(indptr))
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[~zero],
                                                            minlength=labels.shape[0]))])
        indices, values = indices[~zero], values[~zero]
    return Batch(indptr, indices, values, labels,
                 np.ascontiguousarray(weights, dtype=np.float64))


def dense_dim(n_columns: int, bias: bool = True) -> int:
    """Model dimension for dense rows of n_columns features (+1 for the bias)."""
    return n_columns + (1 if bias else 0)


def dense_batch(X: npt.ArrayLike, labels: npt.ArrayLike, weights: Optional[np.ndarray] = None,
                bias: bool = True) -> "Batch":
    """Rows of X (n × d) as a batch; feature j is column j, the bias (value 1) is feature d."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional, got shape {X.shape}")
    if bias:
        X = np.hstack([X, np.ones((X.shape[0], 1))])
    rows, cols = np.nonzero(X)  # NaN counts as non-zero, so validation sees it
    indptr = np.zeros(X.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=X.shape[0]), out=indptr[1:])
    return make_batch(indptr, cols, X[rows, cols], labels, weights)


def hash_feature(name: str, bits: int) -> int:
    """Stable index of a named feature in a 2^bits space (CRC-32 of its UTF-8 name)."""
    return zlib.crc32(name.encode("utf-8")) & ((1 << bits) - 1)


def bias_index(bits: int) -> int:
    return hash_feature(BIAS_NAME, bits)


def hashed_batch(rows: Sequence[Mapping[str, float]], labels: np.ndarray, bits: int,
                 weights: Optional[np.ndarray] = None, bias: bool = True) -> "Batch":
    """rows: one mapping {feature name: value} per example, hashed into 2^bits.

    Names that collide share a coordinate and their values add up.
    """
    indptr = [0]
    indices, values = [], []
    cache: dict = {}
    for row in rows:
        merged: dict = {}
        for name, value in row.items():
            i = cache.get(name)
            if i is None:
                i = cache[name] = hash_feature(name, bits)
            merged[i] = merged.get(i, 0.0) + value
        if bias:
            i = bias_index(bits)
            merged[i] = merged.get(i, 0.0) + 1.0
        for i, v in merged.items():
            if v != 0.0:
                indices.append(i)
                values.append(v)
        indptr.append(len(indices))
    return make_batch(np.asarray(indptr), np.asarray(indices), np.asarray(values), labels,
                      weights)
