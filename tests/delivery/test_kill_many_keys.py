"""Delivery under SIGKILL at 100,000 model keys (1,024 model groups, their checkpoints parts of
many models; a resumed run knows most models by their checkpoints alone until they have
something new, docs/many-models.md): kill-and-resume campaigns (tests/helpers/killing.py) over
files on Prism end with every model of an uninterrupted run bit for bit, learn every example
once and lose no prediction."""
import sys
import time

import numpy as np
import pytest

from tests.helpers.killing import campaigns, kills, run_complete
from tests.helpers.runners import prism_args
from unitless.connectors.files import read_output
from unitless.store.catalog import checkpoint_metadata, newest_models

KEYS = 100_000
N = 3 * KEYS  # three examples a key, spread over the input: a checkpoint after its second
SERVED = 10  # every tenth example has no label: served

pytestmark = pytest.mark.prism


def examples(n=N, seed=11):
    """[(id, model key, label or None, features)]: example i of key i mod KEYS."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * [1e-3, 1.0, 1e3]
    y = np.where(X @ [1e3, -1.0, 1e-3] + rng.normal(size=n) > 0, 1, -1)
    return [(f"e{i}", f"k{i % KEYS}", None if i % SERVED == SERVED - 1 else int(y[i]),
             [float(v) for v in X[i]]) for i in range(n)]


def command(source, out, resume=True):
    return [sys.executable, "-m", "unitless.cli", "train", "--input", source,
            "--id-column", "id", "--model-key-column", "segment", "--chunk-size", "500",
            "--checkpoint-every", "2", "--algorithm", "scinol2",
            "--model-dir", str(out / "models"), "--predictions", str(out / "pred"),
            "--dead-letter", str(out / "dead"), *prism_args(),
            *(["--resume"] if resume else [])]


def newest_states(models):
    """(every model's newest state, sorted by model key, without feature names; {model key:
    (examples seen, cumulative loss, input positions)}) of a model directory."""
    states = newest_models(str(models))
    states = states.take(np.argsort(np.asarray(states.column("model_key").to_pylist()),
                                    kind="stable")).drop_columns(["name"])
    meta = {key: (m["examples_seen"], m["cumulative_loss"], m["input_positions"])
            for key, _, m in checkpoint_metadata(str(models))}
    return states, meta


def check_models(got, want, labeled):
    assert len(got[1]) == KEYS and got[1] == want[1]
    assert sum(examples_seen for examples_seen, _, _ in got[1].values()) == labeled
    assert got[0].equals(want[0])


def check_predictions(rows, reference):
    """Every example predicted; duplicates (at least once) identical to the original."""
    assert {r["id"] for r in rows} == set(reference)
    for r in rows:
        want = reference[r["id"]]
        assert (r["model_key"], r["examples_seen"], r["prediction"], r["served"]) == (
            want["model_key"], want["examples_seen"], want["prediction"], want["served"])


def test_kills_over_files_at_a_hundred_thousand_keys(tmp_path):
    """Two kills on Prism (``UNITLESS_KILLS=30`` by hand: ``killing.kills``)."""
    rows = examples()
    data = tmp_path / "examples.csv"
    data.write_text("id,segment,label,x1,x2,x3\n" + "".join(
        f"{i},{key},{'' if label is None else label},{x[0]!r},{x[1]!r},{x[2]!r}\n"
        for i, key, label, x in rows))
    labeled = sum(label is not None for _, _, label, _ in rows)
    whole = tmp_path / "whole"
    began = time.time()
    run_complete(command(str(data), whole, resume=False))
    duration = time.time() - began
    expected = newest_states(whole / "models")
    reference = {r["id"]: r for r in read_output(str(whole / "pred")).to_pylist()}
    assert len(reference) == N

    def check(n):
        check_models(newest_states(tmp_path / f"crash{n}" / "models"), expected, labeled)
        check_predictions(read_output(str(tmp_path / f"crash{n}" / "pred")).to_pylist(),
                          reference)

    campaigns(lambda n: command(str(data), tmp_path / f"crash{n}"),
              lambda n: tmp_path / f"crash{n}" / "models", check, kills(2), duration)

