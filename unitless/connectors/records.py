"""Parsed examples travel between pipeline stages as ExampleBlocks: columnar, one source each."""
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..learner import make_batch


@dataclass
class ExampleBlock:
    source: str             # file path or topic/partition
    positions: np.ndarray   # int64: line number (text), row number (Parquet) or offset (Kafka)
    ids: list               # example ids (str or None)
    keys: list              # model keys (str)
    labels: np.ndarray      # float64
    weights: np.ndarray     # float64
    indptr: np.ndarray      # int64, CSR over hashed feature indices
    indices: np.ndarray
    values: np.ndarray
    names: dict = field(default_factory=dict)   # feature index -> name, where known
    raw: list = None        # raw record per example (for dead letters found after parsing)
    event_times: np.ndarray = None  # float seconds since the epoch, where the source has them

    def __len__(self):
        return len(self.labels)

    def batch(self):
        return make_batch(self.indptr, self.indices, self.values, self.labels, self.weights)

    def take(self, rows):
        """The examples at positions ``rows`` (in that order) as a new block."""
        rows = np.asarray(rows, dtype=np.int64)
        b = self.batch().take(rows)

        def pick(xs):
            return [xs[r] for r in rows]

        return ExampleBlock(self.source, self.positions[rows], pick(self.ids), pick(self.keys),
                            b.labels, b.weights, b.indptr, b.indices, b.values, self.names,
                            pick(self.raw) if self.raw is not None else None,
                            self.event_times[rows] if self.event_times is not None else None)

    def split_by_key(self):
        """(key, block) for each model key present, examples in their original order."""
        keys = np.asarray(self.keys, dtype=object)
        if len(keys) and (keys == keys[0]).all():
            return [(keys[0], self)]
        out = {}
        for r, k in enumerate(keys):
            out.setdefault(k, []).append(r)
        return [(k, self.take(rows)) for k, rows in out.items()]


@dataclass
class DeadLetter:
    source: str
    position: int
    raw: str
    reason: str

    def to_dict(self):
        return {"source": self.source, "position": self.position, "raw": self.raw,
                "reason": self.reason}


DEAD_LETTER_SCHEMA = pa.schema([("source", pa.string()), ("position", pa.int64()),
                               ("raw", pa.string()), ("reason", pa.string())])


def dead_letter_table(dead):
    return pa.Table.from_pylist([d.to_dict() for d in dead], schema=DEAD_LETTER_SCHEMA)
