"""Labels as public data sets write them: names of classes, `yes`/`no`, `1`/`2`, `>50K`
(--classes NAMES, --positive-label VALUE), in every format, for training and scoring."""
import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.parse.csv import parse_csv
from unitless.parse.jsonl import parse_jsonl
from unitless.parse.spec import LabelMap, RecordSpec
from unitless.models.keyed_model import KeyedModel
from unitless.store.catalog import load_latest

from tests.helpers.commands import dead_letters, run_train

IRIS = ["setosa", "versicolor", "virginica"]


def n_classes(out, key=""):
    state = KeyedModel.from_table(load_latest(str(out / "models"), key)[1]).state
    assert np.isfinite(state.cumulative_loss / max(state.examples_seen, 1))
    return state.n_classes


def sorted_predictions(out):
    table = read_output(str(out / "pred"))
    return table.sort_by("position")


def iris_rows(n=300, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        k = i % 3
        rows.append((round(float(rng.normal(k * 2, 0.5)), 3),
                     round(float(rng.normal(-k, 0.5)), 3), IRIS[k]))
    return rows


def write_table_csv(path, rows, header="a,b,species"):
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_named_classes_map_to_one_based_classes(tmp_path, fmt):
    rows = iris_rows()
    if fmt == "csv":
        path = tmp_path / "iris.csv"
        write_table_csv(path, rows)
    elif fmt == "jsonl":
        path = tmp_path / "iris.jsonl"
        path.write_text("".join(json.dumps({"a": a, "b": b, "species": s}) + "\n"
                                for a, b, s in rows))
    else:
        path = tmp_path / "iris.parquet"
        pq.write_table(pa.table({"a": [r[0] for r in rows], "b": [r[1] for r in rows],
                                 "species": [r[2] for r in rows]}), path)
    code, out = run_train(tmp_path, "--input", str(path), "--label-column", "species",
                    "--classes", ",".join(IRIS), "--chunk-size", "64")
    assert code == 0
    assert n_classes(out) == 3
    table = sorted_predictions(out)
    assert table.column("label").to_pylist() == [float(IRIS.index(r[2]) + 1) for r in rows]
    assert dead_letters(out) == []
    assert np.isfinite(table.column("loss").to_numpy()).all()


def test_a_label_outside_the_named_classes_is_a_dead_letter(tmp_path):
    rows = iris_rows(60) + [(1.0, 2.0, "daisy")] + iris_rows(30, seed=1)
    path = tmp_path / "iris.csv"
    write_table_csv(path, rows)
    jpath = tmp_path / "iris.jsonl"
    jpath.write_text("".join(json.dumps({"a": a, "b": b, "species": s}) + "\n"
                             for a, b, s in rows))
    reason = "label 'daisy' is not one of the classes setosa, versicolor, virginica"
    for path, name in ((path, "csv"), (jpath, "json")):
        code, out = run_train(tmp_path, "--input", str(path), "--label-column", "species",
                        "--classes", ",".join(IRIS), out=name)
        assert code == 0
        dead = dead_letters(out)
        assert [d["reason"] for d in dead] == [reason]
        assert sorted_predictions(out).num_rows == len(rows) - 1


def test_positive_label_with_labels_1_and_2(tmp_path):
    rng = np.random.default_rng(3)
    lines = []
    for i in range(400):
        y = 1 + (i % 2)
        lines.append(f"{y} 1:{rng.normal(y * 2 - 3, 0.3):.3f} 2:{rng.normal(0, 1):.3f}")
    path = tmp_path / "data.libsvm"
    path.write_text("\n".join(lines) + "\n")
    code, out = run_train(tmp_path, "--input", str(path), "--positive-label", "2")
    assert code == 0
    labels = sorted_predictions(out).column("label").to_numpy()
    assert (labels == 1).sum() == 200 and (labels == -1).sum() == 200
    assert dead_letters(out) == []


def test_positive_label_in_csv_fast_and_per_line_paths_and_vw(tmp_path):
    rows = [(i % 7, ">50K" if i % 3 == 0 else "<=50K") for i in range(90)]
    path = tmp_path / "adult.csv"
    path.write_text("x,income\n" + "".join(f"{x}, {y}\n" for x, y in rows))
    quoted = tmp_path / "adult_quoted.csv"  # quotes and a blank line: the per-line path
    quoted.write_text('x,income\n' + "".join(f'{x},"{y}"\n' for x, y in rows[:45]) + "\n"
                      + "".join(f'{x},"{y}"\n' for x, y in rows[45:]))
    vw = tmp_path / "adult.vw"
    vw.write_text("".join(f"{y} |f x:{x}\n" for x, y in rows))
    want = [1.0 if y == ">50K" else -1.0 for _, y in rows]
    for p, name in ((path, "fast"), (quoted, "lines"), (vw, "vw")):
        code, out = run_train(tmp_path, "--input", str(p), "--label-column", "income",
                        "--positive-label", ">50K", out=name)
        assert code == 0
        assert sorted_predictions(out).column("label").to_pylist() == want
        assert dead_letters(out) == []


def test_true_false_labels_without_a_mapping(tmp_path):
    path = tmp_path / "tf.csv"
    path.write_text("x,label\n" + "".join(f"{i % 5},{'true' if i % 2 else 'false'}\n"
                                          for i in range(40)))
    code, out = run_train(tmp_path, "--input", str(path))
    assert code == 0
    assert sorted_predictions(out).column("label").to_pylist() == [1.0 if i % 2 else -1.0
                                                            for i in range(40)]


def test_missing_labels_stay_missing_with_a_mapping(tmp_path):
    """A record without a label is served, not mapped to the negative class."""
    path = tmp_path / "m.csv"
    path.write_text("x,y\n1,yes\n2,\n3,no\n")
    code, out = run_train(tmp_path, "--input", str(path), "--label-column", "y",
                    "--positive-label", "yes")
    assert code == 0 and dead_letters(out) == []
    rows = read_output(str(out / "pred")).to_pylist()
    assert [(r["label"], r["served"]) for r in sorted(rows, key=lambda r: r["position"])] == [
        (1.0, False), (None, True), (-1.0, False)]


def test_label_map_alike_on_both_paths():
    spec = RecordSpec(label="y", columns=["x", "y"], labels=LabelMap(classes=("A", "B", "C")))
    items = [(i, f"{i},{'ABC'[i % 3]}".encode()) for i in range(1, 10)]
    block, dead = parse_csv(spec, "s", items)
    assert dead == [] and block.labels.tolist() == [float(i % 3 + 1) for i in range(1, 10)]
    json_items = [(i, json.dumps({"x": i, "y": "ABC"[i % 3]}).encode()) for i in range(1, 10)]
    jblock, jdead = parse_jsonl(spec, "s", json_items)
    assert jdead == [] and jblock.labels.tolist() == block.labels.tolist()
    assert LabelMap(positive="2").value(2.0) == 1.0
    assert LabelMap(positive="2").value(" 1 ") == -1.0
    assert LabelMap(positive="yes").value(True) == -1.0


def test_score_maps_named_labels_alike(tmp_path):
    rows = iris_rows(150)
    path = tmp_path / "iris.csv"
    write_table_csv(path, rows)
    code, out = run_train(tmp_path, "--input", str(path), "--label-column", "species",
                    "--classes", ",".join(IRIS))
    assert code == 0
    unlabeled = tmp_path / "new.csv"
    unlabeled.write_text("a,b\n1.0,2.0\n")
    for p, name in ((path, "scores"), (unlabeled, "scores2")):
        code = main(["score", "--input", str(p), "--model-dir", str(out / "models"),
                     "--label-column", "species", "--classes", ",".join(IRIS),
                     "--predictions", str(tmp_path / name), "--dead-letter",
                     str(tmp_path / (name + "_dead"))])
        assert code == 0
    scores = read_output(str(tmp_path / "scores")).sort_by("position")
    assert scores.column("label").to_pylist() == [float(IRIS.index(r[2]) + 1) for r in rows]
    assert read_output(str(tmp_path / "scores2")).num_rows == 1


def test_bad_classes_and_positive_label_settings(tmp_path, capsys):
    path = tmp_path / "iris.csv"
    write_table_csv(path, iris_rows(10))
    assert run_train(tmp_path, "--input", str(path), "--label-column", "species",
               "--classes", "a,a")[0] == 2
    assert run_train(tmp_path, "--input", str(path), "--label-column", "species",
               "--classes", "3", "--positive-label", "setosa")[0] == 2
    assert "--positive-label" in capsys.readouterr().err


def head(source, dest, n, gz=False):
    opener = gzip.open if gz else open
    with opener(source, "rt") as f:
        dest.write_text("".join(line for _, line in zip(range(n), f)))
    return dest


def test_real_letter_named_classes(tmp_path, shared_data):
    path = head(f"{shared_data}/letter/letter-recognition.data", tmp_path / "letter.data", 2000)
    letters = ",".join(chr(ord("A") + i) for i in range(26))
    code, out = run_train(tmp_path, "--input", str(path), "--format", "csv", "--no-header",
                    "--label-column", "0", "--classes", letters)
    assert code == 0
    assert n_classes(out) == 26
    labels = sorted_predictions(out).column("label").to_numpy()
    first = path.read_text().splitlines()
    assert labels.tolist() == [float(ord(line[0]) - ord("A") + 1) for line in first]
    assert dead_letters(out) == []


def test_real_bank_marketing_yes_no(tmp_path, shared_data):
    path = head(f"{shared_data}/bank_marketing/bank-additional.csv", tmp_path / "bank.csv", 2001)
    cats = ("job,marital,education,default,housing,loan,contact,month,day_of_week,poutcome")
    code, out = run_train(tmp_path, "--input", str(path), "--delimiter", ";", "--label-column", "y",
                    "--positive-label", "yes", "--categorical-columns", cats)
    assert code == 0
    labels = sorted_predictions(out).column("label").to_numpy()
    assert len(labels) == 2000 and (labels == 1).sum() > 0 and (labels == -1).sum() > 0
    assert set(labels.tolist()) == {1.0, -1.0}
    assert dead_letters(out) == []


def test_real_shuttle_positive_label(tmp_path, shared_data):
    path = head(f"{shared_data}/shuttle/shuttle.trn", tmp_path / "shuttle.txt", 2000)
    code, out = run_train(tmp_path, "--input", str(path), "--format", "csv", "--no-header",
                    "--delimiter", " ", "--label-column", "9", "--positive-label", "1")
    assert code == 0
    want = [1.0 if line.split()[-1] == "1" else -1.0 for line in path.read_text().splitlines()]
    assert sorted_predictions(out).column("label").to_pylist() == want
    assert {1.0, -1.0} == set(want)
