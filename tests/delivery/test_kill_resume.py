"""Delivery under SIGKILL: a run killed at many random moments (and right after checkpoints),
resumed each time, loses no prediction, learns every example exactly once, serves every example
without a label with the same prediction and model version as the uninterrupted run, and ends
with the models of an uninterrupted run, bit for bit."""
import sys
import time

import numpy as np

from tests.helpers.killing import campaigns, final_models, kills, run_complete
from unitless.connectors.files import read_output

KEYS = ("a", "b", "c")
N = 60_000
KILLS = kills(30)
SERVED = 10  # every tenth example has no label: served


def labeled_count(key):
    """How many examples of the model key have a label."""
    return sum(1 for i in range(N) if KEYS[i % 3] == key and i % SERVED != SERVED - 1)


def write_three_key_examples(path, n=N, seed=11):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * [1e-3, 1.0, 1e3]
    y = np.where(X @ [1e3, -1.0, 1e-3] + rng.normal(size=n) > 0, 1, -1)
    with open(path, "w") as f:
        f.write("id,segment,label,x1,x2,x3\n")
        for i in range(n):
            x1, x2, x3 = (float(v) for v in X[i])
            label = "" if i % SERVED == SERVED - 1 else y[i]
            f.write(f"e{i},{KEYS[i % 3]},{label},{x1!r},{x2!r},{x3!r}\n")


def file_command(data, out, resume=True):
    return [sys.executable, "-m", "unitless.cli", "train", "--input", str(data),
            "--id-column", "id", "--model-key-column", "segment", "--chunk-size", "500",
            "--checkpoint-every", "2000", "--algorithm", "scinol2",
            "--model-dir", str(out / "models"), "--predictions", str(out / "pred"),
            "--dead-letter", str(out / "dead"), *(["--resume"] if resume else [])]


def test_thirty_kills_lose_no_prediction_and_learn_every_example_once(tmp_path):
    """Kill-and-resume campaigns (tests/helpers/killing.py), each checked against the uninterrupted
    run, until 30 kills landed."""
    data = tmp_path / "examples.csv"
    write_three_key_examples(data)
    whole = tmp_path / "whole"
    began = time.time()
    run_complete(file_command(data, whole, resume=False))
    duration = time.time() - began
    expected = final_models(KEYS, whole / "models")
    reference = {r["id"]: r for r in read_output(str(whole / "pred")).to_pylist()}
    assert len(reference) == N
    campaigns(lambda n: file_command(data, tmp_path / f"crash{n}"),
              lambda n: tmp_path / f"crash{n}" / "models",
              lambda n: check_campaign(tmp_path / f"crash{n}", expected, reference),
              KILLS, duration)


def check_campaign(crash, expected, reference):
    # the models equal the uninterrupted run's, bit for bit, and each saw every example once
    got = final_models(KEYS, crash / "models")
    for key in KEYS:
        assert got[key][0].equals(expected[key][0]), key
        assert got[key][1:] == expected[key][1:] and got[key][1] == labeled_count(key)
    # every example has a prediction; duplicates (at least once) are identical to the original
    predicted = read_output(str(crash / "pred")).to_pylist()
    assert {r["id"] for r in predicted} == set(reference)
    for r in predicted:
        want = reference[r["id"]]
        assert (r["model_key"], r["examples_seen"], r["prediction"], r["loss"], r["served"]) == (
            want["model_key"], want["examples_seen"], want["prediction"], want["loss"],
            want["served"])
    assert not [p for p in crash.rglob("*") if ".tmp" in p.name], "a temporary file remains"
