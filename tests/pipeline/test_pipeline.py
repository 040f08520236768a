"""End-to-end runs of `unitless train/score/inspect` on Beam's FnApiRunner with real files."""
import gzip
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.learner import hashed_batch, learn, new_state
from unitless.learner.examples import bias_index
from unitless.store.catalog import latest_checkpoint, load_latest, read_checkpoint

from tests.helpers.commands import train
from tests.helpers.examples import FEATURES, make_examples, write_csv, write_parquet

BITS = 18


def expected_predictions(X, y, keys, names=FEATURES, algorithm="nag"):
    """The plain learner, run per key on that key's examples in file order."""
    out = {}
    for k in sorted(set(keys)):
        rows = [i for i in range(len(y)) if keys[i] == k]
        state = new_state(algorithm, 1 << BITS, "logistic", bias_index=bias_index(BITS))
        batch = hashed_batch([{n: X[i, j] for j, n in enumerate(names) if X[i, j] != 0}
                              for i in rows], y[rows], BITS)
        out[k] = (rows, learn(state, batch).scores[:, 0], state)
    return out


def write_jsonl(path, X, y, keys):
    with gzip.open(path, "wt") as f:
        for i in range(len(y)):
            row = {"id": f"e{i}", "segment": keys[i], "label": int(y[i]),
                   **{n: float(X[i, j]) for j, n in enumerate(FEATURES) if X[i, j] != 0}}
            f.write(json.dumps(row) + "\n")


def write_vw(path, X, y, keys):
    with open(path, "w") as f:
        for i in range(len(y)):
            feats = " ".join(f"{n}:{float(X[i, j])!r}" for j, n in enumerate(FEATURES) if X[i, j] != 0)
            f.write(f"{y[i]} 'e{i}| {feats}\n")


def write_libsvm(path, X, y, keys):
    with open(path, "w") as f:
        for i in range(len(y)):
            feats = " ".join(f"{j + 1}:{float(X[i, j])!r}" for j in range(4) if X[i, j] != 0)
            f.write(f"{y[i]} {feats}\n")



def predictions_by_id(out):
    table = read_output(str(out / "pred"))
    return {r["id"]: r for r in table.to_pylist()}


@pytest.mark.parametrize("fmt,writer,keyed", [
    ("csv", write_csv, True), ("jsonl", write_jsonl, True), ("parquet", write_parquet, True),
    ("vw", write_vw, False), ("libsvm", write_libsvm, False)])
def test_each_format_gives_the_plain_learners_predictions(tmp_path, fmt, writer, keyed):
    X, y, keys = make_examples()
    suffix = {"jsonl": "jsonl.gz"}.get(fmt, fmt)
    path = tmp_path / f"data.{suffix}"
    writer(path, X, y, keys)
    args = ["--input", str(path), "--format", fmt, "--chunk-size", "64"]
    if keyed:
        args += ["--model-key-column", "segment", "--id-column", "id"]
    out = train(tmp_path / "out", *args)
    table = read_output(str(out / "pred"))
    assert table.num_rows == len(y)
    if not keyed:
        keys = [""] * len(y)
    names = [str(j + 1) for j in range(4)] if fmt == "libsvm" else FEATURES
    expected = expected_predictions(X, y, keys, names)
    rows = table.to_pylist()
    for k, (idx, scores, state) in expected.items():
        got = sorted((r for r in rows if r["model_key"] == k), key=lambda r: r["examples_seen"])
        assert len(got) == len(idx)
        np.testing.assert_allclose([r["prediction"] for r in got], scores, rtol=1e-12, atol=1e-15)
        assert [r["label"] for r in got] == list(y[idx].astype(float))
        if keyed:
            assert [r["id"] for r in got] == [f"e{i}" for i in idx]
        model = read_checkpoint(latest_checkpoint(str(out / "models"), k))
        meta = json.loads(model.schema.metadata[b"unitless"])
        assert meta["examples_seen"] == len(idx)
        w = dict(zip(model.column("index").to_pylist(), model.column("w").to_pylist()))
        nonzero = np.flatnonzero(state.weights[0])
        np.testing.assert_allclose([w[i] for i in nonzero], state.weights[0][nonzero], rtol=1e-12)


def test_bad_records_go_to_the_dead_letter_output_and_nothing_is_lost(tmp_path):
    X, y, keys = make_examples(n=200, keys=("a",))
    path = tmp_path / "mixed.csv"
    write_csv(path, X, y, keys)
    lines = path.read_text().splitlines()
    bad = {  # line number (1-based, header is line 1) -> (replacement, expected reason)
        5: ("e3,a,1,0.1,0.2", "expected 7 fields"),
        9: ("e7,a,1,abc,1,2,3", "feature 'f1' 'abc' is not a number"),
        20: ("e18,a,nan,1,2,3,4", "label 'nan' is not a number"),  # (no label: served)
        33: ("e31,a,7,1,2,3,4", "label 7.0 is not a logistic label"),
        40: ("e38,a,1,nan,2,3,4", "not finite"),
        41: ("e39,a,1,1,inf,3,4", "not finite"),
    }
    for number, (text, _) in bad.items():
        lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n")
    out = train(tmp_path / "out", "--input", str(path), "--id-column", "id", "--chunk-size", "16",
                "--model-key-column", "segment")
    predicted = predictions_by_id(out)
    dead = read_output(str(out / "dead")).to_pylist()
    good_ids = {f"e{i}" for i in range(200)} - {t.split(",")[0] for t, _ in bad.values()}
    assert set(predicted) == good_ids
    assert len(predicted) + len(dead) == 200
    assert {d["position"]: d["raw"] for d in dead} == {n: t for n, (t, _) in bad.items()}
    for d in dead:
        assert bad[d["position"]][1] in d["reason"], d
        assert d["source"] == str(path)
    # the model never saw the bad rows: it equals the learner on the good rows alone
    keep = [i for i in range(200) if f"e{i}" in good_ids]
    expected = expected_predictions(X[keep], y[keep], ["a"] * len(keep))["a"][1]
    got = [predicted[f"e{i}"]["prediction"] for i in keep]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


def test_score_applies_the_checkpoint_and_inspect_summarises_it(tmp_path, capsys):
    X, y, keys = make_examples(n=300)
    path = tmp_path / "train.csv"
    write_csv(path, X, y, keys)
    out = train(tmp_path / "out", "--input", str(path), "--id-column", "id", "--model-key-column",
                "segment", "--algorithm", "scinol2")
    scored = tmp_path / "scored"
    assert main(["score", "--input", str(path), "--id-column", "id", "--model-key-column",
                 "segment", "--model-dir", str(out / "models"), "--predictions", str(scored),
                 "--dead-letter", str(tmp_path / "dead2")]) == 0
    rows = read_output(str(scored)).to_pylist()
    assert len(rows) == 300
    # a new example scored by the checkpoint gets the prediction the training run makes when
    # that example comes next, bit for bit (ScInOL computes its weights as it predicts: not
    # the stored w times x)
    x = [2e-3, -0.5, 1500.0, 4.0]
    longer, new = tmp_path / "longer.csv", tmp_path / "new.csv"
    write_csv(longer, np.vstack([X, x]), [*y, 1], [*keys, "a"])
    new.write_text("segment," + ",".join(FEATURES) + "\na," + ",".join(map(repr, x)) + "\n")
    out2 = train(tmp_path / "longer" / "out", "--input", str(longer), "--id-column", "id",
                 "--model-key-column", "segment", "--algorithm", "scinol2")
    assert main(["score", "--input", str(new), "--model-key-column", "segment", "--model-dir",
                 str(out / "models"), "--predictions", str(tmp_path / "new-scores"),
                 "--dead-letter", str(tmp_path / "dead3")]) == 0
    (served,) = read_output(str(tmp_path / "new-scores")).to_pylist()
    learned = read_output(str(out2 / "pred")).to_pylist()
    last = max((r for r in learned if r["model_key"] == "a"), key=lambda r: r["examples_seen"])
    assert served["prediction"] == last["prediction"] and served["loss"] is None
    capsys.readouterr()
    assert main(["inspect", str(out / "models"), "--model-key", "a", "--json", "--top",
                 "3"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["algorithm"] == "scinol2" and info["model_key"] == "a"
    assert info["examples_seen"] == sum(k == "a" for k in keys)
    assert len(info["top_features"]) == 3
    assert {f["name"] for f in info["top_features"]} <= set(FEATURES) | {"constant"}


def test_clear_one_line_errors(tmp_path, capsys):
    assert main(["train", "--input", str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"unitless: error: input not found: {tmp_path / 'missing.csv'}"]
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--algorithm", "nope"])
    assert exit_.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err
    assert main(["train", "--algorithm", "scinol2", "--learning-rate", "0.1"]) == 2
    assert "does not apply to scinol2" in capsys.readouterr().err


def test_interrupted_then_resumed_run_equals_an_uninterrupted_one(tmp_path):
    X, y, keys = make_examples(n=120_000, seed=5, keys=("a", "b"))
    path = tmp_path / "big.csv"
    write_csv(path, X, y, keys)
    common = ["--input", str(path), "--id-column", "id", "--model-key-column", "segment",
              "--chunk-size", "500", "--checkpoint-every", "5000"]

    def command(name, *extra):
        return [sys.executable, "-m", "unitless.cli", "train", *common, *extra,
                "--model-dir", str(tmp_path / name / "models"),
                "--predictions", str(tmp_path / name / "pred"),
                "--dead-letter", str(tmp_path / name / "dead")]

    subprocess.run(command("whole"), check=True, capture_output=True)
    crashed = subprocess.Popen(command("crash"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    def learned(key):  # examples in the key's newest checkpoint (its first one records none)
        path = latest_checkpoint(str(tmp_path / "crash" / "models"), key)
        return path and json.loads(read_checkpoint(path).schema.metadata[b"unitless"])[
            "examples_seen"]

    deadline = time.time() + 120
    while time.time() < deadline and not learned("a"):
        assert crashed.poll() is None, "the run ended before it could be interrupted"
        time.sleep(0.01)
    crashed.send_signal(signal.SIGKILL)
    crashed.wait()
    interrupted_at = {"a": learned("a")}
    assert 0 < interrupted_at["a"] < sum(k == "a" for k in keys)
    resumed = command("crash", "--resume")
    resumed[resumed.index("--predictions") + 1] = str(tmp_path / "crash" / "pred2")
    subprocess.run(resumed, check=True, capture_output=True)
    for k in ("a", "b"):
        whole = load_latest(str(tmp_path / "whole" / "models"), k)[1]
        again = load_latest(str(tmp_path / "crash" / "models"), k)[1]
        assert whole.drop_columns(["name"]).equals(again.drop_columns(["name"]))
        m1, m2 = (json.loads(t.schema.metadata[b"unitless"]) for t in (whole, again))
        assert m1["examples_seen"] == m2["examples_seen"] == sum(x == k for x in keys)
        assert m1["cumulative_loss"] == m2["cumulative_loss"]
    # the resumed run predicted exactly the examples after each model's checkpoint, identically
    whole = {r["id"]: r for r in read_output(str(tmp_path / "whole" / "pred")).to_pylist()}
    later = read_output(str(tmp_path / "crash" / "pred2")).to_pylist()
    assert later, "the resumed run predicted nothing"
    for r in later:
        assert r["prediction"] == whole[r["id"]]["prediction"]
        assert r["examples_seen"] == whole[r["id"]]["examples_seen"]
    a_after = [r for r in later if r["model_key"] == "a"]
    assert min(r["examples_seen"] for r in a_after) == interrupted_at["a"] + 1
