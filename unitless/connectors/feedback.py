"""Messages on a sharded run's feedback topic, free of Beam: a shard's part of a round's
prediction (``learner.sharded.Part``'s scores and scalars) and the end of the run.

A run owns the messages it wrote (``run``, a fresh id per run): messages of other runs on the
same topic, and anything that is not a message of this form, are ignored by the reader, never
learned from. A message is a 4-byte little-endian header length, a JSON header, then the
part's float64 values (little-endian): its scores [n, K], then its scalars [n, K, scalars].
No pickle: a topic is shared, and what is read from it is untrusted.
"""
import json
from typing import NamedTuple, TypeGuard

import numpy as np

VERSION = 1
MAX_HEADER = 1 << 16


class PartMessage(NamedTuple):
    run: str
    model: str
    round: int
    shard: int
    scores: np.ndarray   # [n, K]
    scalars: np.ndarray  # [n, K, scalars]


class EndMessage(NamedTuple):
    run: str


def encode_part(run: str, model: str, round_: int, shard: int, scores: np.ndarray,
                scalars: np.ndarray) -> tuple[bytes, bytes]:
    """(key, value) of a shard's part of a round; the key is the model key (UTF-8)."""
    n, K, m = scalars.shape
    header = json.dumps({"v": VERSION, "kind": "part", "run": run, "model": model,
                         "round": int(round_), "shard": int(shard), "shape": [n, K, m]},
                        separators=(",", ":")).encode()
    body = (np.ascontiguousarray(scores, dtype="<f8").tobytes()
            + np.ascontiguousarray(scalars, dtype="<f8").tobytes())
    return model.encode("utf-8", "surrogatepass"), _framed(header) + body


def encode_end(run: str) -> tuple[bytes, bytes]:
    """(key, value) of the run's end marker."""
    header = json.dumps({"v": VERSION, "kind": "end", "run": run},
                        separators=(",", ":")).encode()
    return b"", _framed(header)


def _framed(header):
    return len(header).to_bytes(4, "little") + header


def decode(value: object) -> PartMessage | EndMessage:
    """A PartMessage or EndMessage; ValueError (with the reason) for anything else."""
    if not isinstance(value, (bytes, bytearray, memoryview)) or len(value) < 4:
        raise ValueError("not a unitless feedback message (too short)")
    value = bytes(value)
    size = int.from_bytes(value[:4], "little")
    if size > MAX_HEADER or 4 + size > len(value):
        raise ValueError("not a unitless feedback message (bad header length)")
    try:
        header = json.loads(value[4:4 + size])
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not a unitless feedback message (header is not JSON)") from None
    if not isinstance(header, dict) or header.get("v") != VERSION:
        raise ValueError("not a unitless feedback message of version 1")
    run, kind = header.get("run"), header.get("kind")
    if not isinstance(run, str):
        raise ValueError("feedback message without a run id")
    if kind == "end":
        return EndMessage(run)
    if kind != "part":
        raise ValueError(f"unknown feedback message kind {kind!r}")
    model, round_, shard, shape = (header.get(k) for k in ("model", "round", "shard", "shape"))
    if not (isinstance(model, str) and _count(round_) and _count(shard)
            and isinstance(shape, list) and len(shape) == 3 and all(map(_count, shape))):
        raise ValueError("feedback part with a bad header")
    n, K, m = shape
    body = value[4 + size:]
    if len(body) != 8 * n * K * (1 + m):
        raise ValueError(f"feedback part of {len(body)} bytes, not {8 * n * K * (1 + m)}")
    values = np.frombuffer(body, dtype="<f8").astype(np.float64)
    return PartMessage(run, model, round_, shard, values[:n * K].reshape(n, K),
                       values[n * K:].reshape(n, K, m))


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62
