"""Checkpoints, predictions, dead letters and inputs on an object store (s3:// on a real S3 API
server, deploy/s3/local_s3.py, through Beam's S3 file system) behave as on a local disk."""
import json
import logging

import numpy as np
import pytest

from unitless.cli.main import main
from unitless.connectors import storage
from unitless.connectors.files import read_output
from unitless.learner import new_state, read_metadata, to_arrow
from unitless.store.catalog import load_latest, model_keys
from unitless.store.per_key import checkpoint_files, key_dir, write_checkpoint
from tests.helpers.commands import train
from tests.helpers.examples import make_examples, write_csv, write_parquet

STORED = ("--label-column", "label", "--id-column", "id", "--model-key-column", "segment",
          "--chunk-size", "50", "--checkpoint-every", "1000")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    """A directory on each file system: the same steps must give the same results."""
    return str(tmp_path) if request.param == "local" else request.getfixturevalue("bucket")


def test_storage_gives_the_same_answers_on_disk_and_on_s3(root):
    d = storage.join(root, "dir")
    assert storage.list_dir(d) == ([], []) and not storage.is_dir(d)
    storage.makedirs(d)
    storage.atomic_write(storage.join(d, "b.bin"), b"old")
    storage.atomic_write(storage.join(d, "b.bin"), b"new contents")
    storage.atomic_write(storage.join(d, "a.txt"), "é\n".encode())
    storage.makedirs(storage.join(d, "sub"))
    storage.atomic_write(storage.join(d, "sub", "c.txt"), b"c")
    assert storage.list_dir(d) == (["a.txt", "b.bin"], ["sub"])
    assert storage.is_dir(d) and storage.is_dir(storage.join(d, "sub"))
    assert not storage.is_dir(storage.join(d, "a.txt"))
    assert storage.read_start(storage.join(d, "none"), 10) is None
    assert storage.read_start(storage.join(d, "a.txt"), 1) == b"\xc3"
    assert storage.read_bytes(storage.join(d, "b.bin")) == b"new contents"
    assert storage.read_bytes(storage.join(d, "b.bin"), 3) == b"new"
    assert storage.read_text(storage.join(d, "a.txt")) == "é\n"
    assert storage.match(storage.join(d, "*.txt")) == [storage.join(d, "a.txt")]
    assert storage.match(storage.join(d, "*")) == [storage.join(d, "a.txt"),
                                                   storage.join(d, "b.bin")]
    assert storage.modified(storage.join(d, "a.txt")) > 1.7e9
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(storage.join(d, "none"))
    storage.remove(storage.join(d, "a.txt"))
    storage.remove(storage.join(d, "a.txt"))  # already gone: fine
    assert storage.list_dir(d) == (["b.bin"], ["sub"])


def _table(examples_seen):
    state = new_state("nag", 1 << 6, "logistic")
    state.examples_seen = examples_seen
    return to_arrow(state)


def test_checkpoints_on_s3_are_written_pruned_and_chosen_as_on_disk(root, caplog):
    models = storage.join(root, "models")
    for n in (10, 20, 30, 25):  # a re-run bundle writes 25 after 30: latest stays at 30
        write_checkpoint(models, "k/é", _table(n), n, keep=2)
    directory = key_dir(models, "k/é")
    assert checkpoint_files(directory) == ["ckpt-000000000025.arrow", "ckpt-000000000030.arrow"]
    assert storage.read_bytes(storage.join(directory, "latest")) == b"ckpt-000000000030.arrow"
    assert model_keys(models) == ["k/é"]
    path, table = load_latest(models, "k/é")
    assert path == storage.join(directory, "ckpt-000000000030.arrow")
    assert read_metadata(table)["examples_seen"] == 30
    # a damaged newest file (as an interrupted copy by hand might leave) is skipped, loudly
    storage.atomic_write(storage.join(directory, "ckpt-000000000040.arrow"), b"ARROW1 cut")
    storage.atomic_write(storage.join(directory, "latest"), b"ckpt-000000000040.arrow")
    with caplog.at_level(logging.WARNING, logger="unitless"):
        assert load_latest(models, "k/é")[0] == path
    assert "ckpt-000000000040.arrow: it is not a readable Arrow file" in caplog.text



def _put(root, name, writer, X, y, keys, tmp_path):
    local = tmp_path / name
    writer(local, X, y, keys)
    path = storage.join(root, "in", name)
    storage.makedirs(storage.join(root, "in"))
    storage.atomic_write(path, local.read_bytes())
    return path


def _rows(table):
    return sorted(tuple(r.values()) for r in table.to_pylist())


def test_train_resume_inspect_and_score_on_s3_equal_the_local_run(bucket, tmp_path, capsys):
    """Inputs (a CSV with one bad record, then a Parquet file) read from s3://, everything
    written to s3://, resumed from the checkpoints there: the predictions, dead letters and
    models are those of the same runs on a local disk."""
    X, y, keys = make_examples(n=500)
    runs = {}
    for root in (str(tmp_path / "disk"), bucket):
        first = _put(root, "a.csv", write_csv, X[:300], y[:300], keys[:300], tmp_path)
        text = storage.read_text(first).replace("\ne5,", "\ne5,x,", 1).encode()
        storage.atomic_write(first, text)  # one record with a field too many
        out = train(storage.join(root, "out"), "--input", *[storage.join(root, "in", "*.csv")],
                    *STORED)
        second = _put(root, "b.parquet", write_parquet, X[300:], y[300:], keys[300:], tmp_path)
        train(storage.join(root, "out"), "--input", *[second], *STORED, "--resume")
        runs[root] = out
    disk, s3 = runs.values()
    want, got = read_output(storage.join(disk, "pred")), read_output(storage.join(s3, "pred"))
    assert got.num_rows == want.num_rows == 499
    assert _rows(got.drop_columns(["source"])) == _rows(want.drop_columns(["source"]))
    dead = read_output(storage.join(s3, "dead")).to_pylist()
    assert [(d["position"], d["reason"][:18]) for d in dead] == [(7, "expected 7 fields,")]
    assert model_keys(storage.join(s3, "models")) == model_keys(storage.join(disk, "models"))
    for key in model_keys(storage.join(disk, "models")):
        a = load_latest(storage.join(disk, "models"), key)[1]
        b = load_latest(storage.join(s3, "models"), key)[1]
        assert b.drop_columns([]).equals(a.drop_columns([])) or all(
            b.column(c).equals(a.column(c)) for c in a.column_names), key

    capsys.readouterr()
    assert main(["inspect", storage.join(s3, "models"), "--json"]) == 0
    lines = json.loads(capsys.readouterr().out)
    assert {line["key"] for line in lines} == set(keys)
    assert sum(line["examples"] for line in lines) == 499

    unlabeled = storage.join(bucket, "in", "new.csv")
    storage.atomic_write(unlabeled, b"id,segment,f1,f2,f3,f4\nn1,a,0.001,1,1000,10\n")
    assert main(["score", "--input", unlabeled, "--id-column", "id", "--model-key-column",
                 "segment", "--model-dir", storage.join(s3, "models"),
                 "--predictions", storage.join(bucket, "scored"),
                 "--dead-letter", storage.join(bucket, "scored-dead")]) == 0
    scored = read_output(storage.join(bucket, "scored")).to_pylist()
    assert [(r["id"], r["model_key"]) for r in scored] == [("n1", "a")]
    assert np.isfinite(scored[0]["prediction"])
