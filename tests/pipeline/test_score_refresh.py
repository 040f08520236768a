"""Scoring sees new models and new keys: a scoring step takes up a key's newer checkpoint and a
key's first, written by real training runs while it is running, at most every
``refresh_seconds``; it skips a newer checkpoint that is corrupt or of another learner, keeping
the model in use; every score names the checkpoint it used."""
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.commands import train
from tests.helpers.runners import RUNNERS, pipeline
from unitless.beam import Score
from unitless.learner import predict_next, read_metadata
from unitless.parse.csv import parse_csv
from unitless.parse.spec import RecordSpec
from unitless.pipelines.score import MissingModel, ScoringModels
from unitless.store.group_writer import GroupWriter, taken
from unitless.store.groups import group_counts, group_key
from unitless.models.keyed_model import KeyedModel
from unitless.store.catalog import load_latest

HEADER = "id,segment,label,x1,x2"


def scaled_rows(n, keys, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) * [1e-3, 1e3]
    y = np.where(X @ [1e3, -1e-3] > 0, 1, -1)
    return [f"e{seed}-{i},{keys[i % len(keys)]},{y[i]},{float(X[i, 0])!r},{float(X[i, 1])!r}"
            for i in range(n)]


def train_csv(tmp_path, name, lines, *extra):
    """A run over these CSV lines, its models in tmp_path/models, all runs' alike."""
    data = tmp_path / f"{name}.csv"
    data.write_text("\n".join([HEADER, *lines]) + "\n")
    train(tmp_path / name, "--input", data, "--id-column", "id", "--model-key-column", "segment",
          "--model-dir", tmp_path / "models", "--algorithm", "nag", *extra)


def csv_block(lines):
    spec = RecordSpec(label="label", id="id", model_key="segment", bits=18,
                      columns=HEADER.split(","), require_label=False)
    parsed, dead = parse_csv(spec, "s", list(enumerate(line.encode() for line in lines)))
    assert dead == []
    return parsed


def newest(models, key):
    found = load_latest(str(models), key)
    return KeyedModel.from_table(found[1]).state


def test_a_newer_checkpoint_and_a_new_key_are_taken_up_and_a_bad_one_skipped(tmp_path,
                                                                              caplog):
    models = tmp_path / "models"
    train_csv(tmp_path, "first", scaled_rows(300, "a", 1))
    scoring = ScoringModels(str(models), refresh_seconds=0)
    assert scoring.get("a")[1] == "a@300" and scoring.get("b") is None
    # training goes on (a's newer checkpoint) and meets key b (its first)
    train_csv(tmp_path, "more", scaled_rows(400, "ab", 2), "--resume")
    state, used = scoring.get("a")[:2]
    assert used == "a@500"
    probe = csv_block(scaled_rows(5, "a", 3))
    assert np.array_equal(predict_next(state, probe.batch()),
                          predict_next(newest(models, "a"), probe.batch()))
    assert scoring.get("b")[1] == "b@200"
    # a newer checkpoint that is corrupt: skipped with a warning, the model in use kept
    groups, = group_counts(str(models))
    writer = GroupWriter(str(models), groups)
    table = load_latest(str(models), "a")[1]
    meta = read_metadata(table)
    meta["examples_seen"] = 900
    newer = writer.write({group_key("a", groups): [taken("a", table.replace_schema_metadata(
        {b"unitless": json.dumps(meta).encode()}))]})["a"]
    part = Path(newer.rpartition("#")[0])
    part.write_bytes(part.read_bytes()[:200])
    with caplog.at_level(logging.WARNING, logger="unitless"):
        assert scoring.get("a")[1] == "a@500"
    assert part.name in caplog.text
    # a newer one of another learner: skipped with a warning naming both
    other = tmp_path / "other"
    other.mkdir()
    train_csv(other, "other", scaled_rows(1000, "a", 4), "--bits", "12")
    writer.write({group_key("a", groups): [taken("a", load_latest(str(other / "models"), "a")[1])]})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="unitless"):
        assert scoring.get("a")[1] == "a@500"
    assert "is not the one in use" in caplog.text


def test_a_key_is_looked_for_again_only_after_refresh_seconds(tmp_path):
    train_csv(tmp_path, "first", scaled_rows(100, "a", 1))
    scoring = ScoringModels(str(tmp_path / "models"), refresh_seconds=3600)
    missing = MissingModel(str(tmp_path / "models"), refresh_seconds=3600)
    assert scoring.get("b") is None and len(missing(csv_block(scaled_rows(2, "b", 5)))) == 2
    assert scoring.get("a")[1] == "a@100"  # (read when first asked for)
    train_csv(tmp_path, "more", scaled_rows(100, "ab", 2), "--resume")
    # within the hour nothing is looked for again; with no wait, both see the new key
    assert scoring.get("b") is None and scoring.get("a")[1] == "a@100"
    assert len(missing(csv_block(scaled_rows(2, "b", 5)))) == 2
    scoring.refresh_seconds = missing.refresh_seconds = 0
    assert scoring.get("b")[1] == "b@50" and scoring.get("a")[1] == "a@150"
    assert missing(csv_block(scaled_rows(2, "b", 5))) == []


@pytest.mark.parametrize("runner", RUNNERS)
def test_every_score_names_the_checkpoint_it_used(tmp_path, runner):
    train_csv(tmp_path, "first", scaled_rows(300, "ab", 1))
    import apache_beam as beam
    with pipeline(runner) as p:
        scores = (p | beam.Create([csv_block(scaled_rows(40, "ab", 7))])
                  | Score(str(tmp_path / "models"), model_key_column="segment"))
        used = scores | beam.FlatMap(lambda t: zip(t.column("model_key").to_pylist(),
                                                   t.column("checkpoint_id").to_pylist()))
        from apache_beam.testing.util import assert_that, equal_to
        assert_that(used | beam.Distinct(), equal_to([("a", "a@150"), ("b", "b@150")]))


def test_a_key_is_looked_for_when_it_comes_and_many_new_keys_list_the_directory_once(tmp_path):
    """The reader's check of `unitless score` lists a key's group when the key first comes,
    not every key of the directory at the start; a block bringing more new keys than
    LIST_ALL_PAST lists every key once instead."""
    train_csv(tmp_path, "first", scaled_rows(90, "abc", 1))
    missing = MissingModel(str(tmp_path / "models"), refresh_seconds=3600)
    assert missing(csv_block(scaled_rows(4, "a", 5))) == []
    assert missing.known == {"a"} and not missing.listed
    many = MissingModel(str(tmp_path / "models"), refresh_seconds=3600)
    many.LIST_ALL_PAST = 1
    assert len(many(csv_block(scaled_rows(6, "bz", 5)))) == 3  # (z's three)
    assert many.listed and many.known == {"a", "b", "c"}
