"""Hostile headers: a CSV header or Parquet schema that names a column twice or gives one no
name, and options that give one column two roles, end in one line (exit 2) before any example
is learned; any other header is learned, each record learned or refused. Fuzzed as the
records are (tests/unit/test_hostile_records.py)."""
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from unitless.connectors.files import read_output

from tests.helpers.commands import train

ROLES = {"--id-column": "id", "--model-key-column": "key", "--weight-column": "w"}



def one_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("unitless: error: "), err
    return err[0]


@pytest.mark.parametrize("fmt, header", [("csv", "header"), ("parquet", "schema")])
@pytest.mark.parametrize("names, says", [
    ("id,id,label,x", "names column 'id' twice (columns 1 and 2)"),
    ("id,x,x,label", "names column 'x' twice (columns 2 and 3)"),
    ("id,,label,x", "gives column 2 no name"),
    (",x,label", "gives column 1 no name"),  # (pandas' to_csv writes its index so)
    ("label,x,label", "names column 'label' twice (columns 1 and 3)"),
])
def test_a_header_naming_a_column_twice_or_not_at_all_is_one_line(tmp_path, capsys, fmt,
                                                                  header, names, says):
    path = tmp_path / f"data.{fmt}"
    names = names.split(",")
    if fmt == "csv":
        path.write_text(",".join(names) + "\n" + ",".join(["1"] * len(names)) + "\n")
    else:
        pq.write_table(pa.table([pa.array([1.0])] * len(names), names=names), path)
    train(tmp_path / "out", "--input", path, "--id-column", "id", expect=2)
    assert f"{path}: the {header} {says}" in one_line(capsys)


def test_one_column_in_two_roles_is_one_line(tmp_path, capsys):
    path = tmp_path / "data.csv"
    path.write_text("id,label,x\na,1,2\n")
    train(tmp_path / "out", "--input", path, "--id-column", "label", expect=2)
    assert "--label-column and --id-column both name column 'label'" in one_line(capsys)
    train(tmp_path / "out", "--input", path, "--id-column", "id", "--model-key-column", "id",
          expect=2)
    assert "--id-column and --model-key-column both name column 'id'" in one_line(capsys)
    train(tmp_path / "out", "--input", path, "--columns", "id,label,id", expect=2)
    assert "--columns names column 'id' twice" in one_line(capsys)


def fuzz_case(rng):
    """(header names, options, whether the options give a column two roles) of a random header
    over a few names, some empty or given twice, some options naming the label or each
    other."""
    names = rng.sample(["label", "id", "key", "w", "x", "y", "z"], rng.randint(2, 6))
    if rng.random() < 0.25:
        names.insert(rng.randrange(len(names) + 1), rng.choice(["", " "]))
    if rng.random() < 0.25:  # (a name given twice, maybe with spaces around it)
        names.insert(rng.randrange(len(names) + 1), rng.choice(["", " "]) + rng.choice(names))
    options, used = [], {"label"}
    for flag, column in ROLES.items():
        if rng.random() < 0.5:
            column = column if rng.random() < 0.7 else rng.choice(["label", *ROLES.values()])
            options += [flag, column]
            used.add(column)
    return names, options, len(used) < len(options) // 2 + 1


def value(name, row):
    """A row's value of a column: text for the id and model key, 1 for the weight, else -1..1."""
    if name.strip() in ("id", "key"):
        return "ab"[row % 2]
    return 1.0 if name.strip() == "w" else float(row % 3 - 1)


def rows_in(directory):
    found = read_output(str(directory)) if directory.exists() else None
    return 0 if found is None else found.num_rows


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_fuzz_headers_and_roles(tmp_path, capsys, fmt):
    """Random headers and role options: a bad one is one line (exit 2); any other run ends
    with every record learned or refused, or in one line (a missing label column, ...)."""
    rng = random.Random(11 if fmt == "csv" else 12)
    refused_runs = learned_runs = 0
    for case in range(20):
        names, options, two_roles = fuzz_case(rng)
        # (a CSV header's names are stripped of spaces around them, a Parquet schema's not)
        found = [n.strip() for n in names] if fmt == "csv" else names
        bad = two_roles or len(set(found)) < len(found) or not all(n.strip() for n in names)
        case_dir = tmp_path / str(case)
        case_dir.mkdir()
        columns = [[value(n, r) for r in range(6)] for n in names]
        if fmt == "csv":
            path = case_dir / "data.csv"
            path.write_text(",".join(names) + "\n" + "".join(
                ",".join(str(c[r]) for c in columns) + "\n" for r in range(6)))
        else:
            path = case_dir / "data.parquet"
            pq.write_table(pa.table(list(map(pa.array, columns)), names=names), path)
        code = train(case_dir / "out", "--input", path, *options, expect=None)
        if bad:
            assert code == 2, (names, options)
            one_line(capsys)
            assert rows_in(case_dir / "out" / "pred") == 0
            refused_runs += 1
        elif code == 0:
            learned = rows_in(case_dir / "out" / "pred")
            refused = rows_in(case_dir / "out" / "dead")
            assert learned + refused == 6, (names, options)
            capsys.readouterr()
            learned_runs += 1
        else:
            assert code == 2, (names, options)
            one_line(capsys)
    assert refused_runs >= 5 and learned_runs >= 3  # (both were met)
