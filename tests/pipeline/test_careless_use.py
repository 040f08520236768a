"""What a careless user does (a second run into a used model directory, two runs at once, a file
named twice) ends either in the right result or in one line saying why, never in an exit 0
with training lost or doubled (issue #56)."""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.connectors.storage import atomic_write
from unitless.store.by_group import group_checkpoints
from unitless.store.catalog import checkpoint_summaries
from unitless.store.ownership import DirectoryInUse, STALE, _Lease, start_over
from tests.helpers.commands import dead_letters, train
from tests.helpers.examples import make_examples, write_csv
from tests.helpers.killing import final_models
from tests.helpers.labels import write_join

ARGS = ("--label-column", "label", "--id-column", "id", "--model-key-column", "segment")


@pytest.fixture
def two_files(tmp_path):
    """Two CSV files of other examples (600 and 300 rows, three model keys)."""
    paths = []
    for seed, n in ((0, 600), (1, 300)):
        path = tmp_path / f"x{seed}.csv"
        write_csv(path, *make_examples(n, seed))
        paths.append(path)
    return paths


def _examples(out):
    return {key: meta["examples_seen"]
            for key, _, meta in checkpoint_summaries(str(out / "models"))}


def _manifests(out):
    return sorted(name for _, group in group_checkpoints(str(out / "models"))
                  for name in group.names)


def test_a_second_run_without_resume_is_refused_and_overwrite_starts_over(
        tmp_path, two_files, capsys):
    first, second = two_files
    out = train(tmp_path / "out", "--input", first, *ARGS)
    before = (_examples(out), _manifests(out))
    assert sum(before[0].values()) == 600
    code = train(out, "--input", second, *ARGS, expect=None)
    err = capsys.readouterr().err
    assert code == 2 and "holds an earlier run's models" in err and "--resume" in err
    assert len(err.strip().splitlines()) == 1
    assert (_examples(out), _manifests(out)) == before  # (nothing written)
    # another algorithm or model groups are refused the same way, before anything is mixed
    for other in (("--algorithm", "scinol2"), ("--model-groups", "8")):
        assert train(out, "--input", second, *ARGS, *other, expect=None) == 2
    assert (_examples(out), _manifests(out)) == before
    train(out, "--input", second, *ARGS, "--overwrite")
    assert sum(_examples(out).values()) == 300
    assert read_output(str(out / "pred")).num_rows == 300  # (the first run's parts removed)
    assert train(out, "--input", second, *ARGS, "--overwrite", "--resume", expect=None) == 2


def test_the_bundled_example_runs_each_time_it_is_typed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # (its outputs where the command puts them by default: out/)
    for _ in range(2):
        assert main(["train"]) == 0
        assert _examples(tmp_path / "out") == {"": 5000}
        assert read_output(str(tmp_path / "out" / "predictions")).num_rows == 5000
    assert "starts over each time" in capsys.readouterr().err
    # a model directory the user named is never removed for the example: refused as any run
    named = train(tmp_path / "mine", "--input", make_csv(tmp_path), *ARGS)
    before = _manifests(named)
    assert main(["train", "--model-dir", str(named / "models")]) == 2
    assert "holds an earlier run's models" in capsys.readouterr().err
    assert _manifests(named) == before


def make_csv(tmp_path):
    path = tmp_path / "few.csv"
    write_csv(path, *make_examples(50, 5))
    return path


def test_a_file_named_twice_is_read_once(tmp_path, two_files, monkeypatch):
    first, _ = two_files
    monkeypatch.chdir(tmp_path)
    out = train(tmp_path / "out", "--input", first.name, f"../{tmp_path.name}/{first.name}",
                first, *ARGS)
    assert sum(_examples(out).values()) == 600
    features, labels, _, _ = write_join(tmp_path, "features.csv")
    out = train(tmp_path / "joined", "--input", features, "--labels", labels,
                f"../{tmp_path.name}/labels.csv", "--id-column", "id",
                "--model-key-column", "key")
    joined = sum(_examples(out).values())
    alone = sum(_examples(train(tmp_path / "alone", "--input", features, "--labels", labels,
                                "--id-column", "id", "--model-key-column", "key")).values())
    assert joined == alone > 0


HOLD = textwrap.dedent("""
    import sys
    from unitless.store.ownership import own
    own(sys.argv[1])
    print("held", flush=True)
    sys.stdin.read()
""")


def test_a_second_writer_is_refused_while_the_first_runs(tmp_path, two_files, capsys):
    first, second = two_files
    out = train(tmp_path / "out", "--input", first, *ARGS)
    # a temporary manifest of the running writer, which a start-up cleanup would remove
    group = group_checkpoints(str(out / "models"))[0][1].directory
    writing = os.path.join(group, ".manifest-000000000009-x.json.tmp-1")
    open(writing, "w").close()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out / "models")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert train(out, "--input", second, *ARGS, "--resume", expect=None) == 2
        err = capsys.readouterr().err
        assert f"is in use by another run (process {holder.pid} on" in err
        assert os.path.exists(writing)
    finally:
        holder.kill()  # (a run that dies gives the directory up with it)
        holder.wait()
    train(out, "--input", second, *ARGS, "--resume")
    assert sum(_examples(out).values()) == 900 and not os.path.exists(writing)


def test_an_object_store_lease_refuses_a_second_holder_and_is_taken_over_when_stale(bucket):
    model_dir = f"{bucket}/models"
    first = _Lease(model_dir)
    first.take()
    with pytest.raises(DirectoryInUse, match="in use by another run"):
        _Lease(model_dir).take()
    first.stop.set()  # (the first run dies: its heartbeat stops and its lease grows stale)
    atomic_write(first.path, json.dumps({**first.holder,
                                         "heartbeat": time.time() - STALE - 1}).encode())
    taker = _Lease(model_dir)
    taker.take()
    taker.give_up()
    again = _Lease(model_dir)  # (given up: free at once)
    again.take()
    again.give_up()


def test_start_over_leaves_what_unitless_did_not_write(tmp_path, two_files):
    out = train(tmp_path / "out", "--input", two_files[0], *ARGS)
    (out / "models" / "notes.txt").write_text("mine")
    (out / "pred" / "README").write_text("mine")
    start_over(str(out / "models"), [str(out / "pred")])
    assert sorted(os.listdir(out / "models")) == [".unitless-owner", "notes.txt"]
    assert os.listdir(out / "pred") == ["README"]


def test_listings_and_resume_use_the_newest_valid_state(tmp_path, two_files, capsys):
    first, second = two_files
    out = train(tmp_path / "out", "--input", first, *ARGS)
    train(out, "--input", second, *ARGS, "--resume")
    newest = {key: path for key, path, _ in checkpoint_summaries(str(out / "models"))}
    for path in {p.partition("#")[0] for p in newest.values()}:
        with open(path, "r+b") as f:  # (a part cut short: a disk or a copy gone wrong)
            f.truncate(100)
    assert main(["inspect", str(out / "models")]) == 0
    listed = capsys.readouterr().out
    assert "all 3 models" in listed and "600" in listed
    assert train(out, "--input", second, *ARGS, "--resume", "--algorithm", "scinol2",
                 expect=None) == 2
    assert "was trained with --algorithm nag" in capsys.readouterr().err
    train(out, "--input", second, *ARGS, "--resume")
    assert sum(_examples(out).values()) == 900


def test_a_group_without_manifests_resumes_from_its_parts(tmp_path, two_files, caplog):
    first, second = two_files
    out = train(tmp_path / "out", "--input", first, *ARGS)
    before = _examples(out)
    for _, group in group_checkpoints(str(out / "models")):
        for name in group.names:
            os.remove(os.path.join(group.directory, name))
    assert _examples(out) == before  # (listed from the parts)
    train(out, "--input", second, *ARGS, "--resume")
    assert sum(_examples(out).values()) == 900
    assert "has no readable manifest: its 1 models are read from its parts" in caplog.text


def _labeled_halves(tmp_path, n=200):
    """Features of ``n`` examples (no label) over two model keys, and two labels files: the
    first labels the even examples, the second the odd ones."""
    X, y, keys = make_examples(n, 3, keys=("a", "b"))
    with open(tmp_path / "features.csv", "w") as f:
        f.write("id,segment,f1,f2,f3,f4\n")
        f.writelines(f"e{i},{keys[i]}," + ",".join(repr(float(v)) for v in X[i]) + "\n"
                     for i in range(n))
    halves = []
    for half in (0, 1):
        path = tmp_path / f"labels{half}.csv"
        with open(path, "w") as f:
            f.write("id,segment,label\n")
            f.writelines(f"e{i},{keys[i]},{y[i]}\n" for i in range(half, n, 2))
        halves.append(path)
    return tmp_path / "features.csv", halves


def test_examples_unlabeled_at_the_end_are_learned_when_a_resumed_run_brings_their_labels(
        tmp_path):
    features, (even, odd) = _labeled_halves(tmp_path)
    args = ("--id-column", "id", "--model-key-column", "segment")
    out = train(tmp_path / "out", "--input", features, "--labels", even, *args)
    assert sum(_examples(out).values()) == 100
    train(out, "--input", features, "--labels", even, odd, *args, "--resume")
    assert dead_letters(out) == []
    whole = train(tmp_path / "whole", "--input", features, "--labels", even, odd, *args)
    assert sum(_examples(out).values()) == 200
    got, want = final_models("ab", out / "models"), final_models("ab", whole / "models")
    for key in "ab":  # (the state bit for bit, as one run over all the labels leaves it)
        assert got[key][0].equals(want[key][0]) and got[key][1:3] == want[key][1:3]
