"""What `unitless train` tells its user: a table per model key whose progressive loss and error
rate are those of the predictions it wrote, and a failure (one line, exit 2) when it learned
nothing or refused too much, naming the commonest reason and a record that had it."""
import subprocess
import sys

import pytest

from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.learner import read_metadata
from unitless.store.catalog import read_checkpoint

from tests.helpers.commands import train

KEYED = ("--id-column", "id", "--model-key-column", "segment")


def write_rows(path, rows):
    path.write_text("id,segment,label,x,z\n" + "".join(r + "\n" for r in rows))
    return path


def csv_lines(n, start=0):
    return [f"e{i},{'ab'[i % 2]},{1 if (i * 7) % 5 < 3 else -1},{i % 11 - 5},{(i % 3) * 1e4}"
            for i in range(start, start + n)]



def test_the_table_shows_each_models_progressive_loss_and_error_rate(tmp_path, capsys):
    train(tmp_path, "--input", write_rows(tmp_path / "d.csv", csv_lines(900)), *KEYED)
    out = capsys.readouterr().out.splitlines()
    predictions = read_output(str(tmp_path / "pred")).to_pylist()
    for key in "ab":
        rows = [p for p in predictions if p["model_key"] == key]
        line = next(line for line in out if line.startswith(repr(key)))
        _, examples, loss, error, checkpoint = line.split()
        assert int(examples.replace(",", "")) == len(rows) == 450
        assert float(loss) == pytest.approx(sum(p["loss"] for p in rows) / len(rows), abs=1e-6)
        assert float(error) == pytest.approx(sum(p["error"] for p in rows) / len(rows),
                                             abs=1e-4)
        assert read_metadata(read_checkpoint(checkpoint))["examples_seen"] == 450
    assert any(line.startswith("this run: 900 examples learned") and "0 records refused" in line
               for line in out)
    # `unitless inspect` on the model directory shows the same lines
    assert main(["inspect", str(tmp_path / "models")]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert [line for line in shown if line.startswith("'")] == [
        line for line in out if line.startswith("'")]


def test_inspect_of_a_part_file_lists_the_models_it_holds(tmp_path, capsys):
    """A part named without its '#N' (as a listing of the directory shows it): a line per
    model it holds, each named by its locator, as the directory's lines are; reading it as one
    checkpoint says to name one."""
    train(tmp_path, "--input", write_rows(tmp_path / "d.csv", csv_lines(60)), *KEYED,
          "--model-groups", "1")
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "models")]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("'")]
    part = {line.split()[-1].rpartition("#")[0] for line in listed}
    assert len(listed) == 2 and len(part) == 1
    part = part.pop()
    assert main(["inspect", part]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert [line for line in shown if line.startswith("'")] == listed
    assert shown[-1].startswith("all 2 models")
    with pytest.raises(ValueError) as refused:
        read_checkpoint(part)
    assert str(refused.value) == (
        f"{part} is a part holding the checkpoints of 2 models: name one by its number, "
        f"{part}#N (#0 'a' (30 examples), #1 'b' (30 examples)), or inspect the model "
        "directory")


def test_a_file_whose_every_record_is_refused_fails_naming_the_reason(tmp_path, capsys):
    rows = [r.replace(",1,", ",2,").replace(",-1,", ",2,") for r in csv_lines(50)]
    train(tmp_path, "--input", write_rows(tmp_path / "d.csv", rows), *KEYED, expect=2)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("unitless: error: no example was learned: all 50 records were "
                          "refused; commonest reason: label 2.0 is not a logistic label")
    assert "(50 records), e.g. " in err and f"{tmp_path / 'd.csv'} at 2: 'e0,a,2," in err


def test_more_refused_than_the_allowed_fraction_fails_unless_allowed(tmp_path, capsys):
    rows = csv_lines(40) + [f"x{i},a,1,not-a-number,1" for i in range(60)]
    path = write_rows(tmp_path / "d.csv", rows)
    train(tmp_path, "--input", path, *KEYED, expect=2)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "60 of 100 records were refused (60%, more than --max-dead-fraction 0.5)" in err
    assert "commonest reason: feature 'x' 'not-a-number' is not a number (60 records)" in err
    train(tmp_path / "again", "--input", path, *KEYED, "--max-dead-fraction", "0.7")


def test_beams_own_warnings_are_not_shown_to_the_commands_user(tmp_path):
    path = write_rows(tmp_path / "d.csv", csv_lines(20))
    done = subprocess.run([sys.executable, "-m", "unitless.cli", "train", "--input", str(path),
                           "--model-dir", str(tmp_path / "m"), "--predictions",
                           str(tmp_path / "p"), "--dead-letter", str(tmp_path / "dl"),
                           "--model-key-column", "segment", "--id-column", "id"],
                          capture_output=True, text=True, check=True)
    assert "apitools" not in done.stderr and "WARNING" not in done.stderr, done.stderr
    assert "this run: 20 examples learned" in done.stdout


def test_numpys_warnings_do_not_reach_the_user(tmp_path):
    """Scoring examples without a label (their loss is null, and is no longer computed from a
    NaN label: numpy warned 'invalid value encountered in logaddexp' for each such block)."""
    path = write_rows(tmp_path / "d.csv", csv_lines(40))
    unlabeled = write_rows(tmp_path / "u.csv", [line.replace(",1,", ",,").replace(",-1,", ",,")
                                                for line in csv_lines(10, start=40)])
    command = [sys.executable, "-m", "unitless.cli"]
    outputs = ["--predictions", str(tmp_path / "p"), "--dead-letter", str(tmp_path / "dl")]
    subprocess.run([*command, "train", "--input", str(path), "--model-dir", str(tmp_path / "m"),
                    *KEYED, *outputs], capture_output=True, check=True)
    done = subprocess.run([*command, "score", "--input", str(unlabeled), "--model-dir",
                           str(tmp_path / "m"), *KEYED, "--predictions", str(tmp_path / "s")],
                          capture_output=True, text=True, check=True)
    assert "Warning" not in done.stderr, done.stderr
    scores = read_output(str(tmp_path / "s")).to_pylist()
    assert len(scores) == 10 and all(s["loss"] is None and s["label"] is None for s in scores)


def test_a_logistic_score_past_floats_range_is_probability_0_without_a_warning(tmp_path):
    """sgd (not scale-free) on a feature of scale 1e4 makes scores of millions: e^-score
    overflowed, and numpy warned on stderr, for what is probability 0 (or 1)."""
    rows = [f"e{i},a,{1 if i % 2 else -1},{(1 if i % 2 else -1) * 1e4 * (1 + i % 7)},0"
            for i in range(200)]
    path = write_rows(tmp_path / "d.csv", rows)
    done = subprocess.run([sys.executable, "-m", "unitless.cli", "train", "--input", str(path),
                           "--algorithm", "sgd", "--model-dir", str(tmp_path / "m"),
                           "--predictions", str(tmp_path / "p"), "--dead-letter",
                           str(tmp_path / "dl"), *KEYED],
                          capture_output=True, text=True, check=True)
    assert "Warning" not in done.stderr, done.stderr
    rows = read_output(str(tmp_path / "p")).to_pylist()
    assert min(r["prediction"] for r in rows) < -1000
    assert {r["probability"] for r in rows if r["prediction"] < -1000} == {0.0}
