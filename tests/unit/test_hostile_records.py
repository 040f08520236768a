"""Hostile records. Whatever one record holds, it becomes a dead letter (its bytes exactly as
read, where it was, a short reason) and never stops the reader; and a fuzz run of the real
pipeline over 10,000 hostile records per format learns exactly what a run over the good records
alone learns."""
import base64
import datetime
import json
import logging
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from unitless.cli.main import main
from unitless.connectors.files import read_file, read_output, write_table
from unitless.parse.csv import parse_csv
from unitless.parse.jsonl import (JSON_SAMPLE_LINES, _json_table, _one_flat_object_per_line, parse_jsonl)
from unitless.parse.records import DeadLetter, MAX_QUOTED, MAX_REASON, dead_letter_table
from unitless.parse.spec import RecordSpec
from unitless.parse.vw import parse_vw

from tests.helpers.commands import latest_models, train
from tests.helpers.records import (FEATURES, HEADER, good_rows, hostile, text_record,
                                   unlabeled_record, with_label, with_value)

SPEC = RecordSpec(label="label", id="id", model_key="segment", bits=18)
GOOD = {"csv": b"e0,a,1,0.5,,2.5,-3.0",
        "jsonl": b'{"id": "e0", "segment": "a", "label": 1, "f1": 0.5, "f3": 2.5}',
        "vw": b"1 'e0| f1:0.5 f3:2.5",
        "libsvm": b"1 1:0.5 3:2.5"}
TEXT_FORMATS = tuple(GOOD)


def read(tmp_path, fmt, lines, spec=SPEC, name="data", **kwargs):
    """read_file over a file of these lines (bytes; CSV gets the header first): (the blocks,
    {position: dead letter})."""
    path = tmp_path / f"{name}.{fmt}"
    path.write_bytes(b"\n".join(([HEADER] if fmt == "csv" else []) + list(lines)) + b"\n")
    out = list(read_file(str(path), fmt, spec, **kwargs))
    dead = {d.position: d for _, ds in out for d in ds}
    assert len(dead) == sum(len(ds) for _, ds in out)
    return [b for b, _ in out], dead


def first_line(fmt):
    return 2 if fmt == "csv" else 1


def assert_dead(dead, position, raw, reason):
    d = dead[position]
    assert d.raw == raw, (position, d.raw[:80])
    assert reason in d.reason, (reason, d.reason)
    assert len(d.reason) <= MAX_REASON + 1


def test_json_attacks_become_dead_letters(tmp_path):
    bad = [b'{"label": 1, "f1": ' + b"7" * 400 + b"}",          # float() overflows
           b'{"label": ' + b"1" * 400 + b"}",
           b'{"label": 1, "f1": ' + b"7" * 5000 + b"}",         # past Python's int digit limit
           b'{"label": 1, "f1": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # RecursionError
           b'{"label": 1, "features": {"f1": {"g": 1}}}',
           b'{"label": 1, "id": "\\ud800"}',                     # lone surrogates
           b'{"label": 1, "segment": "\\udfff"}',
           b'{"label": 1, "\\ud800x": 2}',
           b'{"label": 1, "f1": "a\\ud800"}',
           b"\xef\xbb\xbf" + GOOD["jsonl"],                      # a BOM
           b'{"label": [1]}', b'[1, 2]', b'"text"', b'null', b'{"label": 1, "f1": [1]}',
           b'{"label": null}', b'{"f1": 2}', b'{"label": 1, "label": "x"}']
    blocks, dead = read(tmp_path, "jsonl", [GOOD["jsonl"], *bad, GOOD["jsonl"]])
    assert sum(len(b) for b in blocks) == 2 and sorted(dead) == list(range(2, 2 + len(bad)))
    reasons = ["feature 'f1' 7777", "label 1111", "invalid JSON: Exceeds the limit",
               "JSON nested deeper than 2", "JSON nested deeper than 2",
               "id '\\ud800' is not valid Unicode", "model key '\\udfff' is not valid Unicode",
               "feature name '\\ud800x' is not valid Unicode",
               "feature name 'f1=a\\ud800' is not valid Unicode", "Unexpected UTF-8 BOM",
               "label [1] is not a number", "must hold an object", "must hold an object",
               "must hold an object", "feature 'f1' has unsupported value [1]",
               "missing label", "missing label", "label 'x' is not a number"]
    for position, (raw, reason) in enumerate(zip(bad, reasons), 2):
        assert_dead(dead, position, raw, reason)
    assert dead[2].reason.endswith("… is out of range") and dead[3].reason.endswith("range")


def test_only_lines_of_one_flat_object_each_reach_arrow_whole():
    """The compiled check of a chunk's joined lines agrees, on 20,000 random chunks of hostile
    lines (brackets, line breaks, text, bytes that are not UTF-8), with the rule read line by
    line: each line one '{' ... '}' with no other '{' or '[', and the whole valid UTF-8."""
    def rule(lines):
        for line in lines:
            if (len(line) < 2 or line[:1] != b"{" or line[-1:] != b"}" or b"\n" in line
                    or line.count(b"{") + line.count(b"[") != 1):
                return False
        try:
            b"\n".join(lines).decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    rng = np.random.default_rng(7)
    pieces = [b'"a": 1', b"{", b"}", b"[", b"]", b"\n", b"", b"x", "é".encode(), b"\xff",
              b"\xc3", b" ", b'"\\u00e9"']
    agreed = accepted = 0
    for _ in range(20_000):
        lines = []
        for _ in range(int(rng.integers(1, 5))):
            middle = b"".join(pieces[i] for i in rng.integers(0, len(pieces),
                                                                int(rng.integers(0, 4))))
            lines.append(b"{" + middle + b"}" if rng.random() < 0.8 else middle)
        want = rule(lines)
        assert _one_flat_object_per_line(b"\n".join(lines), lines) == want, lines
        agreed += 1
        accepted += want
    assert agreed == 20_000 and 2_000 < accepted < 18_000  # (both answers exercised)


DEEP_OBJECTS = """
    import json, sys
    from unitless.connectors.files import read_file
    from unitless.parse.jsonl import _json_table
    from unitless.parse.spec import RecordSpec
    deep = b'{"a":' * 50_000 + b'1' + b'}' * 50_000
    assert _json_table([deep]) is None and _json_table([deep.replace(b'{', b'[')]) is None
    good = b'{"label": 1, "f1": 2.5}'
    out = []
    for name, lines in [("alone", [deep]), ("mixed", [good, deep, good])]:
        path = sys.argv[1] + "/" + name + ".jsonl"
        open(path, "wb").write(b"\\n".join(lines) + b"\\n")
        blocks = list(read_file(path, "jsonl", RecordSpec()))
        out.append([sum(len(b) for b, _ in blocks),
                    [(d.position, d.raw == deep, d.reason) for _, ds in blocks for d in ds]])
    print(json.dumps(out))
"""


def test_json_nested_50k_deep_never_reaches_arrow(tmp_path):
    """Arrow's JSON reader segfaults on objects nested ~20k deep: run where a crash cannot take
    pytest down with it."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(DEEP_OBJECTS), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    alone, mixed = json.loads(done.stdout.strip().splitlines()[-1])
    assert alone[0] == 0 and [(p, same) for p, same, _ in alone[1]] == [(1, True)]
    assert mixed[0] == 2 and [(p, same) for p, same, _ in mixed[1]] == [(2, True)]
    assert "nested deeper than 2" in mixed[1][0][2]


def test_csv_fields_over_128_kib(tmp_path):
    long_id = b"i" * 200_000
    lines = [GOOD["csv"],
             b"e1,a,1,0.5," + b"x" * 200_000 + b",1,2",            # unquoted, not a number
             b'"' + long_id + b'",b,-1,1,2,3,4',                   # quoted: any size is a field
             b'e3,a,1,"' + b"9" * 200_000 + b'",2,3,4']             # a huge number: +inf
    blocks, dead = read(tmp_path, "csv", lines)
    assert list(dead) == [3]
    assert_dead(dead, 3, lines[1], "feature 'f2' 'xxxxx")
    ids = sum((b.ids.to_pylist() for b in blocks), [])
    assert ids == ["e0", long_id.decode(), "e3"]
    # the huge number parses as +inf: the learner's checks refuse it
    assert np.isinf(np.concatenate([b.values for b in blocks])).sum() == 1


@pytest.mark.parametrize("fmt", TEXT_FORMATS)
def test_invalid_utf8_is_refused_with_its_exact_bytes(tmp_path, fmt):
    good = GOOD[fmt]
    bad = [good[:5] + b"\xff" + good[5:], good[:7] + b"\xc3(" + good[7:],
           good + b"\xed\xa0\x80", b"\x80"]
    blocks, dead = read(tmp_path, fmt, [good, *bad, good])
    first = first_line(fmt)
    assert sum(len(b) for b in blocks) == 2
    for position, (raw, at) in enumerate(zip(bad, [5, 7, len(good), 0]), first + 1):
        assert_dead(dead, position, raw, f"not valid UTF-8 at byte {at}")


@pytest.mark.parametrize("fmt", ["libsvm", "vw"])
def test_reasons_quote_at_most_a_clip_of_a_10_mb_value(tmp_path, fmt):
    huge = b"x" * (10 << 20)
    line = b"1 1:" + huge if fmt == "libsvm" else b"1 |n f:" + huge
    blocks, dead = read(tmp_path, fmt, [GOOD[fmt], line])
    assert dead[2].raw == line
    reason = dead[2].reason
    assert len(reason) < 200 and reason.endswith("is not a number")
    assert "'" + "x" * (MAX_QUOTED - 1) + "… " in reason  # the quote cut to MAX_QUOTED chars


def test_dead_letter_reasons_are_cut_to_a_sane_length():
    d = DeadLetter("s", 1, b"raw", "why " * 10_000)
    assert len(d.reason) == MAX_REASON + 1 and d.reason.endswith("…")


def test_libsvm_indices_are_positive_integers(tmp_path):
    lines = [b"1 1:2 qid:3 007:1.5", b"1 0:1", b"-1 2:1 -3:2", b"1 1.5:2", b"1 a:2", b"1 :2",
             b"1 \xd9\xa1:2"]  # an Arabic-Indic digit one is not an index
    blocks, dead = read(tmp_path, "libsvm", lines)
    assert sorted(dead) == [2, 3, 4, 5, 6, 7]
    for position, name in [(2, "'0'"), (3, "'-3'"), (4, "'1.5'"), (5, "'a'"), (7, "'١'")]:
        assert_dead(dead, position, lines[position - 1],
                    f"feature index {name} is not a positive integer")
    assert_dead(dead, 6, lines[5], "feature ':2' is not index:value")
    (block,) = blocks
    assert sorted(block.names[i] for i in block.indices) == ["1", "7", "constant"]


@pytest.mark.parametrize("fmt", TEXT_FORMATS)
def test_blank_lines_are_counted_in_their_chunk_and_logged(tmp_path, fmt, caplog):
    good = GOOD[fmt]
    lines = [b"", good, b"  ", b"\t\r", good, good, b"", good, b"\x0b\x0c", b""]
    with caplog.at_level(logging.INFO, logger="unitless"):
        blocks, dead = read(tmp_path, fmt, lines, chunk_size=2)
    assert dead == {} and [len(b) for b in blocks] == [2, 2]
    assert [b.blank_lines for b in blocks] == [3, 3]
    assert f"data.{fmt}: skipped 6 blank lines" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="unitless"):
        blocks, _ = read(tmp_path, fmt, [b"", b" "], name="blank")
    assert [(len(b), b.blank_lines) for b in blocks] == [(0, 2)]
    assert "skipped 2 blank lines" in caplog.text
    blocks, _ = read(tmp_path, fmt, [good], name="none")
    assert blocks[0].blank_lines == 0 and "none" not in caplog.text


def colliding_names(bits=18):
    seen = {}
    for i in range(100_000):
        name = f"k{i}"
        index = zlib.crc32(name.encode()) & ((1 << bits) - 1)
        if index in seen:
            return seen[index], name
        seen[index] = name


def test_fast_paths_that_fail_fall_back_to_the_careful_path(tmp_path):
    # a BOM that Arrow would skip at the start of a buffer, a lone CR Arrow takes for a line end
    spec = RecordSpec(label="label")
    path = tmp_path / "bom.csv"
    path.write_bytes(b"label,f1\n\xef\xbb\xbf1,2\n-1,3\n1,2\r-1,3\n")
    out = list(read_file(str(path), "csv", spec))
    dead = {d.position: d for _, ds in out for d in ds}
    assert sum(len(b) for b, _ in out) == 1
    assert dead[2].raw == b"\xef\xbb\xbf1,2"
    assert "label '\\ufeff1' is not a number" in dead[2].reason
    assert dead[4].raw == b"1,2\r-1,3" and "new-line character" in dead[4].reason
    # JSON field names that collide are data: hashed like any feature names (values add up)
    a, b = colliding_names()
    blocks, dead = read(tmp_path, "jsonl", [json.dumps({"label": 1, a: 2.0, b: 0.5}).encode()])
    assert dead == {} and sorted(blocks[0].values.tolist()) == [1.0, 2.5]
    # CSV columns that collide are a configuration error, as before
    path = tmp_path / "collide.csv"
    path.write_bytes(f"label,{a},{b}\n1,2,3\n".encode())
    with pytest.raises(ValueError, match="hash to the same feature index"):
        list(read_file(str(path), "csv", spec))


def test_wide_json_chunks_skip_arrow(tmp_path):
    """Arrow's JSON reader costs rows × distinct fields (one line of 100k fields among 8192
    lines: 108 s, 13 GB): it only gets chunks whose fields its first lines have."""
    good = [json.dumps({"label": 1, "f1": float(i)}).encode() for i in range(200)]
    assert _json_table(good) is not None
    wide = json.dumps({"label": 1, **{f"k{i}": 1 for i in range(1000)}}).encode()
    assert _json_table([wide] + good) is None
    late = good[:JSON_SAMPLE_LINES + 5] + [b'{"label": 1, "new": 2}'] + good
    assert _json_table(late) is None
    blocks, dead = read(tmp_path, "jsonl", late)
    assert dead == {} and sum(len(b) for b in blocks) == len(late)


def test_parquet_rows_with_wrong_types_or_null_labels(tmp_path):
    rows = [{"id": "0", "label": "1", "f1": 0.5, "tags": None, "meta": None},
            {"id": "1", "label": None, "f1": 0.5, "tags": None, "meta": None},
            {"id": "2", "label": "abc", "f1": 0.5, "tags": None, "meta": None},
            {"id": "3", "label": "", "f1": 0.5, "tags": None, "meta": None},
            {"id": "4", "label": "-1", "f1": None, "tags": [1, 2], "meta": None},
            {"id": "5", "label": "1", "f1": 1.0, "tags": None, "meta": {"a": 1}},
            {"id": "6", "label": "-1", "f1": float("nan"), "tags": None, "meta": None}]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    out = list(read_file(str(path), "parquet", SPEC, chunk_size=4))
    dead = {d.position: d for _, ds in out for d in ds}
    assert sorted(dead) == [1, 2, 3, 4, 5]
    for position, reason in [(1, "missing label"), (2, "label 'abc' is not a number"),
                             (3, "missing label"), (4, "feature 'tags' has unsupported value"),
                             (5, "feature 'meta' has unsupported value")]:
        assert_dead(dead, position, json.dumps(rows[position]), reason)
    # a NaN feature parses: the learner's checks refuse it
    assert sum((b.ids.to_pylist() for b, _ in out), []) == ["0", "6"]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_times_from_a_time_column_and_the_records_without_one(tmp_path, fmt):
    """--time-column: numbers of --time-unit since the epoch or ISO 8601 text (UTC without an
    offset; Parquet timestamps) become the block's record times, read alike by the fast path
    (a chunk of numbers) and record by record; a record without a readable time is a dead
    letter and the others of its chunk are read."""
    spec = RecordSpec(label="label", id="id", time="ts", time_unit=1e3)
    times = {"0": 1_700_000_000_500, "1": "2026-11-28T14:00:00.25+01:00", "2": None,
             "3": "2026-11-28 14:00:00", "4": "soon", "5": float("inf"), "6": True}
    want = {"0": 1_700_000_000.5, "1": 1_795_870_800.25, "3": 1_795_874_400.0}
    if fmt == "parquet":  # (a column has one type: timestamps, naive ones UTC)
        when = {"0": datetime.datetime(2023, 11, 14, 22, 13, 20, 500000), "2": None,
                "3": datetime.datetime(2026, 11, 28, 14)}
        want.pop("1")
        pq.write_table(pa.Table.from_pylist([{"id": i, "label": 1, "f1": 0.5, "ts": t}
                                             for i, t in when.items()]), tmp_path / "t.parquet")
        out = list(read_file(str(tmp_path / "t.parquet"), "parquet", spec))
        pq.write_table(pa.table({"id": ["7"], "label": [1], "f1": [0.5],
                                 "ts": [1_700_000_000_500]}), tmp_path / "numbers.parquet")
        (block, dead), = read_file(str(tmp_path / "numbers.parquet"), "parquet", spec)
        assert dead == [] and block.event_times.tolist() == [1_700_000_000.5]  # (fast path)
    else:
        def line(i, t):
            if fmt == "jsonl":
                return json.dumps({"id": i, "label": 1, "f1": 0.5, **(
                    {} if t is None else {"ts": t if not isinstance(t, float) else 1e400})}
                                  ).encode()
            return f"{i},1,0.5,{'' if t is None else 'inf' if isinstance(t, float) else t}"\
                .encode()
        path = tmp_path / f"rows.{fmt}"
        path.write_bytes(b"\n".join([b"id,label,f1,ts"] * (fmt == "csv")
                                    + [line(i, t) for i, t in times.items()]) + b"\n")
        out = list(read_file(str(path), fmt, spec))
    got = {i: t for b, _ in out for i, t in zip(b.ids.to_pylist(), b.event_times.tolist())}
    assert got == pytest.approx(want, abs=1e-6) and set(got) == set(want)
    reasons = sorted(d.reason for _, ds in out for d in ds)
    assert len(reasons) == (1 if fmt == "parquet" else 4), reasons
    assert any("missing time field 'ts'" in r for r in reasons)
    if fmt != "parquet":
        assert any("time 'soon' is neither a number nor ISO 8601 text" in r for r in reasons)


def test_a_time_column_is_refused_where_it_cannot_be_read(tmp_path, capsys):
    data = tmp_path / "data.vw"
    data.write_text("1 'e0| f1:0.5\n")
    for more, said in ((["--input", str(data), "--time-column", "ts"],
                        "--time-column names a field, and vw records have none"),
                       (["--input", str(data), "--format", "jsonl", "--id-column", "ts",
                         "--time-column", "ts"], "--id-column and --time-column both name "
                        "column 'ts'")):
        assert main(["train", *more, "--model-dir", str(tmp_path / "m")]) == 2
        assert said in capsys.readouterr().err


def test_kafka_values_as_bytes_null_and_invalid(tmp_path):
    """What ReadPartition._emit hands each parser: the message values as they came."""
    csv_spec = RecordSpec(label="label", id="id", model_key="segment",
                          columns=HEADER.decode().split(","))
    for parse, spec, good in [(parse_jsonl, SPEC, GOOD["jsonl"]), (parse_vw, SPEC, GOOD["vw"]),
                              (parse_csv, csv_spec, GOOD["csv"])]:
        items = [(10, good), (11, None), (12, b"\xff" + good), (13, good + b"\n" + good),
                 (14, good)]
        block, dead = parse(spec, "topic/0", items)
        assert block.positions.tolist() == [10, 14] and list(block.raw) == [good, good]
        assert [(d.position, d.raw) for d in dead] == [(11, None), (12, b"\xff" + good),
                                                      (13, good + b"\n" + good)]
        assert "no value (null)" in dead[0].reason and "byte 0" in dead[1].reason
    with pytest.raises(ValueError, match="column names"):
        parse_csv(SPEC, "topic/0", [(0, GOOD["csv"])])


def test_dead_letter_json_lines_carry_the_exact_bytes(tmp_path):
    raws = [b"plain text \xe2\x9c\x93", b"\xff\xfe not UTF-8", None, b""]
    table = dead_letter_table([DeadLetter("s", i, raw, "why") for i, raw in enumerate(raws)])
    path = write_table(str(tmp_path / "dead"), table, "jsonl")
    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    assert [list(r) for r in rows] == [["source", "position", "raw", "raw_base64", "reason"]] * 4
    assert [r["raw"] for r in rows] == ["plain text ✓", None, None, ""]
    assert [None if r["raw_base64"] is None else base64.b64decode(r["raw_base64"])
            for r in rows] == raws
    back = read_output(str(tmp_path / "dead")).to_pylist()
    assert [r["raw_base64"] for r in back] == [r["raw_base64"] for r in rows]


# --- the fuzz: the real pipeline over good records mixed with 10,000 hostile ones per format ---

N_BAD, N_GOOD, N_UNLABELED, SEGMENTS = 10_000, 4_000, 400, 10


def huge_records(fmt, row):
    """A few records of 100 KiB to 1 MiB, and nesting 100k deep (JSON)."""
    if fmt == "csv":
        return [with_value(fmt, row, b"x" * 300_000),
                with_value(fmt, row, b'"' + b"9" * 200_000 + b'"'),
                with_label(fmt, row, b'"' + b"1" * 150_000 + b'"')]
    if fmt == "jsonl":
        return [with_label(fmt, row, b'"' + b"x" * 300_000 + b'"'),
                with_value(fmt, row, b"[" * 100_000 + b"]" * 100_000),
                b'{"a":' * 50_000 + b"1" + b"}" * 50_000]
    return [with_value(fmt, row, b"y" * 1_000_000), with_label(fmt, row, b"2" * 200_000)]


def fuzz_layout(fmt, seed):
    """(lines, {position: bad record bytes}, [position of each good record], {position: row of
    each record without a label}, good rows): segments of good records alone, then of hostile
    records mixed with good ones, records without a label (but in libsvm) and blank lines."""
    rng = np.random.default_rng(seed)
    rows = good_rows(rng, N_GOOD)
    unlabeled = iter([{**row, "id": "u" + row["id"]} for row in good_rows(
        np.random.default_rng(seed + 100), N_UNLABELED)] if fmt != "libsvm" else [])
    bad_count = [N_BAD // SEGMENTS] * SEGMENTS
    lines, bad, good_at, served = [], {}, [], {}
    first = first_line(fmt)
    per_segment = N_GOOD // SEGMENTS
    for s in range(SEGMENTS):
        seg_rows = rows[s * per_segment:(s + 1) * per_segment]
        pure, mixed = seg_rows[:per_segment // 2], seg_rows[per_segment // 2:]
        for row in pure:
            good_at.append(first + len(lines))
            lines.append(text_record(fmt, row))
        slots = ["good"] * len(mixed) + ["bad"] * bad_count[s] + ["blank"] * 20
        rng.shuffle(slots)
        extra = iter(huge_records(fmt, mixed[0]) if s == SEGMENTS // 2 else [])
        good_iter = iter(mixed)
        for slot in slots:
            row = next(unlabeled, None) if slot == "good" and rng.random() < 0.2 else None
            if row is not None:
                served[first + len(lines)] = row
                lines.append(unlabeled_record(fmt, row, len(served)))
            if slot == "blank":
                lines.append([b"", b" ", b"\t", b"\r"][rng.integers(4)])
            elif slot == "good":
                good_at.append(first + len(lines))
                lines.append(text_record(fmt, next(good_iter)))
            else:
                record = next(extra, None) or hostile(fmt, rng, rows[rng.integers(len(rows))])
                assert b"\n" not in record and record.strip() and not record.endswith(b"\r")
                bad[first + len(lines)] = record
                lines.append(record)
    return lines, bad, good_at, served, rows


PARQUET_SCHEMA = pa.schema([("id", pa.string()), ("segment", pa.string()),
                            ("label", pa.string()), *[(f, pa.float64()) for f in FEATURES],
                            ("tags", pa.list_(pa.int64())),
                            ("meta", pa.struct([("a", pa.int64())])), ("blob", pa.binary())])


def parquet_row(row, **changes):
    out = {"id": row["id"], "segment": row["segment"], "label": str(row["label"]),
           **{f: row.get(f) for f in FEATURES}, "tags": None, "meta": None, "blob": None}
    out.update(changes)
    return out


def hostile_parquet_row(rng, row):
    kinds = [{"label": "abc"}, {"label": "5"},
             {"label": "1e300"}, {"label": "nan"}, {"label": "\ufeff1"}, {"label": "1\x00"},
             {"label": "9" * 400}, {"f2": float("nan")}, {"f3": float("inf")},
             {"f1": -1e300}, {"f4": 1e101}, {"tags": [1, 2]}, {"meta": {"a": 1}},
             {"blob": b"\xff\x00"}, {"tags": []}]
    return parquet_row(row, **kinds[rng.integers(len(kinds))])


def write_fuzz_input(tmp_path, fmt, seed):
    """(mixed file, good-only file, {position: raw bytes of each bad record}, [positions of the
    good records in the mixed file], [positions of those without a label])."""
    lines, bad, good_at, served, rows = fuzz_layout("csv" if fmt == "parquet" else fmt, seed)
    mixed, only_good = tmp_path / f"mixed.{fmt}", tmp_path / f"good.{fmt}"
    if fmt != "parquet":
        head = [HEADER] if fmt == "csv" else []
        mixed.write_bytes(b"\n".join(head + lines) + b"\n")
        good_lines = [lines[p - first_line(fmt)] for p in good_at]
        only_good.write_bytes(b"\n".join(head + good_lines) + b"\n")
        return mixed, only_good, bad, good_at, sorted(served)
    # Parquet: the same layout of good, unlabeled and hostile rows (no blank lines), labels as
    # text
    rng = np.random.default_rng(seed + 1)
    table_rows, bad_rows, good_positions, good = [], {}, [], iter(rows)
    served_positions = []
    for position in range(2, 2 + len(lines)):
        if position in bad:
            record = hostile_parquet_row(rng, rows[rng.integers(len(rows))])
            bad_rows[len(table_rows)] = json.dumps(record, default=str).encode()
            table_rows.append(record)
        elif position in served:
            served_positions.append(len(table_rows))
            table_rows.append(parquet_row(served[position],
                                          label=None if len(served_positions) % 2 else ""))
        elif position in good_at:
            good_positions.append(len(table_rows))
            table_rows.append(parquet_row(next(good)))
    pq.write_table(pa.Table.from_pylist(table_rows, schema=PARQUET_SCHEMA), mixed,
                   row_group_size=3000)
    pq.write_table(pa.table({"id": [r["id"] for r in rows], "segment": [r["segment"] for r in rows],
                             "label": [float(r["label"]) for r in rows],
                             **{f: [r.get(f) for r in rows] for f in FEATURES}}), only_good)
    return mixed, only_good, bad_rows, good_positions, served_positions


def reading(fmt):
    """The options of a run over a file in ``fmt`` (most of whose records are hostile here, by
    design)."""
    keyed = fmt in ("csv", "jsonl", "parquet")
    return ["--format", fmt, "--chunk-size", "250", "--max-dead-fraction", "1",
            *(["--model-key-column", "segment", "--id-column", "id"] if keyed else [])]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "vw", "libsvm", "parquet"])
def test_fuzz_the_pipeline_learns_only_the_good_records(tmp_path, fmt):
    """Hostile records are dead letters, byte for byte; good ones are learned, those without a
    label served; the models equal those of a run over the good records alone."""
    mixed, only_good, bad, good_at, served_at = write_fuzz_input(tmp_path, fmt, seed=11)
    assert len(bad) >= N_BAD and (len(served_at) > N_UNLABELED // 2 or fmt == "libsvm")
    out = train(tmp_path / "mixed-run", "--input", mixed, *reading(fmt))
    dead = read_output(str(out / "dead")).to_pylist()
    assert {d["source"] for d in dead} == {str(mixed.resolve())}
    got = {}
    for d in dead:
        assert d["position"] not in got, f"two dead letters for {d['position']}"
        got[d["position"]] = base64.b64decode(d["raw_base64"])
        assert len(d["reason"]) <= MAX_REASON + 1
        if d["raw"] is not None:
            assert d["raw"].encode() == got[d["position"]]
    assert set(got) == set(bad), (sorted(set(got) ^ set(bad))[:5])
    wrong = [p for p in bad if got[p] != bad[p]]
    assert not wrong, (wrong[:3], bad[wrong[0]][:80], got[wrong[0]][:80])

    predicted = read_output(str(out / "pred")).select(["position", "served"]).to_pylist()
    # each good record exactly once, served where it has no label
    assert sorted((p["position"], p["served"]) for p in predicted) == sorted(
        [(p, False) for p in good_at] + [(p, True) for p in served_at])

    alone = latest_models(train(tmp_path / "good-run", "--input", only_good, *reading(fmt)))
    learned = latest_models(out)
    assert set(learned) == set(alone) and learned
    for key, table in learned.items():
        want = alone[key]
        assert table.drop_columns(["name"]).equals(want.drop_columns(["name"])), key
        m1, m2 = (json.loads(t.schema.metadata[b"unitless"]) for t in (table, want))
        assert m1["examples_seen"] == m2["examples_seen"]
        assert m1["cumulative_loss"] == m2["cumulative_loss"]
    assert sum(json.loads(t.schema.metadata[b"unitless"])["examples_seen"]
               for t in learned.values()) == len(good_at)
