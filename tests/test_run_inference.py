"""Beam ML's RunInference with ``ModelDirectoryHandler``: the predictions ``Score`` makes, for
every model key of a directory, on the FnApiRunner and Prism; a record that cannot be read or
whose key has no model is refused with its reason, not dropped; the model-update side input
moves it to another directory."""
import apache_beam as beam
import numpy as np
import pytest
from apache_beam.ml.inference.base import ModelMetadata, RunInference
from apache_beam.testing.util import assert_that, equal_to

from tests.runners import RUNNERS, pipeline
from unitless.beam import Learn, ModelDirectoryHandler, Score, WritePredictions
from unitless.connectors.files import read_output


def region_records(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) * [1e-3, 1e4]
    return [{"id": f"r{seed}-{i}", "region": "abc"[i % 3],
             "label": 1 if X[i] @ [1e3, -1e-4] > 0 else -1, "x": float(X[i, 0]),
             "y": float(X[i, 1])} for i in range(n)]


def trained_model_dir(model_dir, n):
    with pipeline("fnapi") as p:
        _ = p | beam.Create(region_records(n, 1)) | Learn(
            algorithm="scinol2", model_dir=str(model_dir), model_key_column="region",
            predictions=None, dead_letter=None)
    return model_dir


def inferred(result):
    return (result.example["id"], result.inference["prediction"],
            result.inference["checkpoint_id"], result.inference["refused"])


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
        assert_that(results | beam.Map(lambda r: r.inference["checkpoint_id"]) | beam.Distinct(),
                    equal_to(["a@100", "b@100", "c@100"]))
