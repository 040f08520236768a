"""A user's own data in its raw form: headerless CSV, ', ' separators, columns to drop, any
extension, several inputs from an unquoted glob, and options that are nobody's."""
import gzip
import json
import os

import numpy as np
import pytest

from unitless.connectors.files import read_file, read_output
from unitless.parse.csv import csv_table, parse_csv
from unitless.parse.spec import RecordSpec
from unitless.store.catalog import latest_checkpoint, read_checkpoint

from tests.helpers.commands import dead_letters, run_train

WORK = ["State-gov", "Self-emp-not-inc", "Private", "Federal-gov"]
EDUCATION = ["Bachelors", "HS-grad", "11th", "Masters"]
ADULT_COLUMNS = "age,workclass,fnlwgt,education,hours,label"


def adult_rows(n=120, seed=0):
    """Rows like UCI adult.data: `39, State-gov, 77516, Bachelors, 40, 1`."""
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(17, 90)), WORK[i % 4], int(rng.integers(10000, 500000)),
             EDUCATION[(i * 3) % 4], int(rng.integers(1, 99)), 1 if rng.random() < 0.3 else -1)
            for i in range(n)]


def write_adult(path, rows, delimiter=", ", bom=False):
    text = "".join(delimiter.join(map(str, row)) + "\n" for row in rows)
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def feature_names(out, key=""):
    model = read_checkpoint(latest_checkpoint(str(out / "models"), key))
    return set(model.column("name").to_pylist())


def test_headerless_comma_space_file_with_categories_and_a_dropped_column(tmp_path):
    rows = adult_rows()
    path = tmp_path / "adult.data"
    write_adult(path, rows)
    code, out = run_train(tmp_path, "--input", str(path), "--format", "csv", "--no-header",
                    "--columns", ADULT_COLUMNS, "--delimiter", ", ",
                    "--categorical-columns", "workclass,education", "--ignore-columns", "fnlwgt",
                    "--chunk-size", "32")
    assert code == 0
    predictions = read_output(str(out / "pred"))
    assert predictions.num_rows == len(rows)
    assert sorted(predictions.column("position").to_pylist()) == list(range(1, len(rows) + 1))
    assert dead_letters(out) == []
    names = feature_names(out)
    assert names == {"constant", "age", "hours", *(f"workclass={w}" for w in WORK),
                     *(f"education={e}" for e in EDUCATION)}
    assert not any(n.startswith(" ") or "= " in n for n in names)
    assert "fnlwgt" not in names and "label" not in names


def test_headerless_columns_are_numbered_and_the_first_line_is_data(tmp_path):
    rows = [(y, a, h) for a, _, _, _, h, y in adult_rows(50)]
    path = tmp_path / "numbers.txt"
    write_adult(path, rows)
    code, out = run_train(tmp_path, "--input", str(path), "--format", "csv", "--no-header",
                    "--label-column", "0", "--delimiter", ", ")
    assert code == 0
    predictions = read_output(str(out / "pred"))
    assert predictions.num_rows == len(rows)
    assert sorted(predictions.column("label").to_pylist()) == sorted(float(r[0]) for r in rows)
    assert feature_names(out) == {"constant", "1", "2"}


def test_comma_space_fast_path_equals_the_per_line_path(tmp_path):
    """A numeric ', ' file goes through Arrow; with a comma inside a value it cannot, and both
    give the same examples as the same file separated by ','."""
    rows = [(a, f"k{a % 3}", h, y) for a, _, _, _, h, y in adult_rows(40)]
    spec = RecordSpec(id="id", columns=["age", "id", "hours", "label"], delimiter=", ")
    data = "".join(", ".join(map(str, r)) + "\n" for r in rows).encode()
    assert csv_table(spec, data) is not None  # the fast path takes ', '
    assert csv_table(spec, data.replace(b"k0", b"k,0", 1)) is None
    items = list(enumerate(data.splitlines(), 1))
    fast, dead = parse_csv(spec, "f", items)
    slow, _ = parse_csv(spec, "f", [(1, b"  " + items[0][1] + b" ")] + items[1:])  # per line
    plain, _ = parse_csv(RecordSpec(id="id", columns=spec.columns),
                         "f", [(p, line.replace(b", ", b",")) for p, line in items])
    assert dead == []
    for block in (fast, slow):
        np.testing.assert_array_equal(block.labels, plain.labels)
        np.testing.assert_array_equal(block.values, plain.values)
        np.testing.assert_array_equal(block.indices, plain.indices)
        assert block.ids.to_pylist() == plain.ids.to_pylist() == [f"k{r[0] % 3}" for r in rows]


def test_values_are_stripped_with_a_one_character_delimiter(tmp_path):
    path = tmp_path / "spaced.csv"
    path.write_text("label , colour,  size\n1, red , 2\n-1,  blue,3 \n1,red,  4\n")
    code, out = run_train(tmp_path, "--input", str(path), "--categorical-columns", "colour")
    assert code == 0
    assert read_output(str(out / "pred")).num_rows == 3
    assert feature_names(out) == {"constant", "colour=red", "colour=blue", "size"}


def test_unquoted_glob_gives_every_file(tmp_path):
    paths = []
    for k in range(3):
        path = tmp_path / f"part{k}.csv"
        path.write_text("label,x\n" + "".join(f"{1 if i % 2 else -1},{i + k}\n"
                                               for i in range(10)))
        paths.append(str(path))
    # the shell expanded `--input dir/*.csv`; Beam options still pass through after them
    code, out = run_train(tmp_path, "--input", *paths, "--direct_num_workers", "1")
    assert code == 0
    predictions = read_output(str(out / "pred"))
    assert predictions.num_rows == 30
    assert set(predictions.column("source").to_pylist()) == {os.path.realpath(p) for p in paths}
    # and --input stays repeatable
    code, out = run_train(tmp_path, "--input", *paths[:2], "--input", paths[2], out="again")
    assert code == 0
    assert read_output(str(out / "pred")).num_rows == 30


@pytest.mark.parametrize("extra,named", [
    (["--bogus-option", "3"], "--bogus-option"),
    (["--labelcolumn", "y"], "--labelcolumn"),
    (["stray.csv"], "stray.csv"),
    (["--runn", "PrismRunner"], "--runn"),
])
def test_an_unknown_option_or_argument_is_an_error(tmp_path, capsys, extra, named):
    path = tmp_path / "data.csv"
    path.write_text("label,x\n1,2\n")
    with pytest.raises(SystemExit) as exc:
        run_train(tmp_path, *extra[:1], "--input", str(path), *extra[1:])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err and err.startswith("unitless: error:")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("runner", [[], ["--runner", "FlinkRunner"]])
def test_flinks_own_checkpointing_is_refused_with_the_reason(tmp_path, capsys, runner):
    """Flink's checkpoints restore Beam state beside unitless's own (runners.REFUSED): refused
    in one line before anything runs, on every runner (the Flink job server declares it)."""
    path = tmp_path / "data.csv"
    path.write_text("label,x\n1,2\n")
    with pytest.raises(SystemExit) as exc:
        run_train(tmp_path, "--input", str(path), *runner, "--checkpointing_interval=1000")
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(
        "unitless: error: --checkpointing_interval: Flink's own checkpointing is not supported")
    assert not (tmp_path / "out").exists()


def test_beam_options_pass_through():
    from unitless.cli.main import parse_args
    beam = ["--runner", "PrismRunner", "--direct_num_workers", "2", "--streaming",
            "--prism_location", "/x/prism", "--experiments=a", "--save_main_session"]
    args, rest = parse_args(["train", "--input", "a.csv", "b.csv", *beam])
    assert args.input == [["a.csv", "b.csv"]] and rest == beam
    # a job server's runner: options Beam's SDK does not declare wait for the job server's
    # answer (runners.undeclared; tests/flink/test_flink_training.py)
    flink = ["--runner", "FlinkRunner", "--max_bundle_time_millis=50", "--max_bundle_size", "9"]
    assert parse_args(["train", *flink])[1] == flink


def test_any_extension_with_format_and_an_unknown_one_without(tmp_path, capsys):
    path = tmp_path / "adult.data"
    write_adult(path, [(y, a) for a, *_, y in adult_rows(20)], delimiter=",")
    code, out = run_train(tmp_path, "--input", str(path), "--no-header", "--label-column", "0")
    assert code == 2
    err = capsys.readouterr().err
    assert str(path) in err and "--format" in err
    code, out = run_train(tmp_path, "--input", str(path), "--no-header", "--label-column", "0",
                    "--format", "csv")
    assert code == 0
    assert read_output(str(out / "pred")).num_rows == 20


def test_a_bom_is_not_part_of_the_first_column_name(tmp_path):
    path = tmp_path / "bom.csv.gz"
    rows = [(y, a, h) for a, _, _, _, h, y in adult_rows(30)]
    text = "label,age,hours\n" + "".join(",".join(map(str, r)) + "\n" for r in rows)
    with gzip.open(path, "wb") as f:
        f.write(b"\xef\xbb\xbf" + text.encode())
    code, out = run_train(tmp_path, "--input", str(path))
    assert code == 0
    assert read_output(str(out / "pred")).num_rows == len(rows)
    assert feature_names(out) == {"constant", "age", "hours"}


def test_a_bom_before_a_headerless_file_is_skipped(tmp_path):
    path = tmp_path / "bom.csv"
    rows = [(y, a, h) for a, _, _, _, h, y in adult_rows(30)]
    write_adult(path, rows, bom=True)
    spec = RecordSpec(label="0", header=False, delimiter=", ")
    blocks = list(read_file(str(path), "csv", spec, chunk_size=8))
    assert sum(len(b.labels) for b, _ in blocks) == len(rows)
    assert all(not dead for _, dead in blocks)
    assert blocks[0][0].positions[0] == 1


def test_bad_rows_of_a_headerless_file_keep_their_bytes(tmp_path):
    rows = adult_rows(20)
    path = tmp_path / "adult.data"
    write_adult(path, rows)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3] = b"39, State-gov, 77516\n"  # too few fields
    lines[7] = b"40, Private, 1, HS-grad, abc, 1\n"  # not a number
    lines[9] = b"41, Priv\xffate, 1, HS-grad, 3, 1\n"  # not UTF-8
    path.write_bytes(b"".join(lines))
    code, out = run_train(tmp_path, "--input", str(path), "--format", "csv", "--no-header",
                    "--columns", ADULT_COLUMNS, "--delimiter", ", ",
                    "--categorical-columns", "workclass,education", "--ignore-columns", "fnlwgt")
    assert code == 0
    dead = {d["position"]: d for d in dead_letters(out)}
    assert set(dead) == {4, 8, 10}
    import base64
    for position, d in dead.items():
        assert base64.b64decode(d["raw_base64"]) == lines[position - 1].rstrip(b"\n")
    assert read_output(str(out / "pred")).num_rows == len(rows) - 3


def test_ignore_columns_must_name_columns_and_not_the_label(tmp_path, capsys):
    path = tmp_path / "data.csv"
    path.write_text("label,x,y\n1,2,3\n")
    code, _ = run_train(tmp_path, "--input", str(path), "--ignore-columns", "z")
    assert code == 2 and "--ignore-columns z" in capsys.readouterr().err
    code, _ = run_train(tmp_path, "--input", str(path), "--ignore-columns", "label")
    assert code == 2 and "label" in capsys.readouterr().err


def test_jsonl_ignore_columns(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"label": 1 if i % 2 else -1, "x": i, "junk": "a"}) + "\n"
                            for i in range(10)))
    code, out = run_train(tmp_path, "--input", str(path), "--ignore-columns", "junk")
    assert code == 0
    assert feature_names(out) == {"constant", "x"}


def test_a_bad_value_of_a_beam_option_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        run_train(tmp_path, "--input", "a.csv", "--direct_num_workers", "abc")
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--direct_num_workers" in err


def test_columns_rename_a_header(tmp_path, capsys):
    path = tmp_path / "data.csv"
    path.write_text("y,a,b\n1,2,3\n-1,4,5\n")
    code, out = run_train(tmp_path, "--input", str(path), "--columns", "label,x,z")
    assert code == 0
    assert feature_names(out) == {"constant", "x", "z"}
    capsys.readouterr()
    code, _ = run_train(tmp_path, "--input", str(path), "--columns", "label,x", out="two")
    assert code == 2 and "--columns names 2 columns" in capsys.readouterr().err
