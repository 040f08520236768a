"""A chunk of line records read whole: the records laid end to end (``joined``), each line a span
of the bytes (``LineSpans``), and text columns gathered from spans in one compiled pass
(``text_of_spans``)."""
from typing import Any, Optional, Sequence

import numba
import numpy as np
import pyarrow as pa


@numba.njit(cache=True, nogil=True)
def _gather(data, spans):
    """Arrow string buffers (offsets, bytes, valid) of the texts ``data[a:b]`` of spans (a, b)
    (a -1: null), or with spans (a, b, c, d) and c >= 0, ``data[c:d] + '^' + data[a:b]``."""
    n = spans.shape[0]
    offsets = np.zeros(n + 1, np.int32)
    valid = np.zeros(n, np.bool_)
    total = 0
    for r in range(n):
        if spans[r, 0] >= 0:
            total += spans[r, 1] - spans[r, 0]
        if spans.shape[1] == 4 and spans[r, 2] >= 0:
            total += spans[r, 3] - spans[r, 2] + 1
    out = np.empty(total, np.uint8)
    k = 0
    for r in range(n):
        if spans[r, 0] < 0:
            offsets[r + 1] = k
            continue
        valid[r] = True
        if spans.shape[1] == 4 and spans[r, 2] >= 0:
            for i in range(spans[r, 2], spans[r, 3]):
                out[k] = data[i]
                k += 1
            out[k] = 94  # '^'
            k += 1
        for i in range(spans[r, 0], spans[r, 1]):
            out[k] = data[i]
            k += 1
        offsets[r + 1] = k
    return offsets, out, valid


def text_of_spans(array: np.ndarray, spans: np.ndarray) -> pa.StringArray:
    """An Arrow string array of the spans' texts (see _gather)."""
    offsets, data, valid = _gather(array, np.ascontiguousarray(spans))
    return pa.StringArray.from_buffers(len(valid), pa.py_buffer(offsets), pa.py_buffer(data),
                                       None if valid.all() else pa.array(valid).buffers()[1])


class LineSpans:
    """The raw records of a chunk read whole: line r is ``data[starts[r]:stops[r]]``."""

    def __init__(self, data: bytes, starts: np.ndarray, stops: np.ndarray) -> None:
        self.data, self.starts, self.stops = data, starts, stops

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, r):
        return bytes(self.data[self.starts[r]:self.stops[r]])


def joined(records: Sequence[Any]) -> Optional[tuple[bytes, np.ndarray, np.ndarray]]:
    """(bytes, starts, stops) of records (bytes) laid end to end, or None when one is not bytes
    (text, a null: the per-line parser says what is wrong with it)."""
    try:
        data = b"".join(records)
    except TypeError:
        return None
    lengths = np.fromiter(map(len, records), np.int64, len(records))
    stops = np.cumsum(lengths)
    return data, stops - lengths, stops
