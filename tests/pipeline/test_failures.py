"""Failures a user can cause end in one line naming the cause, a non-zero exit and nothing
half-written; --resume refuses to continue a model with other settings or to learn a file twice."""
import json
import os
import subprocess
import time

import pytest

from unitless.connectors.files import read_output
from unitless.store.catalog import latest_checkpoint, read_checkpoint

from tests.helpers.commands import train
from tests.helpers.runners import prism_args

ROWS = 3000
KEYED = ("--id-column", "id", "--model-key-column", "segment")


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "data.csv"
    with open(path, "w") as f:
        f.write("id,segment,label,x,z\n")
        for i in range(ROWS):
            f.write(f"e{i},{'ab'[i % 2]},{1 if i % 3 else -1},{i * 1e3},{(i % 7) * 1e-3}\n")
    return path



def one_error_line(capsys):
    err = [line for line in capsys.readouterr().err.splitlines()
           if line.startswith("unitless:") or "Traceback" in line]
    assert len(err) == 1, err
    return err[0]


def examples_seen(models, key):
    table = read_checkpoint(latest_checkpoint(str(models), key))
    return json.loads(table.schema.metadata[b"unitless"])["examples_seen"]


def test_an_unreachable_broker_for_predictions_is_one_line(tmp_path, csv_file, capsys):
    started = time.time()
    train(tmp_path / "out", "--input", csv_file, *KEYED, "--predictions",
          "kafka://127.0.0.1:9/predictions", expect=2)
    assert time.time() - started < 30
    line = one_error_line(capsys)
    assert line.startswith("unitless: error: Kafka broker 127.0.0.1:9 unreachable"), line
    assert not (tmp_path / "out" / "models").exists() or not any(
        (tmp_path / "out" / "models").iterdir())


@pytest.mark.parametrize("output", ["--predictions", "--dead-letter", "--model-dir"])
def test_an_unwritable_output_directory_is_one_line(tmp_path, csv_file, capsys, output):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    train(tmp_path / "out", "--input", csv_file, *KEYED, output, str(blocker / "out"), expect=2)
    line = one_error_line(capsys)
    assert "Not a directory" in line and str(blocker) in line, line


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory that cannot be written: a read-only tmpfs for root (whom permissions do not
    stop), else one without write permission. Yields (it, the reason writing it fails)."""
    path = tmp_path / "read-only"
    path.mkdir()
    if os.geteuid():
        path.chmod(0o555)
        yield path, "Permission denied"
        path.chmod(0o755)
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)],
                          capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a read-only tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path, "Read-only file system"
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.parametrize("output", ["--predictions", "--dead-letter", "--model-dir"])
def test_a_read_only_output_directory_is_one_line_naming_it(tmp_path, csv_file, capsys, output,
                                                           read_only_dir):
    """Not the raw error of the probe file written there ('[Errno 13] ... .probe-....tmp')."""
    path, reason = read_only_dir
    train(tmp_path / "out", "--input", csv_file, *KEYED, output, path, expect=2)
    assert one_error_line(capsys) == (
        f"unitless: error: cannot write in the directory {path}: {reason}")


@pytest.fixture
def full_disk(tmp_path):
    """A real 256 KiB file system (tmpfs; needs root)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tmp_path, csv_file, capsys,
                                                                 full_disk):
    train(tmp_path / "out", "--input", csv_file, *KEYED, "--predictions", str(full_disk / "pred"),
          "--output-format", "jsonl", expect=2)
    line = one_error_line(capsys)
    assert "No space left on device" in line and str(full_disk / "pred") in line, line
    assert [p.name for p in (full_disk / "pred").iterdir()] == []


def test_resume_refuses_other_settings_and_allows_a_hyperparameter_change_when_asked(
        tmp_path, csv_file, capsys):
    train(tmp_path / "out", "--input", csv_file, *KEYED, "--algorithm", "nag")
    capsys.readouterr()
    train(tmp_path / "out", "--input", csv_file, *KEYED, "--algorithm", "scinol2", "--resume",
          expect=2)
    line = one_error_line(capsys)
    assert "was trained with --algorithm nag, not scinol2" in line, line
    train(tmp_path / "out", "--input", csv_file, *KEYED, "--bits", "20", "--resume", expect=2)
    assert "--bits 18, not 20" in one_error_line(capsys)
    train(tmp_path / "out", "--input", csv_file, *KEYED, "--loss", "hinge", "--resume", expect=2)
    assert "--loss logistic, not hinge" in one_error_line(capsys)
    train(tmp_path / "out", "--input", csv_file, *KEYED, "--learning-rate", "0.1", "--resume",
          expect=2)
    line = one_error_line(capsys)
    assert "--learning-rate 0.5, not 0.1" in line and "--allow-hyperparameter-change" in line
    more = tmp_path / "more.csv"
    more.write_text(csv_file.read_text().replace("\ne", "\nmore-e"))  # new examples, new ids
    train(tmp_path / "out", "--input", more, *KEYED, "--learning-rate", "0.1", "--resume",
          "--allow-hyperparameter-change")
    assert examples_seen(tmp_path / "out" / "models", "a") == ROWS
    table = read_checkpoint(latest_checkpoint(str(tmp_path / "out" / "models"), "a"))
    assert json.loads(table.schema.metadata[b"unitless"])["hyperparameters"] == {
        "learning_rate": 0.1}


def test_the_same_file_by_another_name_is_not_learned_twice(tmp_path, csv_file):
    os.symlink(csv_file, tmp_path / "link.csv")
    train(tmp_path / "out", "--input", csv_file, *KEYED)
    models = tmp_path / "out" / "models"
    before = {k: examples_seen(models, k) for k in "ab"}
    assert before == {"a": ROWS // 2, "b": ROWS // 2}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for spelling in ("data.csv", "./data.csv", "link.csv", str(tmp_path / "." / "data.csv")):
            train(tmp_path / "out", "--input", spelling, *KEYED, "--resume")
    finally:
        os.chdir(cwd)
    assert {k: examples_seen(models, k) for k in "ab"} == before


def test_an_example_whose_loss_overflows_is_a_dead_letter_and_leaves_no_trace(tmp_path):
    rows = [f"e{i},a,{(i % 5) - 2.0},{i % 7},{(i % 3) * 1e3}" for i in range(400)]
    bad = {120: "e120,a,1e90,1,1e99", 250: "e250,a,-1e95,1e99,5"}  # line numbers (header: 1)
    mixed = list(rows)
    for number, text in bad.items():
        mixed[number - 2] = text
    paths = {}
    for name, lines in (("mixed", mixed), ("good", [r for i, r in enumerate(rows)
                                                    if i + 2 not in bad])):
        paths[name] = tmp_path / f"{name}.csv"
        paths[name].write_text("id,segment,label,x,z\n" + "\n".join(lines) + "\n")
    for name in paths:
        train(tmp_path / name, "--input", paths[name], *KEYED, "--loss", "squared", "--algorithm",
              "nag")
    dead = read_output(str(tmp_path / "mixed" / "dead")).to_pylist()
    assert sorted(d["position"] for d in dead) == sorted(bad)
    assert all("finite" in d["reason"] for d in dead)
    mixed_model, good_model = (read_checkpoint(latest_checkpoint(
        str(tmp_path / name / "models"), "a")) for name in ("mixed", "good"))
    assert mixed_model.drop_columns(["name"]).equals(good_model.drop_columns(["name"]))


@pytest.mark.prism
def test_a_run_on_prism_outlasting_the_job_services_request_timeout_completes(tmp_path):
    """Beam's job client followed a Prism job's state for ``--job_server_timeout`` (300 s by
    default) and then failed the run still going (``beam_patches.
    watch_jobs_without_a_deadline``): here a run of a few seconds outlasts a 1 s timeout (its
    input large enough that the job alone takes longer than that: 120,000 rows did not)."""
    path, n = tmp_path / "data.csv", 200 * ROWS
    path.write_text("id,segment,label,x\n" + "".join(
        f"e{i},{'ab'[i % 2]},{1 if i % 3 else -1},{i % 7}\n" for i in range(n)))
    began = time.time()
    out = train(tmp_path / "out", "--input", path, *KEYED, *prism_args(),
                "--job_server_timeout", "1")
    assert time.time() - began > 2  # (twice the timeout: without the patch, the run fails)
    assert examples_seen(out / "models", "a") + examples_seen(out / "models", "b") == n
