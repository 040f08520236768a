"""Records of each text format for the hostile-record tests: good, without a label, hostile."""
import json

import numpy as np

HEADER = b"id,segment,label,f1,f2,f3,f4"
KEYS = ("a", "b", "c")
FEATURES = ("f1", "f2", "f3", "f4")


def good_rows(rng, n):
    X = rng.normal(size=(n, 4)) * [1e-3, 1.0, 1e3, 10.0]
    X[rng.random(X.shape) < 0.2] = 0.0
    y = rng.choice([-1, 1], size=n)
    keys = rng.choice(KEYS, size=n)
    return [{"id": f"e{i}", "segment": str(keys[i]), "label": int(y[i]),
             **{f: float(X[i, j]) for j, f in enumerate(FEATURES) if X[i, j] != 0.0}}
            for i in range(n)]


def text_record(fmt, row):
    if fmt == "csv":
        values = ",".join(repr(row[f]) if f in row else "" for f in FEATURES)
        return f"{row['id']},{row['segment']},{row['label']},{values}".encode()
    if fmt == "jsonl":
        return json.dumps(row).encode()
    if fmt == "vw":
        return (f"{row['label']} '{row['id']}| "
                + " ".join(f"{f}:{row[f]!r}" for f in FEATURES if f in row)).encode()
    return (f"{row['label']} "
            + " ".join(f"{j + 1}:{row[f]!r}" for j, f in enumerate(FEATURES) if f in row)).encode()


def unlabeled_record(fmt, row, variant=0):
    """The row's record without a label, as each format writes one (libsvm has no way to):
    an example to serve, not a hostile record. JSON: no label field, or a null one; CSV: an
    empty label field; VW: no label before the tag or the first '|'."""
    if fmt == "jsonl":
        return json.dumps({k: v for k, v in row.items() if k != "label"} if variant % 2 else
                          {**row, "label": None}).encode()
    if fmt == "csv":
        return with_label(fmt, row, b"")
    if fmt == "vw":
        text = text_record(fmt, row)
        return text[text.index(b" ") + 1:] if variant % 2 else text[text.index(b"|"):]
    raise ValueError(f"{fmt} records cannot be without a label")


def with_label(fmt, row, label):
    """The row's record with the label's text replaced (bytes)."""
    if fmt == "jsonl":
        text = text_record(fmt, {**row, "label": 0})
        return text.replace(b'"label": 0', b'"label": ' + label, 1)
    text = text_record(fmt, row)
    if fmt == "csv":
        head, key, _, rest = text.split(b",", 3)
        return b",".join([head, key, label, rest])
    return label + text[text.index(b" "):]


def with_value(fmt, row, value):
    """The row's record with feature f2 set to ``value`` (text)."""
    if fmt == "jsonl":
        return text_record(fmt, {**row, "f2": 0.0}).replace(b'"f2": 0.0', b'"f2": ' + value, 1)
    text = text_record(fmt, {**row, "f2": 12345.0})
    return text.replace(b"12345.0", value, 1)


BAD_LABELS = [b"5", b"-7", b"2", b"0.5", b"1e300", b"-1e300", b"9" * 400, b"nan", b"inf",
              b"1\x00", b"1\x01", b"\x7f1", b"\xef\xbb\xbf1", b"one", b"--1", b"1e", b"0x1"]
BAD_VALUES = [b"1e300", b"-1e300", b"1e101", b"9" * 400]
TEXT_BAD_VALUES = [b"nan", b"inf", b"-inf", b"NaN", b"x", b"1.2.3", b"\x001", b"1\x1b",
                   b"\xef\xbb\xbf1"]
JSON_BAD = [b"NaN", b"Infinity", b"-Infinity", b"7" * 400, b"7" * 5000, b"[1]", b'{"g": 1}',
            b"{}", b"[" * 3000 + b"]" * 3000, b"null, \"label\": 5"]


def hostile(fmt, rng, row):
    """One hostile record (a line: no newline, not blank, not ending in CR) that the reader or
    the learner's checks must refuse."""
    text = text_record(fmt, row)
    kind = rng.integers(12)
    if kind == 0:      # invalid UTF-8 somewhere
        at = int(rng.integers(len(text) + 1))
        junk = [b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\x80", b"\xf8\x88\x80\x80\x80"]
        return text[:at] + junk[rng.integers(len(junk))] + text[at:]
    if kind == 1:      # random bytes, with at least one that is not UTF-8
        junk = rng.integers(0, 256, size=int(rng.integers(1, 300)), dtype=np.uint8).tobytes()
        return junk.replace(b"\n", b"\xff") + b"\xff"
    if kind == 2:      # printable garbage, no field separators
        junk = rng.integers(32, 127, size=int(rng.integers(1, 200)), dtype=np.uint8).tobytes()
        return b"~" + junk.replace(b",", b";")
    if kind == 3:      # truncated
        if fmt == "jsonl":
            return text[:int(rng.integers(1, len(text) - 1))]
        if fmt == "csv":
            return text[:text.rindex(b",", 0, text.rindex(b","))]
        return text[:text.index(b"|")] if fmt == "vw" else text + b" 4:"
    if kind == 4:
        return with_label(fmt, row, BAD_LABELS[rng.integers(len(BAD_LABELS))])
    if kind == 5:      # values the learner refuses: not finite, or |x| > 1e100
        values = BAD_VALUES + (JSON_BAD[:3] if fmt == "jsonl" else TEXT_BAD_VALUES)
        return with_value(fmt, row, values[rng.integers(len(values))])
    if kind == 6:      # wrong field counts and shapes
        shapes = {"csv": lambda: [text + b",1", text[:text.rindex(b",")], b"e1,a", b"1",
                                  b",,,,,,,,"],
                  "jsonl": lambda: [b"[1, 2]", b"1", b'"x"', b"null", b'{"label": 1, "label": 5}'],
                  "vw": lambda: [text.replace(b"|", b" "), b"1 x 'e| f1:1",
                                 b"1 -2 'e| f", b"1 1e300 'e| f1:1", text + b"\r" + text],
                  "libsvm": lambda: [text + b" 3", b"1 0:1", b"1 -3:1", b"1 1.5:1", b"1 a:1",
                                     b"1 :1", b"1 1:1:1", text + b"\r" + text]}[fmt]()
        return shapes[rng.integers(len(shapes))]
    if kind == 7:      # control characters
        return with_label(fmt, row, b"1" + bytes([int(rng.choice([0, 1, 7, 27, 127]))]))
    if kind == 8 and fmt == "jsonl":
        value = JSON_BAD[rng.integers(len(JSON_BAD))]
        return with_value(fmt, row, value)
    if kind == 9 and fmt == "jsonl":  # surrogates, nesting, big integers, BOMs
        shapes = [b'{"label": 1, "id": "\\ud800"}', b'{"label": 1, "\\udc00": 1}',
                  b'{"label": 1, "f1": "\\ud83d"}', b"\xef\xbb\xbf" + text,
                  b'{"label": 1, "features": {"f1": {"x": 1}}}',
                  b'{"label": ' + b"1" * 500 + b"}", b'{"label": 1}' * 2]
        return shapes[rng.integers(len(shapes))]
    return with_label(fmt, row, BAD_LABELS[rng.integers(len(BAD_LABELS))])
