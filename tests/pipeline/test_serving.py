"""Serve while learning: a record without a label is predicted by its model key's model in its
place in that key's order and not learned. On the FnApiRunner and on Prism (batch and
streaming), with model groups: each served prediction equals the one its labeled twin right
after it gets, bit for bit, with the model version it was made with; the models equal a run over
the labeled records alone; the summary counts served and learned apart."""
import json
from dataclasses import replace

import numpy as np
import pytest

from tests.helpers.commands import latest_models, train
from tests.helpers.runners import RUNNERS, runner_args
from unitless.connectors.files import read_output
from unitless.parse.csv import parse_csv
from unitless.pipelines.config import configure

KEYS = ("a", "b", "c", "d")
N = 1_200


def write_unlabeled_first(path, twins):
    """CSV of N labeled examples over KEYS, features of scales 1e-3..1e4; a fifth of them come
    first without their label (``twins``: then right away again with it, else not at all).
    Returns the ids of the unlabeled records."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(N, 3)) * [1e-3, 1.0, 1e4]
    y = np.where(X @ [1e3, -1.0, 1e-4] + rng.normal(size=N) > 0, 1, -1)
    unlabeled = rng.random(N) < 0.2
    lines, served = ["id,segment,label,x1,x2,x3"], []
    for i in range(N):
        features = ",".join(repr(float(v)) for v in X[i])
        if unlabeled[i]:
            served.append(f"u{i}")
            lines.append(f"u{i},{KEYS[i % 4]},,{features}")
            if not twins:
                continue
        lines.append(f"e{i},{KEYS[i % 4]},{y[i]},{features}")
    path.write_text("\n".join(lines) + "\n")
    return served



# the options of every run here
SERVING = ("--id-column", "id", "--model-key-column", "segment", "--algorithm", "scinol2",
           "--chunk-size", "64")


def assert_same_models(got, want):
    assert set(got) == set(want) == set(KEYS)
    for key, table in got.items():
        assert table.drop_columns(["name"]).equals(want[key].drop_columns(["name"])), key
        m1, m2 = (json.loads(t.schema.metadata[b"unitless"]) for t in (table, want[key]))
        assert (m1["examples_seen"], m1["cumulative_loss"], m1["errors"]) == (
            m2["examples_seen"], m2["cumulative_loss"], m2["errors"]), key


@pytest.mark.parametrize("runner, streaming, groups", [
    ("fnapi", False, "0"), ("prism", False, "0"), ("prism", True, "2")])
def test_a_served_example_is_predicted_as_its_labeled_twin_right_after_it(
        tmp_path, runner, streaming, groups, capsys):
    data = tmp_path / "twins.csv"
    served = write_unlabeled_first(data, twins=True)
    out = train(tmp_path / "run", "--input", data, *SERVING, "--model-groups", groups,
                *runner_args(runner, streaming))
    summary = capsys.readouterr().out
    rows = {r["id"]: r for r in read_output(str(out / "pred")).to_pylist()}
    assert len(rows) == N + len(served)
    for uid in served:
        u, twin = rows[uid], rows["e" + uid[1:]]
        assert u["served"] and not twin["served"]
        assert u["prediction"] == twin["prediction"], uid  # bit for bit
        assert u["probability"] == twin["probability"]
        assert (u["label"], u["loss"], u["error"]) == (None, None, None)
        assert u["examples_seen"] == twin["examples_seen"] - 1  # the model that served it
        assert u["position"] == twin["position"] - 1
    assert sum(not r["served"] for r in rows.values()) == N
    assert f"{N:,} examples learned, {len(served):,} served (no label)" in summary
    # serving changed no model: they equal a run over the labeled records alone
    labeled = tmp_path / "labeled.csv"
    labeled.write_text("".join(line + "\n" for line in data.read_text().splitlines()
                               if ",," not in line))
    assert_same_models(latest_models(out), latest_models(
        train(tmp_path / "labeled", "--input", labeled, *SERVING)))


@pytest.mark.parametrize("runner", RUNNERS)
def test_served_examples_leave_the_models_of_the_labeled_records_alone(tmp_path, runner):
    data = tmp_path / "mixed.csv"
    served = write_unlabeled_first(data, twins=False)
    out = train(tmp_path / "run", "--input", data, *SERVING, *runner_args(runner))
    rows = read_output(str(out / "pred")).to_pylist()
    assert sorted(r["id"] for r in rows if r["served"]) == sorted(served)
    assert len(rows) == N
    # each key's learned rows count 1, 2, ...; a served row names the count before it
    for key in KEYS:
        mine = sorted((r for r in rows if r["model_key"] == key), key=lambda r: r["position"])
        learned = 0
        for r in mine:
            learned += not r["served"]
            assert r["examples_seen"] == learned
    labeled = tmp_path / "labeled.csv"
    labeled.write_text("".join(line + "\n" for line in data.read_text().splitlines()
                               if ",," not in line))
    assert_same_models(latest_models(out), latest_models(
        train(tmp_path / "labeled", "--input", labeled, *SERVING)))


def test_a_record_without_a_label_is_a_dead_letter_with_shards(tmp_path):
    """A model over feature shards serves nothing yet: its unlabeled records are refused, each
    with its reason, and the run goes on."""
    data = tmp_path / "mixed.csv"
    served = write_unlabeled_first(data, twins=False)
    sharded = configure([str(data)], algorithm="scinol2", shards=2, id_column="id",
                        model_key_column="segment",
                        feedback_topic="kafka://127.0.0.1:9/feedback")
    spec = replace(sharded.spec, columns=data.read_text().splitlines()[0].split(","))
    blocks, dead = parse_csv(spec, "s", list(enumerate(data.read_bytes().splitlines()[1:])))
    assert len(dead) == len(served) == N - len(blocks)
    assert {d.reason for d in dead} == {"missing label field 'label'"}
    assert not configure([str(data)]).spec.require_label
