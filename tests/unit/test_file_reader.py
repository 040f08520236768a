"""The file reader: CSV buffers parsed whole by Arrow give exactly what the per-line parser gives,
with the right line numbers, whatever the buffer boundaries and line endings."""
import numpy as np
import pytest
from apache_beam.pvalue import TaggedOutput

from unitless.connectors.files import _buffers, read_file, read_output
from unitless.parse.csv import parse_csv
from unitless.parse.jsonl import _json_table, parse_jsonl
from unitless.parse.records import TextLines
from unitless.parse.spec import RecordSpec
from unitless.parse.tables import numeric_table
from unitless.pipelines.config import LearnerCheck
from unitless.pipelines.io.files import ReadFiles

SPEC = RecordSpec(label="label", id="id", model_key="segment", bits=18)
HEADER = "id,segment,label,f1,f2"


def gappy_rows(n):
    rng = np.random.default_rng(3)
    return [f"e{i},{'ab'[i % 2]},{rng.choice([-1, 1])},{rng.normal() * 1e3!r},"
            f"{'' if i % 5 == 0 else repr(rng.normal() * 1e-3)}" for i in range(n)]


def read_blocks(path, **kwargs):
    out = list(read_file(str(path), "csv", SPEC, **kwargs))
    return [b for b, _ in out], [d for _, ds in out for d in ds]


def parse_per_line(path):
    """The careful per-line parser over the same lines: (line number, block)."""
    lines = path.read_bytes().decode().replace("\r\n", "\n").split("\n")
    items = [(i + 1, t) for i, t in enumerate(lines) if i > 0 and t.strip()]
    spec = RecordSpec(**{**SPEC.__dict__, "columns": HEADER.split(",")})
    return parse_csv(spec, str(path), items)


def same_examples(got, want):
    assert np.concatenate([b.positions for b in got]).tolist() == want.positions.tolist()
    assert sum((b.ids.to_pylist() for b in got), []) == want.ids.to_pylist()
    assert sum((b.keys.to_pylist() for b in got), []) == want.keys.to_pylist()
    np.testing.assert_array_equal(np.concatenate([b.labels for b in got]), want.labels)
    np.testing.assert_array_equal(np.concatenate([b.values for b in got]), want.values)
    np.testing.assert_array_equal(np.concatenate([b.indices for b in got]), want.indices)


class ShortReads:
    """A file object whose reads bring at most ``most`` bytes, as a stream's may."""

    def __init__(self, data, most):
        self.data, self.most, self.at = data, most, 0

    def read(self, n):
        out = self.data[self.at:self.at + min(n, self.most)]
        self.at += len(out)
        return out


def test_buffers_are_runs_of_whole_lines_that_add_up_to_the_file(monkeypatch):
    """Whatever the buffer size, the reads' sizes, the bytes read before (``rest``) and where
    lines end (a line longer than the reads too): each buffer ends with a newline, and
    together they are the file (a newline added after a last line without one)."""
    import unitless.connectors.files as files
    monkeypatch.setattr(files, "LINE_END_READ", 4)
    texts = [b"", b"a", b"a\n", b"ab\ncd", b"ab\r\ncd\r\n", b"\n\n\nx", b"x" * 30 + b"\ny",
             b"a\nbb\nccc\n" * 5 + b"d" * 50]
    for text in texts:
        for size in (1, 2, 3, 7, 100):
            for most in (1, 3, 1000):
                for rest in (b"", b"r", b"r\n"):
                    got = list(_buffers(ShortReads(text, most), size, rest))
                    whole = rest + text
                    assert b"".join(got) == (whole if whole.endswith(b"\n") or not whole
                                             else whole + b"\n")
                    assert all(buffer.endswith(b"\n") for buffer in got)


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
@pytest.mark.parametrize("buffer_bytes", [64, 1000, 1 << 20])
def test_whole_buffer_csv_equals_the_per_line_parser(tmp_path, ending, buffer_bytes):
    path = tmp_path / "data.csv"
    path.write_bytes((ending.join([HEADER, *gappy_rows(300)])).encode())  # no final newline
    got, dead = read_blocks(path, chunk_size=64, buffer_bytes=buffer_bytes)
    want, want_dead = parse_per_line(path)
    assert dead == want_dead == []
    assert max(len(b) for b in got) <= 64
    assert all(isinstance(b.raw, TextLines) for b in got)  # every buffer was parsed whole
    same_examples(got, want)


def test_blank_lines_and_quotes_keep_line_numbers(tmp_path):
    lines = [HEADER, *gappy_rows(40)]
    lines[7] = ""
    lines[12] = '"e11",b,1,2.5,"3"'
    lines[30] = "   "
    path = tmp_path / "data.csv"
    path.write_text("\n".join(lines) + "\n\n")
    got, dead = read_blocks(path, chunk_size=16, buffer_bytes=200)
    want, _ = parse_per_line(path)
    same_examples(got, want)
    assert not all(isinstance(b.raw, TextLines) for b in got)
    assert 8 not in want.positions and 13 in want.positions and 31 not in want.positions


def test_rows_refused_where_they_are_read_keep_their_raw_line(tmp_path):
    lines = [HEADER, *gappy_rows(50)]
    lines[10] = "e9,b,1,nan,2"   # parses as numbers; the learner refuses it
    lines[20] = "e19,a,3,1,2"     # not a logistic label
    path = tmp_path / "data.csv"
    path.write_text("\n".join(lines) + "\n")
    read = ReadFiles("csv", SPEC, 8192, LearnerCheck(1 << 18, 1, "logistic"),
                     str(tmp_path / "dead"))
    read.setup()
    out = list(read.process(str(path)))
    good = [b for b in out if not isinstance(b, TaggedOutput)]
    dead = read_output(str(tmp_path / "dead")).to_pylist()  # written before the blocks left
    assert [(d["position"], d["raw"]) for d in dead] == [(11, lines[10]), (21, lines[20])]
    # and they are the step's dead-letter output too
    (tagged,) = [o.value for o in out if isinstance(o, TaggedOutput)]
    assert tagged.column("position").to_pylist() == [11, 21]
    assert "not finite" in dead[0]["reason"] and "not a logistic label" in dead[1]["reason"]
    assert sum(len(b) for b in good) == 48 and all(b.raw is None for b in good)


def test_json_lines_parsed_whole_equal_the_per_line_parser():
    spec = RecordSpec(label="label", id="id", model_key="segment", bits=18)
    lines = ['{"id": "1", "segment": "a", "label": 1, "f1": 2.5, "f2": 3}',
             '{"id": "2", "label": -1, "f2": null, "f3": true}',           # no key, null, boolean
             '{"f1": 1e-3, "label": 1, "segment": "b", "id": "x3"}']     # other field order
    items = list(enumerate(lines, 1))
    whole, dead = parse_jsonl(spec, "s", items)
    assert dead == [] and numeric_table(spec, _json_table(lines)) is not None  # Arrow took it
    careful, dead = parse_jsonl(spec, "s", items + [(4, "{broken")])     # forces the per-line path
    assert [d.position for d in dead] == [4]
    assert whole.positions.tolist() == careful.positions.tolist() == [1, 2, 3]
    assert whole.ids.to_pylist() == careful.ids.to_pylist() == ["1", "2", "x3"]
    assert whole.keys.to_pylist() == careful.keys.to_pylist() == ["a", "", "b"]
    assert whole.labels.tolist() == careful.labels.tolist()
    for r in range(3):
        def row(b):
            a, z = b.indptr[r], b.indptr[r + 1]
            return sorted(zip(b.indices[a:z].tolist(), b.values[a:z].tolist()))
        assert row(whole) == row(careful)


def test_json_lines_none_of_which_has_a_label_parsed_whole_when_they_may_be_served():
    """Examples to serve (a features topic whose labels come on another): no label column in
    the batch at all, read by Arrow as a whole, alike the per-line parser; where every record
    needs a label, each is refused."""
    spec = RecordSpec(label="label", id="id", bits=18, require_label=False)
    lines = ['{"id": "1", "f1": 2.5, "f2": 3}', '{"id": "2", "f2": null, "f3": true}']
    items = list(enumerate(lines, 1))
    whole, dead = parse_jsonl(spec, "s", items)
    assert dead == [] and numeric_table(spec, _json_table(lines)) is not None  # Arrow took it
    careful, dead = parse_jsonl(spec, "s", items + [(3, "{broken")])
    assert np.isnan(whole.labels).all() and np.isnan(careful.labels).all()
    assert whole.ids.to_pylist() == careful.ids.to_pylist() == ["1", "2"]
    assert (whole.indptr.tolist(), whole.indices.tolist(), whole.values.tolist()) == (
        careful.indptr.tolist(), careful.indices.tolist(), careful.values.tolist())
    _, dead = parse_jsonl(RecordSpec(label="label", id="id", bits=18), "s", items)
    assert [d.reason for d in dead] == ["missing label field 'label'"] * 2


@pytest.mark.parametrize("text, kept_once", [
    ("label,a,b\n1,0.5,3\n-1,2,7e3\n1,1e-4,0.25\n", True),  # every row the same features
    ("label,a,b\n1,0.5,3\n-1,,7e3\n1,1e-4,0.25\n", False),  # a missing value
    ("label,a,b\n1,0.5,3\n", False),                          # one row
])
def test_a_block_pickles_to_the_same_block(tmp_path, text, kept_once):
    import pickle
    path = tmp_path / "x.csv"
    path.write_text(text)
    [block] = [b for b, _ in read_file(str(path), "csv", RecordSpec(), 100)]
    block.raw = None
    data = pickle.dumps(block, protocol=pickle.HIGHEST_PROTOCOL)
    back = pickle.loads(data)
    for name in ("positions", "labels", "weights", "indptr", "indices", "values"):
        want, got = getattr(block, name), getattr(back, name)
        assert got.dtype == want.dtype and np.array_equal(got, want), name
    assert back.ids.equals(block.ids) and back.keys.equals(block.keys)
    assert back.names == block.names and back.source == block.source
    # the indices of rows that all carry the same features travel once
    whole = len(pickle.dumps(dict(block.__dict__), protocol=pickle.HIGHEST_PROTOCOL))
    assert (len(data) < whole - block.indices.nbytes // 2) == kept_once
