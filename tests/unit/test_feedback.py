"""Messages on a sharded run's feedback topic (connectors/feedback.py): parts round-trip bit for
bit, and whatever else a shared topic may hold is refused with a reason, never unpickled."""
import pickle

import numpy as np
import pytest

from unitless.connectors.feedback import EndMessage, PartMessage, decode, encode_end, encode_part


def test_a_part_and_the_end_round_trip():
    rng = np.random.default_rng(3)
    scores, scalars = rng.normal(size=(5, 3)), rng.normal(size=(5, 3, 2))
    key, value = encode_part("run1", "clé", 7, 2, scores, scalars)
    assert key == "clé".encode()
    got = decode(value)
    assert isinstance(got, PartMessage)
    assert (got.run, got.model, got.round, got.shard) == ("run1", "clé", 7, 2)
    assert got.scores.tobytes() == scores.tobytes() and got.scalars.shape == (5, 3, 2)
    assert got.scalars.tobytes() == scalars.tobytes()
    assert decode(encode_end("run1")[1]) == EndMessage("run1")


def framed(header):
    return len(header).to_bytes(4, "little") + header


@pytest.mark.parametrize("value, reason", [
    (None, "too short"), (b"", "too short"), (b"\xff\xff\xff\xff{}", "bad header length"),
    (b"\x02\x00\x00\x00{]", "not JSON"), (b"\x02\x00\x00\x00[]", "version 1"),
    (framed(b'{"v":1,"x":1}'), "run id"),
    (framed(b'{"v":1,"run":"r","kind":9}'), "unknown feedback message kind"),
    (encode_part("r", "m", 0, 0, np.zeros((2, 1)), np.zeros((2, 1, 1)))[1][:-8],
     "not 32"),
    (pickle.dumps(PartMessage("r", "m", 0, 0, np.zeros((1, 1)), np.zeros((1, 1, 0)))),
     "bad header length"),
])
def test_anything_else_is_refused_with_a_reason(value, reason):
    with pytest.raises(ValueError, match=reason):
        decode(value)


def test_a_header_out_of_range_is_refused():
    value = encode_part("r", "m", 0, 0, np.zeros((1, 1)), np.zeros((1, 1, 1)))[1]
    for bad in (b'"round":-1', b'"round":true', b'"shard":"0"'):
        field = bad.split(b":")[0]
        start = value.index(field)
        end = value.index(b",", start)
        header = value[4:].split(b"}")[0] + b"}"
        patched = header.replace(value[start:end], bad)
        with pytest.raises(ValueError, match="bad header"):
            decode(framed(patched) + value[4 + len(header):])
