"""The labels join's edges, tried as a careless user would (issue #56): a labels input that
lacks a column the join needs is refused before the run, in one line; a run that learns no
example from a label (only served them, or only --expired-label's) fails with the reason,
whatever it served; ids are compared as the text the record wrote."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from unitless.connectors.files import read_output
from unitless.labels import join as label_join
from unitless.parse.csv import parse_csv
from unitless.parse.jsonl import parse_jsonl
from unitless.parse.spec import RecordSpec
from unitless.parse.vw import parse_vw

from tests.helpers.commands import dead_letters, run_train
from tests.helpers.runners import RUNNERS, runner_args

N = 40
KEYED = ("--id-column", "id", "--model-key-column", "key")


def error_line(capsys):
    """The command's last line on stderr (its one-line failure)."""
    return capsys.readouterr().err.strip().splitlines()[-1]


def write_csv(path, header, rows):
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def features_rows():
    """N examples (id, model key, feature, time) over two model keys."""
    return [(f"e{i}", f"k{i % 2}", i % 5, 1000 + i) for i in range(N)]


def label_of(i):
    return 1 if i % 3 else -1


def no_checkpoints(out):
    """True when the run left no model directory, or an empty one."""
    models = out / "models"
    return not models.exists() or not any(models.iterdir())


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("missing, options", [
    ("key", KEYED), ("t", (*KEYED, "--time-column", "t")), ("label", KEYED), ("id", KEYED)])
def test_a_labels_file_without_a_column_the_join_needs_is_refused_before_the_run(
        tmp_path, capsys, fmt, missing, options):
    columns = ["id", "key", "label", "t"]
    rows = [(f"e{i}", f"k{i % 2}", label_of(i), 1000 + i) for i in range(N)]
    kept = [c for c in columns if c != missing]
    labels = tmp_path / f"labels.{fmt}"
    features = tmp_path / f"features.{fmt}"
    feature_columns = ["id", "key", "a", "t"]
    if fmt == "csv":
        write_csv(labels, ",".join(kept), [[r[columns.index(c)] for c in kept] for r in rows])
        write_csv(features, ",".join(feature_columns), features_rows())
    else:
        pq.write_table(pa.table({c: [r[columns.index(c)] for r in rows] for c in kept}), labels)
        pq.write_table(pa.table({c: [r[j] for r in features_rows()]
                                 for j, c in enumerate(feature_columns)}), features)
    code, out = run_train(tmp_path, "--input", features, "--labels", labels, *options)
    assert code == 2
    assert error_line(capsys) == (
        f"unitless: error: {labels}: column {missing!r} not in its columns: with --labels, "
        "each input needs the --id-column (and the --model-key-column and --time-column when "
        "given), and each labels file those and the --label-column")
    assert no_checkpoints(out)  # (no model '' of the labels without a key)


def test_an_input_without_the_model_key_column_is_refused_before_the_run(tmp_path, capsys):
    features = write_csv(tmp_path / "features.csv", "id,a",
                         [(f"e{i}", i % 5) for i in range(N)])
    labels = write_csv(tmp_path / "labels.csv", "id,key,label",
                       [(f"e{i}", f"k{i % 2}", label_of(i)) for i in range(N)])
    code, out = run_train(tmp_path, "--input", features, "--labels", labels, *KEYED)
    assert code == 2
    assert error_line(capsys).startswith(
        f"unitless: error: {features}: column 'key' not in its columns: with --labels")
    assert no_checkpoints(out)


@pytest.mark.parametrize("side", ["features", "labels"])
def test_parquet_float_ids_are_refused_before_the_run(tmp_path, capsys, side):
    """1.0 against 1: a float has no one text, and the join compares ids as text."""
    ids = {"features": list(range(N)), "labels": list(range(N))}
    ids[side] = [float(i) for i in range(N)]
    features, labels = tmp_path / "features.parquet", tmp_path / "labels.parquet"
    pq.write_table(pa.table({"id": ids["features"], "key": [f"k{i % 2}" for i in range(N)],
                             "a": [float(i % 5) for i in range(N)]}), features)
    pq.write_table(pa.table({"id": ids["labels"], "key": [f"k{i % 2}" for i in range(N)],
                             "label": [label_of(i) for i in range(N)]}), labels)
    code, out = run_train(tmp_path, "--input", features, "--labels", labels, *KEYED)
    assert code == 2
    path = features if side == "features" else labels
    assert error_line(capsys) == (
        f"unitless: error: {path}: column 'id' (--id-column) holds floating-point numbers "
        "(double): --labels compares ids and model keys as text, and a float's text is not one "
        "(1 or 1.0): write them as integers or text")
    assert no_checkpoints(out)


def test_a_header_only_labels_file_learns_nothing_and_fails(tmp_path, capsys):
    """Every example served, none learned: serving is no success for a training run."""
    features = write_csv(tmp_path / "features.csv", "id,key,a,t", features_rows())
    labels = write_csv(tmp_path / "labels.csv", "id,key,label", [])
    code, _ = run_train(tmp_path, "--input", features, "--labels", labels, *KEYED)
    assert code == 2
    assert error_line(capsys) == (
        f"unitless: error: no example was learned from a label: of {N} records read, {N} "
        f"served without a label, {N} of them expired waiting for their label")


@pytest.mark.parametrize("runner", RUNNERS)
def test_only_the_expired_label_learned_is_no_success(tmp_path, capsys, runner):
    """(Counted by the runner's metrics: on Prism too.)"""
    features = write_csv(tmp_path / "features.csv", "id,key,a,t", features_rows())
    labels = write_csv(tmp_path / "labels.csv", "id,key,label", [])
    code, _ = run_train(tmp_path, "--input", features, "--labels", labels, *KEYED,
                        "--expired-label", "-1", *runner_args(runner))
    assert code == 2
    assert error_line(capsys) == (
        f"unitless: error: no example was learned from a label: of {N} records read, {N} "
        f"served without a label, {N} of them expired waiting for their label, {N} of them "
        "learned with --expired-label only")


def test_served_examples_and_as_many_labels_refused_fail_naming_the_reason(tmp_path, capsys):
    """JSON labels records without their model key: each is refused as such (it went to the
    model of no key, where no example waits, and was refused as 'features never came'). N
    served and N refused was within --max-dead-fraction; it learned nothing."""
    features = tmp_path / "features.jsonl"
    features.write_text("".join(json.dumps({"id": f"e{i}", "key": f"k{i % 2}", "a": i % 5})
                                + "\n" for i in range(N)))
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": f"e{i}", "label": label_of(i)}) + "\n"
                              for i in range(N)))
    code, _ = run_train(tmp_path, "--input", features, "--labels", labels, *KEYED)
    assert code == 2
    line = error_line(capsys)
    assert line.startswith(
        f"unitless: error: no example was learned from a label: of {2 * N} records read, {N} "
        f"served without a label, {N} of them expired waiting for their label, {N} records "
        f"refused; commonest reason: {label_join.NO_KEY} ({N} records), e.g. {labels} "
        "at "), line


def test_a_plain_run_that_only_serves_fails(tmp_path, capsys):
    data = write_csv(tmp_path / "d.csv", "id,key,label,a",
                     [(f"e{i}", f"k{i % 2}", "", i % 5) for i in range(N)])
    code, _ = run_train(tmp_path, "--input", data, *KEYED)
    assert code == 2
    assert error_line(capsys) == (
        f"unitless: error: no example was learned from a label: of {N} records read, {N} "
        "served without a label")


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_join_that_learns_says_how_many_expired(tmp_path, capsys, runner):
    """The control: labels for all but 10 examples; the summary counts the 10 expired."""
    features = write_csv(tmp_path / "features.csv", "id,key,a,t", features_rows())
    labels = write_csv(tmp_path / "labels.csv", "id,key,label",
                       [(f"e{i}", f"k{i % 2}", label_of(i)) for i in range(10, N)])
    code, _ = run_train(tmp_path, "--input", features, "--labels", labels, *KEYED,
                        *runner_args(runner))
    assert code == 0
    summary = capsys.readouterr().out
    assert (f"this run: {N - 10} examples learned, {N} served (no label)" in summary
            and "0 records refused, 10 expired without their label\n" in summary), summary


def test_an_empty_id_is_null_whichever_path_reads_it():
    """A CSV chunk goes through Arrow unless a record in it is bad, then line by line; JSON
    lines alike; VW bytes through the compiled reader, text line by line."""
    spec = RecordSpec(id="id", model_key="key", columns=["id", "key", "label", "a"])
    good = [(1, b"e1,k,1,2"), (2, b",k,1,3"), (3, b"  ,k,-1,3"), (4, b"e4,,1,1")]
    for items, refused in ((good, 0), (good + [(5, b"e5,k,1,not-a-number")], 1)):
        block, dead = parse_csv(spec, "s", items)
        assert (block.ids.to_pylist(), len(dead)) == (["e1", None, None, "e4"], refused)
    spec = RecordSpec(id="id")
    lines = [(1, b'{"id": "", "label": 1}'), (2, b'{"id": "x", "label": 1}')]
    for items in (lines, lines + [(3, b'{"id": "y", "label": 1, "deep": {"a": {}}}')]):
        assert parse_jsonl(spec, "s", items)[0].ids.to_pylist()[:2] == [None, "x"]
    lines = [(1, b"1 ' |a x:1"), (2, b"1 'tag |a x:1"), (3, b"-1 |a x:2")]
    for items in (lines, [(p, line.decode()) for p, line in lines]):
        assert parse_vw(RecordSpec(), "s", items)[0].ids.to_pylist() == [None, "tag", None]


def test_an_unrelated_bad_row_does_not_change_what_joins(tmp_path):
    """A features record without an id is served, and a label without one is a dead letter,
    with or without a bad record in the features' chunk (which sends it line by line)."""
    rows = [(f"e{i}", f"k{i % 2}", i % 5) for i in range(N)]
    rows[3] = ("", "k1", 1)
    labels = write_csv(tmp_path / "labels.csv", "id,key,label",
                       [(r[0], r[1], label_of(i)) for i, r in enumerate(rows)])
    runs = {}
    for bad in (False, True):
        features = write_csv(tmp_path / f"features-{bad}.csv", "id,key,a",
                             rows + [("e-bad", "k0", "not-a-number")] * bad)
        code, out = run_train(tmp_path, "--input", features, "--labels", labels, *KEYED,
                              out=f"out-{bad}")
        assert code == 0
        learned = [r for r in read_output(str(out / "pred")).to_pylist() if not r["served"]]
        runs[bad] = (sorted(r["id"] for r in learned),
                     sorted(d["reason"] for d in dead_letters(out)))
    assert runs[False][0] == sorted(r[0] for r in rows if r[0])
    assert runs[False][1] == [label_join.NO_ID]
    assert runs[True][0] == runs[False][0]
    assert runs[True][1] == sorted([label_join.NO_ID, "feature 'a' 'not-a-number' is not a "
                                                      "number"])


def test_json_ids_are_the_text_json_writes_whichever_path_reads_them():
    """true is "true" (not Python's "True"), 3.0 stays "3.0", not 3; the model key alike."""
    spec = RecordSpec(id="id", model_key="key")
    records = [{"id": True, "key": False, "label": 1}, {"id": 3, "key": 3, "label": 1},
               {"id": 3.0, "key": 2.5, "label": 1}, {"id": "3", "key": "a", "label": 1}]
    block, dead = parse_jsonl(spec, "s", [(p, json.dumps(r).encode())
                                          for p, r in enumerate(records)])
    assert dead == []
    assert block.ids.to_pylist() == ["true", "3", "3.0", "3"]
    assert block.keys.to_pylist() == ["false", "3", "2.5", "a"]
    # integers and text alone: Arrow's path, which gives the same text
    fast = [(p, json.dumps(r).encode()) for p, r in enumerate(records[1:2] + records[3:])]
    assert parse_jsonl(spec, "s", fast)[0].ids.to_pylist() == ["3", "3"]


def test_json_labels_join_their_examples_by_the_ids_text(tmp_path):
    """Features ids true, 3, "x"; labels ids true, 3.0, "x": true and "x" join, 3.0 is not 3."""
    features = tmp_path / "features.jsonl"
    features.write_text("".join(json.dumps({"id": i, "a": a}) + "\n"
                                for i, a in ((True, 1), (3, 2), ("x", 3))))
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": i, "label": 1}) + "\n"
                              for i in (True, 3.0, "x")))
    code, out = run_train(tmp_path, "--input", features, "--labels", labels, "--id-column", "id")
    assert code == 0
    learned = [r["id"] for r in read_output(str(out / "pred")).to_pylist() if not r["served"]]
    assert sorted(learned) == ["true", "x"]
    dead = dead_letters(out)
    assert [(d["reason"], json.loads(d["raw"])["id"]) for d in dead] == [
        (label_join.NEVER_SERVED, "3.0")]


def test_a_resumed_run_that_reads_again_what_it_learned_is_a_success(tmp_path, capsys):
    """It learns nothing new and serves the records without a label appended since: nothing
    was lost (a run that did not resume and only served fails: above)."""
    rows = [(f"e{i}", f"k{i % 2}", label_of(i), i % 5) for i in range(N)]
    data = write_csv(tmp_path / "d.csv", "id,key,label,a", rows)
    assert run_train(tmp_path, "--input", data, *KEYED)[0] == 0
    write_csv(data, "id,key,label,a", rows + [(f"u{i}", "k0", "", 1) for i in range(5)])
    capsys.readouterr()
    assert run_train(tmp_path, "--input", data, *KEYED, "--resume")[0] == 0
    summary = capsys.readouterr().out
    assert "this run: 0 examples learned, 5 served (no label)" in summary, summary
    assert f"{N} skipped (learned before --resume)" in summary, summary
