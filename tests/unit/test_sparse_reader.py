"""The compiled reader of VW text and libsvm against the per-line parsers: the same blocks, bit
for bit, on valid records, and never a record of its own reading where the per-line parser
refuses one (fuzzed: truncated lines, huge numbers, bad bytes, empty namespaces, duplicates)."""
import random

import numpy as np
import pytest

from unitless.connectors.files import read_file
from unitless.parse.formats import FORMATS
from unitless.parse.line_spans import joined
from unitless.parse.sparse_text import read_block
from unitless.parse.spec import LabelMap, RecordSpec
from unitless.parse.vw import parse_vw

PER_LINE = {name: FORMATS[name].line_by_line for name in ("vw", "libsvm")}


def assert_same_block(a, b):
    assert a.positions.tolist() == b.positions.tolist()
    assert a.ids.equals(b.ids) and a.keys.equals(b.keys)
    for x, y in ((a.labels, b.labels), (a.weights, b.weights), (a.values, b.values)):
        assert x.tobytes() == y.tobytes()  # bit for bit: -0.0, NaN and the last ulp alike
    assert a.indptr.tolist() == b.indptr.tolist() and a.indices.tolist() == b.indices.tolist()
    assert list(a.names.items()) == list(b.names.items())
    assert [a.raw[i] for i in range(len(a))] == [bytes(b.raw[i]) for i in range(len(b))]


def compiled(fmt, spec, lines, first=1):
    data, starts, stops = joined(lines)
    return read_block(fmt, spec, "src", data, starts, stops,
                      np.arange(first, first + len(lines), dtype=np.int64))


def per_line(fmt, spec, lines, first=1):
    return PER_LINE[fmt](spec, "src", list(enumerate(lines, first)))


def _number(rng):
    whole = rng.choice(["0", "1", "7", "12", "0.5", "3.25", "1e3", "2.5E-7", "-4", "+0.125",
                        ".5", "5.", "-0", "0.0", "1e-30", "9e300", "1e400", "123456789012345678",
                        "0.12345678901234567", "0.1000000000000000055511151231257827",
                        "1.7976931348623157e308", "4.9e-324", "1e23", "8.5e-23"])
    if rng.random() < 0.5:  # a decimal of random digits and exponent
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 20)))
        dot = rng.randint(0, len(digits))
        whole = f"{rng.choice(['', '-', '+'])}{digits[:dot]}.{digits[dot:]}"
        if rng.random() < 0.5:
            whole += f"e{rng.randint(-40, 40)}"
    return whole


def _name(rng):
    return rng.choice(["a", "b", "word", "x1", "price", "_", "k-2", "ab'c", "z9"])


def vw_line(rng, unlabeled=True):
    head = []
    if not unlabeled or rng.random() < 0.9:
        head.append(rng.choice(["1", "-1", "0", "0.5", "3", _number(rng)]))
        if rng.random() < 0.3:
            head.append(rng.choice(["2", "0.5", "1", "1e-3"]))
    if rng.random() < 0.3:
        head.append("'" + rng.choice(["t1", "", "mail-17", "x:y"]))
    sections = []
    for _ in range(rng.randint(1, 3)):
        namespace = rng.choice(["", "", "ns", "u:2", ":4", "a"])
        features = [_name(rng) + (f":{_number(rng)}" if rng.random() < 0.7 else "")
                    for _ in range(rng.randint(0, 6))]
        gap = " " if not namespace else rng.choice([" ", "\t", "  "])
        sections.append(f"|{namespace}{gap}{' '.join(features)}")
    return (" ".join(head) + rng.choice([" ", "", "\t"]) + " ".join(sections)).encode()


def libsvm_line(rng, unlabeled=False):
    features = [f"{rng.choice(['', '0', '00'])}{rng.randint(1, 30)}:{_number(rng)}"
                for _ in range(rng.randint(0, 8))]
    if rng.random() < 0.2:
        features.insert(0, f"qid:{rng.randint(1, 9)}")
    comment = " # a comment" if rng.random() < 0.2 else ""
    return f"{rng.choice(['1', '-1', '+1', '0', '2.5'])} {' '.join(features)}{comment}".encode()


LINES = {"vw": vw_line, "libsvm": libsvm_line}
SPECS = [RecordSpec(require_label=False), RecordSpec(bits=4, bias=False),
         RecordSpec(bits=24, labels=LabelMap(positive="1"))]


@pytest.mark.parametrize("fmt", ["vw", "libsvm"])
@pytest.mark.parametrize("spec", SPECS, ids=["serving", "colliding", "mapped"])
def test_valid_records_read_alike(fmt, spec):
    rng = random.Random(7)
    for _ in range(200):
        lines = [LINES[fmt](rng, not spec.require_label) for _ in range(rng.randint(1, 40))]
        block = compiled(fmt, spec, lines)
        expected, dead = per_line(fmt, spec, lines)
        assert not dead and block is not None, lines
        assert_same_block(block, expected)


def _mutate(rng, line):
    """A line broken in one of the ways hostile input is."""
    kind = rng.randrange(9)
    at = rng.randint(0, len(line))
    if kind == 0:
        return line[:at]
    if kind == 1:
        return line[:at] + bytes([rng.randrange(256)]) + line[at:]
    if kind == 2:
        return line[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc2\xa0",
                                       b"\xe2\x80\x83"]) + line[at:]
    if kind == 3:
        return line[:at] + rng.choice([b"|", b":", b"'", b"#", b" ", b"||", b"| |"]) + line[at:]
    if kind == 4:
        return line[:at] + rng.choice([b"1" * 400, b"9e99999", b"-", b"1e", b".", b"nan",
                                       b"inf", b"1_0", b"0x10", b"--1"]) + line[at:]
    if kind == 5:
        return line + b" " + line  # duplicate features (and a second head)
    if kind == 6:
        return line[:at] + rng.choice([b"\r", b"\n", b"\x00", b"\x1c", b"\x0b"]) + line[at:]
    if kind == 7:
        return rng.choice([b"", b" ", b"|", b"1", b"1 |", b"'", b"# x", b"qid:1", b"nan |a",
                           b"NaN 1:2", b"true |a", b"1 2 3 |a", b"1 nan |a", b"1 1 1 |a"])
    return line.replace(b" ", b"  ").replace(b":", b"::", 1)


@pytest.mark.parametrize("fmt", ["vw", "libsvm"])
@pytest.mark.parametrize("spec", SPECS, ids=["serving", "colliding", "mapped"])
def test_hostile_records_refused_alike(fmt, spec):
    """Each of 10,000 broken lines alone: the compiled reader reads it as the per-line parser
    does, or leaves it to that parser, never reading one that parser refuses."""
    rng = random.Random(11)
    read = 0
    for _ in range(10_000):
        line = _mutate(rng, LINES[fmt](rng))
        block = compiled(fmt, spec, [line])
        expected, dead = per_line(fmt, spec, [line])
        if block is None:
            continue
        read += 1
        assert not dead, (line, dead[0].reason)
        assert_same_block(block, expected)
    assert read > 1000  # (the mutations leave many lines valid: those were read)


@pytest.mark.parametrize("fmt", ["vw", "libsvm"])
def test_a_chunk_with_a_bad_record_is_read_a_line_at_a_time(fmt):
    spec = RecordSpec()
    lines = [LINES[fmt](random.Random(i)) for i in range(5)]
    lines[2] = b"\xff\xfe not a record"
    block, dead = FORMATS[fmt].parse(spec, "src", list(enumerate(lines, 1)))
    expected, expected_dead = per_line(fmt, spec, lines)
    assert [(d.position, d.raw, d.reason) for d in dead] == \
        [(d.position, d.raw, d.reason) for d in expected_dead] == [(3, lines[2], dead[0].reason)]
    assert_same_block(block, expected)


@pytest.mark.parametrize("fmt", ["vw", "libsvm"])
def test_file_read_compiled_matches_per_line(tmp_path, fmt):
    """A file with blank lines, CRLF endings and a bad record in one chunk: the blocks and dead
    letters of read_file equal the per-line parser's over the same lines."""
    rng = random.Random(3)
    lines = [LINES[fmt](rng) for _ in range(2_000)]
    lines[1500] = b"bad \xff record"
    text = b""
    for i, line in enumerate(lines):
        text += line + (b"\r\n" if i % 7 == 0 else b"\n") + (b"  \n" if i % 300 == 0 else b"")
    path = tmp_path / f"data.{fmt}"
    path.write_bytes(text)
    spec = RecordSpec(require_label=False)
    chunks = list(read_file(str(path), fmt, spec, chunk_size=512))
    numbers = [i + 1 for i, raw in enumerate(text.split(b"\n")[:-1]) if raw.strip()]
    assert sum(len(b) for b, _ in chunks) + sum(len(d) for _, d in chunks) == len(lines)
    assert sum(b.blank_lines for b, _ in chunks) == 7
    at = 0
    for block, dead in chunks:
        n = len(block) + len(dead)
        expected, expected_dead = per_line(fmt, spec, [])  if n == 0 else \
            PER_LINE[fmt](spec, str(path), list(zip(numbers[at:at + n], lines[at:at + n])))
        assert [(d.position, d.raw) for d in dead] == [(d.position, d.raw) for d in expected_dead]
        expected.source = block.source
        assert_same_block(block, expected)
        at += n
    assert [d.position for _, dead in chunks for d in dead] == [numbers[1500]]


def test_kafka_messages_take_the_compiled_path():
    """A poll's VW messages (values without line ends, as producers send them) are read by the
    compiled reader; the broker test (kafka/test_kafka_hostile.py) checks that the models
    learned from good messages alone, read so, equal those of the mixed topic read a line at a
    time."""
    from unitless.parse.line_spans import LineSpans
    rng = random.Random(5)
    values = [vw_line(rng) for _ in range(300)]
    block, dead = parse_vw(RecordSpec(require_label=False), "topic/0",
                           list(zip(range(100, 400), values)))
    assert not dead and isinstance(block.raw, LineSpans)
    assert [block.raw[i] for i in range(len(block))] == values
    expected, _ = per_line("vw", RecordSpec(require_label=False), values, first=100)
    expected.source = "topic/0"
    assert_same_block(block, expected)


def test_the_format_table_says_which_formats_a_kafka_message_may_be():
    from unitless.pipelines.inputs import resolve_inputs
    assert resolve_inputs("kafka://localhost:9092/t", "libsvm") == (["kafka://localhost:9092/t"],
                                                                     "libsvm")
    with pytest.raises(ValueError, match="Kafka messages cannot be parquet"):
        resolve_inputs("kafka://localhost:9092/t", "parquet")


@pytest.mark.parametrize("fmt", ["vw", "libsvm"])
def test_long_rows_with_repeated_features_read_alike(fmt):
    """Rows of hundreds of features, many repeated (summed in the order written) and some
    cancelling to zero, in 2^6 indices: the long-row sort, and colliding names."""
    rng = random.Random(13)
    spec = RecordSpec(bits=6)
    lines = []
    for _ in range(50):
        features = [(rng.randint(1, 90), rng.choice(["1", "-1", "0.1", "0.2", "-0.3", "2.5e-1"]))
                    for _ in range(rng.randint(60, 400))]
        text = " ".join(f"{i}:{v}" if fmt == "libsvm" else f"f{i}:{v}" for i, v in features)
        lines.append(f"1 {text}".encode() if fmt == "libsvm" else f"1 | {text}".encode())
    expected, dead = per_line(fmt, spec, lines)
    assert not dead
    assert_same_block(compiled(fmt, spec, lines), expected)
