"""The README's "On Flink" recipe, run as written (`--runner FlinkRunner`, an embedded Flink
with the project's job server, a Flink option of its own): the same predictions and models,
bit for bit, as the README's files recipe on Beam's in-process runner."""
from unitless.connectors.files import read_output
from unitless.learner import read_metadata
from unitless.store.catalog import load_latest

from tests.helpers.readme import commands, run, write_clicks


def _predictions(directory):
    rows = read_output(str(directory)).to_pylist()
    return sorted((r["id"], r["model_key"], r["examples_seen"], r["prediction"], r["loss"])
                  for r in rows)


def test_the_flink_recipe_equals_the_files_recipe(tmp_path, flink_jar):
    n = write_clicks(tmp_path)
    (on_flink,) = commands("On Flink")
    (in_process,) = commands("Your files")
    run(on_flink, tmp_path, timeout=900)
    run(in_process, tmp_path)
    got, want = _predictions(tmp_path / "out" / "flink-predictions"), _predictions(
        tmp_path / "out" / "predictions")
    assert len(got) == n and got == want
    for key in ("c0", "c42", "c49"):
        (_, flink), (_, local) = (load_latest(str(tmp_path / "out" / d), key)
                                  for d in ("flink-models", "models"))
        assert flink.select(["index", "w"]).equals(local.select(["index", "w"]))
        assert read_metadata(flink)["examples_seen"] == read_metadata(local)["examples_seen"]
