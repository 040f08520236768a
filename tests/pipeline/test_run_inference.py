"""Beam ML's RunInference with ``ModelDirectoryHandler``: the predictions ``Score`` makes, for
every model key of a directory, on the FnApiRunner and Prism; a record that cannot be read or
whose key has no model is refused with its reason, not dropped; the model-update side input
moves it to another directory."""
import glob
import os
import threading

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.ml.inference.base import ModelMetadata, RunInference
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers.readme import ROOT, blocks
from tests.helpers.runners import RUNNERS, pipeline
from unitless.beam import Learn, ModelDirectoryHandler, Score, WritePredictions
from unitless.connectors.files import read_output
from unitless.learner import to_arrow
from unitless.pipelines.score import ScoringModels
from unitless.models.keyed_model import KeyedModel
from unitless.store.catalog import latest_checkpoint, load_latest, model_directory_of
from unitless.store.per_key import write_checkpoint


def region_records(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) * [1e-3, 1e4]
    return [{"id": f"r{seed}-{i}", "region": "abc"[i % 3],
             "label": 1 if X[i] @ [1e3, -1e-4] > 0 else -1, "x": float(X[i, 0]),
             "y": float(X[i, 1])} for i in range(n)]


def trained_model_dir(model_dir, n, **options):
    with pipeline("fnapi") as p:
        _ = p | beam.Create(region_records(n, 1)) | Learn(
            algorithm="scinol2", model_dir=str(model_dir), model_key_column="region",
            predictions=None, dead_letter=None, **options)
    return model_dir


def inferred(keyed_result):
    """(id, prediction, checkpoint id, refused) of a (model key, PredictionResult), checking
    what every result holds: its record's key, the inference's fields and nothing else, and
    model_id the checkpoint it came from (None when refused)."""
    key, result = keyed_result
    assert key == result.example.get("region", key)
    assert set(result.inference) == {"prediction", "probability", "checkpoint_id", "refused"}
    refused = result.inference["refused"]
    assert (result.model_id is None) == (refused is not None), result
    if refused is None:
        assert result.model_id.rpartition("#")[0].endswith(".arrow"), result.model_id
    return (result.example["id"], result.inference["prediction"],
            result.inference["checkpoint_id"], refused)


@pytest.mark.parametrize("runner", RUNNERS)
def test_run_inference_with_the_handler_equals_score(tmp_path, runner):
    models = trained_model_dir(tmp_path / "m", 300)
    probe = region_records(60, 2)
    expected = score_rows(models, probe, tmp_path / "scores")
    odd = [("d", {"id": "bad", "x": [1, 2]}), ("z", {"id": "nokey", "x": 1.0}),
           ("a", {"id": "nan", "x": float("nan"), "y": 1.0}),
           ("b", {"id": "big", "label": 1, "x": 1.0, "y": -1e300})]
    with pipeline(runner) as p:
        results = (p | beam.Create([(r["region"], r) for r in probe] + odd)
                   | RunInference(ModelDirectoryHandler(str(models), id_column="id",
                                                        model_key_column="region")))
        rows = results | beam.Map(inferred)
        assert_that(rows | "scored" >> beam.Filter(lambda t: t[3] is None),
                    equal_to(expected), label="as Score")
        assert_that(rows | "refused" >> beam.Filter(lambda t: t[3] is not None)
                    | beam.Map(lambda t: (t[0], t[3].split(" (feature index")[0])),
                    equal_to([("bad", "feature 'x' has unsupported value [1, 2]"),
                              ("nokey", "no model for key 'z'"),
                              ("nan", "feature value nan"),  # (training's reasons)
                              ("big", "feature value -1e+300")]), label="refused")


def score_rows(models, probe, out):
    """What ``Score`` makes of the records: (id, prediction, checkpoint id, None) each."""
    with pipeline("fnapi") as p:
        _ = (p | beam.Create(probe)
             | Score(str(models), model_key_column="region", id_column="id")
             | WritePredictions(str(out), output_format="jsonl"))
    return [(r["id"], r["prediction"], r["checkpoint_id"], None)
            for r in read_output(str(out)).to_pylist()]


def test_the_model_update_side_input_moves_the_handler_to_another_directory(tmp_path):
    first = trained_model_dir(tmp_path / "first", 90)
    second = trained_model_dir(tmp_path / "second", 300)
    probe = region_records(30, 3)
    with pipeline("fnapi") as p:
        update = p | "update" >> beam.Create([ModelMetadata(model_id=str(second),
                                                            model_name="second")])
        results = (p | beam.Create([(r["region"], r) for r in probe])
                   | RunInference(ModelDirectoryHandler(str(first), id_column="id"),
                                  model_metadata_pcoll=update))
        assert_that(results | beam.Map(lambda r: r[1].inference["checkpoint_id"])
                    | beam.Distinct(),
                    equal_to(["a@100", "b@100", "c@100"]))


def unitless_metrics(result):
    """{name: committed (or attempted) value} of the run's metrics in the unitless namespace:
    counters summed, distributions as their max (absent when never updated)."""
    found = result.metrics().query(MetricsFilter().with_namespace("unitless"))
    out = {}
    for c in found["counters"]:
        value = c.committed if c.committed is not None else c.attempted
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + (value or 0)
    for d in found["distributions"]:
        value = d.committed if d.committed is not None else d.attempted
        if value is not None and value.count:
            out[d.key.metric.name] = max(out.get(d.key.metric.name, 0), value.max)
    return out


@pytest.mark.parametrize("runner", RUNNERS)
def test_batching_arguments_reach_beam_and_keyed_results_name_their_checkpoint(tmp_path,
                                                                              runner):
    """max_batch_size goes to BatchElements (it was 'unknown option'); each result keeps its
    model key, as KeyedModelHandler's do; model_id is the checkpoint each key's newest is;
    the unitless metrics count predictions and refusals."""
    models = trained_model_dir(tmp_path / "m", 300)
    handler = ModelDirectoryHandler(str(models), id_column="id", min_batch_size=1,
                                    max_batch_size=2, max_batch_duration_secs=5)
    assert handler.batch_elements_kwargs() == {"min_batch_size": 1, "max_batch_size": 2,
                                               "max_batch_duration_secs": 5}
    probe = region_records(41, 4) + [{"id": "nan", "region": "a", "x": float("inf")}]
    p = pipeline(runner)
    results = (p | beam.Create([(r["region"], r) for r in probe]) | RunInference(handler))
    assert_that(results | beam.Map(lambda kr: (kr[0], kr[1].example["id"], kr[1].model_id)),
                equal_to([(r["region"], r["id"], None if r["id"] == "nan" else
                           latest_checkpoint(str(models), r["region"])) for r in probe]))
    result = p.run()
    result.wait_until_finish()
    metrics = unitless_metrics(result)
    assert metrics["inference_request_batch_size"] <= 2  # (Beam's own, in our namespace)
    assert (metrics["predictions"], metrics["refused"]) == (41, 1)
    # (the checkpoints were written moments before: their age, by the wall clock, is small)
    assert 0 <= metrics["checkpoint_age_seconds"] < 600


def test_models_are_read_when_first_scored_and_at_most_capacity_kept(tmp_path):
    models = str(trained_model_dir(tmp_path / "m", 300))
    scoring = ScoringModels(models, refresh_seconds=3600, capacity=2)
    assert len(scoring.models) == 0  # (none read at the start)
    assert scoring.get("b").checkpoint_id == "b@100" and list(scoring.models) == ["b"]
    for key in "acb":
        assert scoring.get(key).checkpoint == latest_checkpoint(models, key)
    assert list(scoring.models) == ["c", "b"]  # (a, least recently scored, left)
    assert scoring.get("a").checkpoint_id == "a@100" and list(scoring.models) == ["b", "a"]
    # threads sharing it (as RunInference's do) with keys coming and going
    errors, seen = [], []

    def score(n):
        try:
            for i in range(300):
                key = "abc"[(i * (n + 1)) % 3]
                seen.append((key, scoring.get(key).checkpoint_id))
        except Exception as err:  # (reported below)
            errors.append(err)
    threads = [threading.Thread(target=score, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(seen) == 1200
    assert all(checkpoint == f"{key}@100" for key, checkpoint in seen)
    assert len(scoring.models) <= 2


def test_a_file_or_directory_under_a_model_directory_names_it(tmp_path):
    models = str(trained_model_dir(tmp_path / "m", 90))
    manifests = glob.glob(f"{models}/groups/*/*/manifest-*.json")
    assert manifests
    for path in [models, models + "/", manifests[0], os.path.dirname(manifests[0]),
                 latest_checkpoint(models, "a"), f"{models}/groups"]:
        assert model_directory_of(path) == models, path
    # the per-key layout earlier versions wrote
    legacy = str(tmp_path / "legacy")
    state = KeyedModel.from_table(load_latest(models, "a")[1]).state
    file = write_checkpoint(legacy, "a", to_arrow(state), state.examples_seen)
    for path in [legacy, file, os.path.dirname(file)]:
        assert model_directory_of(path) == legacy, path


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_manifest_as_the_model_update_moves_the_handler_to_its_directory(tmp_path, runner):
    """The model-update side input names a manifest file (what WatchFilePattern over
    <dir>/groups/*/*/manifest-*.json gives): the handler scores with that file's directory."""
    first = trained_model_dir(tmp_path / "first", 90)
    second = trained_model_dir(tmp_path / "second", 300)
    manifest = sorted(glob.glob(f"{second}/groups/*/*/manifest-*.json"))[-1]
    probe = region_records(30, 3)
    with pipeline(runner) as p:
        update = p | "update" >> beam.Create([ModelMetadata(model_id=manifest,
                                                            model_name="second")])
        results = (p | beam.Create([(r["region"], r) for r in probe])
                   | RunInference(ModelDirectoryHandler(str(first), id_column="id"),
                                  model_metadata_pcoll=update))
        assert_that(results | beam.Map(lambda r: r[1].inference["checkpoint_id"])
                    | beam.Distinct(), equal_to(["a@100", "b@100", "c@100"]))


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_usage_pages_run_inference_example_runs_and_its_assertion_holds(tmp_path,
                                                                            monkeypatch, runner):
    monkeypatch.chdir(tmp_path)
    code, = [b for b in blocks("python", "In your own Beam pipeline", ROOT / "docs" / "usage.md")
             if "RunInference" in b]
    assert code.count("with beam.Pipeline() as p:") == 2 and "assert_that" in code
    code = code.replace("with beam.Pipeline() as p:", f"with pipeline({runner!r}) as p:")
    exec(compile(code, "docs/usage.md", "exec"), {"__name__": "usage_example",
                                                  "pipeline": pipeline})
    # (its assertion can fail: another checkpoint id is not what it got)
    (tmp_path / "again").mkdir()
    monkeypatch.chdir(tmp_path / "again")
    with pytest.raises(Exception, match="eu@51"):
        exec(compile(code.replace('"eu@50"', '"eu@51"'), "docs/usage.md", "exec"),
             {"__name__": "usage_example", "pipeline": pipeline})
