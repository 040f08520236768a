"""Compiled reading of the sparse line formats, VW text and libsvm: one pass over a chunk's bytes
that splits tokens, reads numbers and hashes feature names (CRC-32, as ``hash_feature``).

The block it gives is the per-line parsers' block (``vw.parse_vw``, ``libsvm.parse_libsvm``), bit
for bit: the same rows, each row's features summed per index, sorted, zeros dropped, and the
names first seen for each index. It only ever reads records those parsers take: a chunk holding
a line it cannot read exactly (malformed, not ASCII, a label mapping that refuses a value) is
left to them whole, and they refuse or read each line as they always have. So this pass never
decides what is a bad record, and a chunk with one is exactly as slow as before.

Numbers are Python's ``float`` of their text, bit for bit: a decimal whose digits make an
integer below 2^53, with a power of ten within 10^±22, is one float64 multiplication or division
of two exact operands (Clinger's fast path), which IEEE rounds correctly; any other decimal goes
to Arrow's cast (fast_float), correctly rounded too. Text that is no plain decimal ('1_0',
'inf', 'nan') is left to the per-line parser.
"""
from typing import Optional

import numba
import numpy as np
import pyarrow as pa

from ..learner import bias_index
from ..learner.names import FeatureNames
from .line_spans import LineSpans, text_of_spans
from .records import ExampleBlock, empty_as_null
from .spec import RecordSpec

# per line, why the compiled pass leaves a chunk to the per-line parser (0: it read the line)
OK, CAREFUL = 0, 1
# the powers of ten that are exact in float64
_POW10 = np.array([10.0 ** k for k in range(23)])


def _crc_tables():
    """CRC-32 (zlib's) lookup tables for 1 and for 4 bytes at a time (slice-by-4)."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0xEDB88320), table >> 1)
    tables = [table.astype(np.uint32)]
    for _ in range(3):
        previous = tables[-1]
        tables.append((previous >> 8) ^ tables[0][previous & 0xFF])
    return np.stack(tables)


_CRC = _crc_tables()


@numba.njit(cache=True, nogil=True, inline="always")
def _crc_update(crc, data, start, stop, tables):
    """The CRC-32 state after data[start:stop], four bytes a step while there are four."""
    i = start
    while i + 4 <= stop:
        crc ^= (np.uint32(data[i]) | (np.uint32(data[i + 1]) << 8)
                | (np.uint32(data[i + 2]) << 16) | (np.uint32(data[i + 3]) << 24))
        crc = (tables[3, crc & 0xFF] ^ tables[2, (crc >> 8) & 0xFF]
               ^ tables[1, (crc >> 16) & 0xFF] ^ tables[0, crc >> 24])
        i += 4
    while i < stop:
        crc = tables[0, (crc ^ data[i]) & 0xFF] ^ (crc >> 8)
        i += 1
    return crc


@numba.njit(cache=True, nogil=True, inline="always")
def _space(b):
    """The ASCII characters Python's str.split() and str.isspace() take for whitespace (no
    branch: a loop summing it vectorises)."""
    return (b == 32) | ((b >= 9) & (b <= 13)) | ((b >= 28) & (b <= 31))


@numba.njit(cache=True, nogil=True)
def _number(data, start, stop, pow10):
    """(value, 0) for a decimal [+-](digits[.digits]|.digits)[(e|E)[+-]digits] read exactly;
    (nan, 1) when it is such a decimal that Python's float must read; (nan, 2) when it is not
    one (Python may still read it: '1_0', 'inf'; the per-line parser decides)."""
    i = start
    negative = False
    if i < stop and (data[i] == 43 or data[i] == 45):
        negative = data[i] == 45
        i += 1
    mantissa = 0  # of the first 18 digits (no overflow); more are read by Python
    digits = 0
    exponent = 0
    while i < stop and 48 <= data[i] <= 57:
        mantissa = mantissa * 10 + (data[i] - 48)
        digits += 1
        i += 1
    if i < stop and data[i] == 46:
        i += 1
        while i < stop and 48 <= data[i] <= 57:
            mantissa = mantissa * 10 + (data[i] - 48)
            digits += 1
            exponent -= 1
            i += 1
    if digits == 0:
        return np.nan, 2
    if i < stop and (data[i] == 101 or data[i] == 69):
        i += 1
        sign = 1
        if i < stop and (data[i] == 43 or data[i] == 45):
            sign = -1 if data[i] == 45 else 1
            i += 1
        if i == stop or not 48 <= data[i] <= 57:
            return np.nan, 2
        e = 0
        while i < stop and 48 <= data[i] <= 57:
            e = min(e * 10 + (data[i] - 48), 100000)
            i += 1
        exponent += sign * e
    if i != stop:
        return np.nan, 2
    # exact operands, one correctly rounded operation (Clinger): a mantissa below 2^53 and a
    # power of ten below 10^23
    if digits > 18 or mantissa > 9007199254740992 or exponent > 22 or exponent < -22:
        return np.nan, 1
    value = float(mantissa)
    value = value * pow10[exponent] if exponent >= 0 else value / pow10[-exponent]
    return (-value if negative else value), 0


@numba.njit(cache=True, nogil=True)
def _scan(data, starts, stops, libsvm, mask, require_label, text_labels, pow10, crc_tables):
    """Tokens, numbers and hashed names of each line ``data[starts[r]:stops[r]]``.

    Returns (status, labels, label spans, weights, tag spans, row_ptr, indices, values, name
    spans, deferred): each row's feature occurrences in the order written (``row_ptr``), and
    where a number awaits Python's float, ``deferred``: (kind, at, start, stop) with kind 0 a
    feature value, 1 a label. With ``text_labels`` labels are only found (a label mapping reads
    their text). status is OK, or CAREFUL as soon as a line needs the per-line parser (the
    other outputs are then meaningless)."""
    n = starts.shape[0]
    capacity = n  # features: at most one more than the separators (whitespace, '|') per line
    for r in range(n):
        for i in range(starts[r], stops[r]):
            capacity += _space(data[i]) | (data[i] == 124)
    out = (np.empty(n), np.full((n, 2), -1, np.int64), np.ones(n), np.full((n, 2), -1, np.int64),
           np.zeros(n + 1, np.int64), np.empty(capacity, np.int64), np.empty(capacity),
           # a name is data[a:b] or, in a VW namespace, data[c:d] + '^' + data[a:b]: (a, b, c, d)
           np.empty((capacity, 4), np.int64), np.empty((capacity + n, 4), np.int64))
    labels, label_span, weights, tag_span, row_ptr, indices, values, names, deferred = out
    k = n_deferred = 0
    for r in range(n):
        row_ptr[r] = k
        k, n_deferred = _line(data, starts[r], stops[r], r, libsvm, mask, require_label,
                              text_labels, pow10, crc_tables, out, k, n_deferred)
        if k < 0:
            return (CAREFUL, *out)
    row_ptr[n] = k
    return (OK, labels, label_span, weights, tag_span, row_ptr, indices[:k], values[:k],
            names[:k], deferred[:n_deferred])


@numba.njit(cache=True, nogil=True)
def _line(data, start, stop, r, libsvm, mask, require_label, text_labels, pow10, crc_tables, out,
          k, n_deferred):
    """Line r into ``out`` (see _scan), its features from slot k on: (next slot, deferred
    numbers so far), or (-1, -1) when the per-line parser must read it."""
    labels, label_span, weights, tag_span, _, indices, values, names, deferred = out
    bad = False
    for i in range(start, stop):  # (no branch: a vectorised pass)
        b = data[i]
        bad |= (b >= 128) | (b == 10) | (b == 13)
    if bad:  # not ASCII, or a line break inside a record
        return -1, -1
    if libsvm:  # '#': a comment to the end of the line
        for i in range(start, stop):
            if data[i] == 35:
                stop = i
                break
    # the head: label, importance weight and tag (VW: before the first '|'); libsvm: the label
    head_stop = stop
    if not libsvm:
        head_stop = start
        while head_stop < stop and data[head_stop] != 124:
            head_stop += 1
        if head_stop == stop:  # no feature section
            return -1, -1
    i = start
    token = 0  # tokens of the head read so far
    labeled = True
    while True:
        while i < head_stop and _space(data[i]):
            i += 1
        if i == head_stop or (libsvm and token == 1):
            break
        a = i
        while i < head_stop and not _space(data[i]):
            i += 1
        if token == 0 and (libsvm or data[a] != 39):  # the label ("'tag" first: unlabeled)
            label_span[r, 0], label_span[r, 1] = a, i
            value, status = (np.nan, 0) if text_labels else _number(data, a, i, pow10)
            if status == 2:
                return -1, -1
            if status == 1:
                deferred[n_deferred, 0], deferred[n_deferred, 1] = 1, r
                deferred[n_deferred, 2], deferred[n_deferred, 3] = a, i
                n_deferred += 1
            labels[r] = value
        else:
            if token == 0:
                labeled = False
            # VW: "'tag" is the tag; else the first is the weight, unless a tag came first or
            # the weight read is 1 (then the next is read as the weight too)
            if data[a] == 39:
                tag_span[r, 0], tag_span[r, 1] = a + 1, i
            elif weights[r] == 1.0 and tag_span[r, 0] < 0:
                value, status = _number(data, a, i, pow10)
                if status != 0:  # (whether it is 1 decides what the next token is)
                    return -1, -1
                weights[r] = value
            else:
                tag_span[r, 0], tag_span[r, 1] = a, i
        token += 1
    if token == 0 and libsvm:  # an empty record
        return -1, -1
    if not labeled or token == 0:
        if require_label:
            return -1, -1
        labels[r] = np.nan
    # the features
    if not libsvm:
        i = head_stop
    prefix = np.uint32(0xFFFFFFFF)  # CRC-32 state after the namespace and '^'
    ns_a = ns_b = -1
    while i < stop:
        if not libsvm and data[i] == 124:  # '|': a section, maybe with a namespace
            i += 1
            ns_a = ns_b = -1
            prefix = np.uint32(0xFFFFFFFF)
            if i < stop and data[i] != 124 and not _space(data[i]):
                a = i
                while i < stop and not _space(data[i]) and data[i] != 124:
                    i += 1
                b = a
                while b < i and data[b] != 58:  # the namespace ends at its first ':'
                    b += 1
                if b > a:
                    ns_a, ns_b = a, b
                    prefix = _crc_update(prefix, data, a, b, crc_tables)
                    prefix = crc_tables[0, (prefix ^ 94) & 0xFF] ^ (prefix >> 8)  # '^'
            continue
        if _space(data[i]):
            i += 1
            continue
        # one pass over the name, hashing it, then the value after its first ':'
        a = i
        if libsvm:
            while i < stop and data[i] == 48:  # leading zeros: 007 is feature 7
                i += 1
        name_a = i
        digits = True
        while i < stop:
            b = data[i]
            if b == 58 or _space(b) or (b == 124 and not libsvm):
                break
            digits &= 48 <= b <= 57
            i += 1
        colon = i
        value = 1.0
        if i < stop and data[i] == 58:
            i += 1
            while i < stop and not _space(data[i]) and (libsvm or data[i] != 124):
                i += 1
            if libsvm and colon - a == 3 and data[a] == 113 and data[a + 1] == 105 \
                    and data[a + 2] == 100:
                continue  # qid:n
            value, status = _number(data, colon + 1, i, pow10)
            if status == 2:
                return -1, -1
            if status == 1:
                deferred[n_deferred, 0], deferred[n_deferred, 1] = 0, k
                deferred[n_deferred, 2], deferred[n_deferred, 3] = colon + 1, i
                n_deferred += 1
        elif libsvm:  # not index:value
            return -1, -1
        if libsvm and (name_a == colon or not digits):  # not a positive integer
            return -1, -1
        crc = _crc_update(prefix, data, name_a, colon, crc_tables)
        indices[k] = np.int64(~crc & np.uint32(0xFFFFFFFF)) & mask
        values[k] = value
        names[k, 0], names[k, 1], names[k, 2], names[k, 3] = name_a, colon, ns_a, ns_b
        k += 1
    return k, n_deferred


@numba.njit(cache=True, nogil=True)
def _rows(row_ptr, indices, values, bias):
    """Each row's features as the per-line parser stores them: values summed per index in the
    order written (the bias, 1, after them; bias -1: none), in index order, zeros dropped."""
    n = row_ptr.shape[0] - 1
    extra = n if bias >= 0 else 0
    out_ptr = np.zeros(n + 1, np.int64)
    out_idx = np.empty(indices.shape[0] + extra, np.int64)
    out_val = np.empty(indices.shape[0] + extra)
    order = np.empty(0, np.int64)
    k = 0
    for r in range(n):
        a, b = row_ptr[r], row_ptr[r + 1]
        m = b - a + (1 if bias >= 0 else 0)
        if order.shape[0] < m:
            order = np.empty(2 * m, np.int64)
        # the row's entries (the bias: entry b) in index order, equal indices in the order
        # written: an insertion sort, stable and quick for the rows of tens of features
        # that sparse text has; a merge sort for long rows
        if m <= 64:
            for j in range(m):
                entry = a + j
                index = indices[entry] if entry < b else bias
                t = j
                while t > 0 and _index_of(indices, b, bias, order[t - 1]) > index:
                    order[t] = order[t - 1]
                    t -= 1
                order[t] = entry
        else:
            keys = np.empty(m, np.int64)
            keys[:b - a] = indices[a:b]
            if bias >= 0:
                keys[m - 1] = bias
            order[:m] = a + np.argsort(keys, kind="mergesort")
        j = 0
        while j < m:
            index = _index_of(indices, b, bias, order[j])
            total = 0.0
            while j < m and _index_of(indices, b, bias, order[j]) == index:
                total += values[order[j]] if order[j] < b else 1.0
                j += 1
            if total != 0.0:
                out_idx[k] = index
                out_val[k] = total
                k += 1
        out_ptr[r + 1] = k
    return out_ptr, out_idx[:k], out_val[:k]


@numba.njit(cache=True, nogil=True, inline="always")
def _index_of(indices, row_stop, bias, entry):
    """The feature index of a row's entry; entry ``row_stop`` is the row's bias."""
    return indices[entry] if entry < row_stop else bias


@numba.njit(cache=True, nogil=True)
def _first_seen(indices):
    """Positions of each distinct index's first occurrence, in the order of those occurrences
    (an open-addressing set sized to the chunk)."""
    size = 1
    while size < 2 * indices.shape[0] + 2:
        size *= 2
    slots = np.full(size, -1, np.int64)
    first = np.empty(indices.shape[0], np.int64)
    n = 0
    for k in range(indices.shape[0]):
        index = indices[k]
        h = (index * 0x9E3779B97F4A7C15) & (size - 1)
        while slots[h] != -1 and slots[h] != index:
            h = (h + 1) & (size - 1)
        if slots[h] == -1:
            slots[h] = index
            first[n] = k
            n += 1
    return first[:n]


def read_block(fmt: str, spec: RecordSpec, source: str, data: bytes, starts: np.ndarray,
               stops: np.ndarray, positions: np.ndarray) -> Optional[ExampleBlock]:
    """The ExampleBlock of the lines ``data[starts[r]:stops[r]]`` (at ``positions``) in format
    ``fmt`` ('vw' or 'libsvm'), or None when the per-line parser must read the chunk."""
    array = np.frombuffer(data, np.uint8)
    mapped = bool(spec.labels and spec.labels.active)
    (status, labels, label_span, weights, tag_span, row_ptr, raw_indices, raw_values, names,
     deferred) = _scan(array, starts, stops, fmt == "libsvm", (1 << spec.bits) - 1,
                       spec.require_label, mapped, _POW10, _CRC)
    if status != OK:
        return None
    if len(deferred):
        numbers = text_of_spans(array, deferred[:, 2:]).cast(pa.float64()).to_numpy()
        feature = deferred[:, 0] == 0
        raw_values[deferred[feature, 1]] = numbers[feature]
        labels[deferred[~feature, 1]] = numbers[~feature]
    if mapped:  # (LabelMap.arrow: None where a value needs the per-line parser; null: served)
        labels = spec.labels.arrow(text_of_spans(array, label_span))
        if labels is None:
            return None
        labels = labels.to_numpy(zero_copy_only=False)
    bias = bias_index(spec.bits) if spec.bias else -1
    indptr, indices, values = _rows(row_ptr, raw_indices, raw_values, bias)
    first = _first_seen(raw_indices)
    feature_names = FeatureNames.from_arrays(raw_indices[first], text_of_spans(array, names[first]))
    if bias >= 0:
        feature_names = feature_names.merged({bias: "constant"})
    n = len(labels)
    ids = (empty_as_null(text_of_spans(array, tag_span)) if (tag_span[:, 0] >= 0).any()
           else pa.nulls(n, pa.string()))
    return ExampleBlock(source, np.asarray(positions, np.int64), ids,
                        pa.array([""] * n, pa.string()), labels, weights, indptr, indices,
                        values, feature_names, LineSpans(data, starts, stops))
