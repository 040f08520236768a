"""The public Beam transforms (``unitless.beam``) in the user's own pipelines, with Beam's
TestPipeline and assert_that: records from ``beam.Create`` (dicts and ``beam.Row``s), files
through ``ReadExamples``, scoring, writing; the same predictions as the `unitless` command."""
import json

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to

from unitless.beam import Learn, ReadExamples, Rows, Score, WriteDeadLetters, WritePredictions
from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.store.catalog import latest_checkpoint, read_checkpoint

from tests.helpers.runners import RUNNERS, pipeline


def priced_records(n=300, seed=0):
    """Dicts of two model keys whose features differ in scale by 10^6."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        price, size = rng.normal() * 1e3, rng.normal() * 1e-3
        label = 1 if price / 1e3 - 2 * size / 1e-3 + rng.normal() > 0 else 0
        out.append({"id": f"r{i}", "region": ["eu", "us"][i % 3 == 0], "price": price,
                    "size": size, "colour": ["red", "blue"][i % 2], "label": label})
    return out


def by_key_and_count(rows):
    return {(r["model_key"], r["examples_seen"]): r for r in rows}


def run_cli(tmp_path, rows):
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "cli"
    assert main(["train", "--input", str(path), "--model-key-column", "region", "--id-column",
                 "id", "--algorithm", "scinol2", "--model-dir", str(out / "models"),
                 "--predictions", str(out / "pred"), "--dead-letter", str(out / "dead")]) == 0
    return read_output(str(out / "pred")).to_pylist()


@pytest.mark.parametrize("runner", RUNNERS)
def test_learn_on_dicts_gives_the_commands_predictions(tmp_path, runner):
    rows = priced_records()
    expected = by_key_and_count(run_cli(tmp_path, rows))
    learn = Learn(algorithm="scinol2", model_key_column="region", id_column="id",
                  model_dir=str(tmp_path / "models"), predictions=None, dead_letter=None)
    with pipeline(runner) as p:
        predictions = p | beam.Create(rows) | learn | Rows()

        def same_as_the_command(actual):
            got = by_key_and_count(actual)
            assert set(got) == set(expected)
            for k, row in got.items():
                want = expected[k]
                assert row["id"] == want["id"] and row["label"] == want["label"]
                assert row["prediction"] == pytest.approx(want["prediction"], rel=1e-12, abs=1e-15)
                assert row["loss"] == pytest.approx(want["loss"], rel=1e-12, abs=1e-15)

        assert_that(predictions, same_as_the_command)
    for key, n in (("eu", sum(r["region"] == "eu" for r in rows)),
                   ("us", sum(r["region"] == "us" for r in rows))):
        meta = json.loads(read_checkpoint(latest_checkpoint(str(tmp_path / "models"), key))
                          .schema.metadata[b"unitless"])
        assert meta["examples_seen"] == n


@pytest.mark.parametrize("runner", RUNNERS)
def test_learn_takes_beam_rows_and_refuses_bad_records_to_dead_letters(tmp_path, runner):
    good = [beam.Row(label=1.0 if i % 3 else -1.0, x=float(i % 7) - 3.0) for i in range(50)]
    # a list value; a label that is not a number; and no label: served, not refused
    bad = [{"label": 1.0, "x": [1, 2]}, {"label": "NaN", "x": 2.0}, {"x": 2.0}]
    learn = Learn(algorithm="nag", model_dir=str(tmp_path / "models"), predictions=None,
                  dead_letter=str(tmp_path / "dead"))

    def two_reasons(reasons):
        assert len(reasons) == 2, reasons
        assert any("unsupported value" in r for r in reasons), reasons
        assert any("label 'NaN' is not a number" in r for r in reasons), reasons

    with pipeline(runner) as p:
        rows = (p | "rows" >> beam.Create(good), p | "dicts" >> beam.Create(bad)) | beam.Flatten()
        predictions = rows | learn
        assert_that(predictions | beam.Map(lambda t: (t.num_rows, t.column("served").to_pylist()
                                                     .count(True)))
                    | beam.CombineGlobally(lambda counts: tuple(map(sum, zip(*counts)))),
                    equal_to([(51, 1)]), label="every good row predicted, one served")
        assert_that(learn.dead_letters | Rows() | beam.Map(lambda r: r["reason"]), two_reasons,
                    label="two dead letters")
    dead = read_output(str(tmp_path / "dead")).to_pylist()
    assert len(dead) == 2 and all(isinstance(json.loads(d["raw"]), dict) for d in dead)
    meta = json.loads(read_checkpoint(latest_checkpoint(str(tmp_path / "models"), ""))
                      .schema.metadata[b"unitless"])
    assert meta["examples_seen"] == 50


@pytest.mark.parametrize("runner", RUNNERS)
def test_read_examples_learn_score_and_write_in_one_users_pipeline(tmp_path, runner):
    rows = priced_records(200, seed=1)
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    learn = Learn(algorithm="nag", model_key_column="region", model_dir=str(tmp_path / "m"),
                  predictions=None, dead_letter=None)
    read = ReadExamples(str(path), model_key_column="region", learner=learn,
                        dead_letter=str(tmp_path / "dead"))
    with pipeline(runner) as p:
        predictions = p | read | learn
        predictions | WritePredictions(str(tmp_path / "pred"), output_format="jsonl")
        read.dead_letters | "count dead" >> beam.Map(lambda t: t.num_rows) | \
            "sum dead" >> beam.CombineGlobally(sum) | "check dead" >> beam.Map(
                lambda n: None if n == 1 else (_ for _ in ()).throw(AssertionError(n)))
    written = read_output(str(tmp_path / "pred")).to_pylist()
    assert len(written) == 200
    assert [d["position"] for d in read_output(str(tmp_path / "dead")).to_pylist()] == [201]
    # scoring the user's own records with the models just written: no learning, no label needed
    score = Score(str(tmp_path / "m"), model_key_column="region")
    unlabeled = [{k: v for k, v in r.items() if k != "label"} for r in rows[:20]] + [
        {"region": "asia", "price": 1.0}]
    with pipeline(runner) as p:
        scores = p | beam.Create(unlabeled) | score
        scores | WritePredictions(str(tmp_path / "scores"))
        score.dead_letters | WriteDeadLetters(str(tmp_path / "score_dead"))
    scored = read_output(str(tmp_path / "scores")).to_pylist()
    assert len(scored) == 20
    assert all(s["loss"] is None and s["label"] is None and s["error"] is None for s in scored)
    (no_model,) = read_output(str(tmp_path / "score_dead")).to_pylist()
    assert "no model for key 'asia'" in no_model["reason"]


def test_options_are_checked_when_the_transform_is_made(tmp_path):
    with pytest.raises(ValueError, match="unknown option 'learning_rat'"):
        Learn(learning_rat=0.1)
    with pytest.raises(ValueError, match="--alpha does not apply to nag"):
        Learn(algorithm="nag", alpha=2.0)
    with pytest.raises(ValueError, match="ReadExamples needs inputs"):
        ReadExamples()
    # (a value outside its option's choices, once, from the option table: the command's parser
    # refuses the same for its flags)
    with pytest.raises(ValueError, match="unknown format 'xml'; choose one of: csv, "):
        ReadExamples(str(tmp_path / "a.csv"), format="xml")
    with pytest.raises(ValueError, match="unknown time unit 'h'; choose one of: s, ms"):
        Learn(time_column="t", time_unit="h")


def test_a_bound_on_models_in_memory_changes_nothing_but_decoding(tmp_path):
    """12 model keys, blocks of 8 examples, 2 decoded models kept: the evicted ones are decoded
    from Beam state again, and every prediction and model is the same as with all kept, and as
    with all 12 models in one group of the keyed step (``model_groups=1``). The
    blocks are marked as a Kafka partition's are (``restarts_midway``): every key's model is
    then stored when its first block arrives, and decoded again when the watermark releases
    its blocks, after the other keys' arrivals (a file's blocks touch no model on arrival, and
    the runner may fire a key's timers one after the other, needing no model decoded again)."""
    from apache_beam.metrics.metric import MetricsFilter

    from unitless.parse.records import ExampleBlock
    rows = [dict(r, region=f"k{i % 12}") for i, r in enumerate(priced_records(600))]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = {}
    for kept, groups in ((2, 1024), (64, 1024), (64, 1)):
        out = tmp_path / f"{kept}-{groups}"
        opts = dict(inputs=[str(path)], model_key_column="region", id_column="id",
                    chunk_size=8, model_dir=str(out / "models"), predictions=str(out / "pred"),
                    dead_letter=None, models_in_memory=kept, model_groups=groups)
        p = pipeline("fnapi")
        _ = (p | ReadExamples(**opts)
             | beam.Map(_restarts_midway).with_output_types(ExampleBlock) | Learn(**opts))
        result = p.run()
        result.wait_until_finish()
        decoded = result.metrics().query(MetricsFilter().with_name("models_decoded"))
        predictions = sorted((r["model_key"], r["examples_seen"], r["id"], r["prediction"])
                             for r in read_output(str(out / "pred")).to_pylist())
        runs[kept, groups] = (sum(c.committed or 0 for c in decoded["counters"]), predictions,
                      {k: _state(read_checkpoint(latest_checkpoint(str(out / "models"), k)))
                       for k in {r["region"] for r in rows}})
    (few, *results_few), (many, *results_many) = runs[2, 1024], runs[64, 1024]
    assert few > many  # the bound evicted models, which were decoded again
    assert len(results_few[0]) == len(rows)
    assert results_few == results_many == list(runs[64, 1][1:])  # bit for bit


def _restarts_midway(block):
    block.restarts_midway = True
    return block


def _state(table):
    """A checkpoint's metadata (but when and by which run it was written) and columns."""
    meta = json.loads(table.schema.metadata[b"unitless"])
    return ({k: v for k, v in meta.items() if k not in {"time", "token", "checksum"}},
            {c: table.column(c).to_pylist() for c in table.column_names})
