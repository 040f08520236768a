"""Order by construction: a model learns each source's examples in input order however the runner
delivers its blocks (Beam promises no order after the shuffle; Flink's batch mode reverses and
interleaves them). Blocks fed to Learn shuffled, reversed and from two files interleaved give
the predictions and checkpoints of the command's in-order run, and nothing is skipped."""
import json
import random

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline

from unitless.beam import Learn
from unitless.cli import main
from unitless.connectors.files import read_file, read_output
from unitless.connectors.records import ExampleBlock
from unitless.pipelines.checkpoints import latest_checkpoint, read_checkpoint
from unitless.pipelines.config import configure
from unitless.pipelines.summary import RunCounts, refusal_problem

KEYS = [f"k{i}" for i in range(5)]


def write_examples(path, n, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write("id,key,a,b,label\n")
        for i in range(n):
            a, b = rng.normal() * 1e3, rng.normal() * 1e-2
            label = 1 if a / 1e3 + b / 1e-2 + rng.normal() > 0 else -1
            f.write(f"{path.stem}-{i},{KEYS[rng.integers(len(KEYS))]},{a},{b},{label}\n")


def final_models(models):
    out = {}
    for key in KEYS:
        table = read_checkpoint(latest_checkpoint(models, key))
        meta = json.loads(table.schema.metadata[b"unitless"])
        out[key] = (table.drop_columns(["name"]), meta["examples_seen"], meta["input_positions"])
    return out


@pytest.mark.parametrize("disorder", ["reversed", "shuffled"])
def test_blocks_delivered_out_of_order_are_learned_in_input_order(tmp_path, disorder):
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for seed, path in enumerate(paths):
        write_examples(path, 1500, seed)
    options = dict(id_column="id", model_key_column="key", chunk_size=64)
    # the command: files read in order
    assert main(["train", "--input", *map(str, paths), "--id-column", "id",
                 "--model-key-column", "key", "--chunk-size", "64", "--model-dir",
                 str(tmp_path / "cli" / "models"), "--predictions", str(tmp_path / "cli" / "p"),
                 "--dead-letter", str(tmp_path / "cli" / "d")]) == 0
    expected = {(r["model_key"], r["examples_seen"]): (r["id"], r["prediction"])
                for r in read_output(str(tmp_path / "cli" / "p")).to_pylist()}
    # the same blocks handed to Learn in another order, both files interleaved
    cfg = configure([str(p) for p in paths], **options)
    blocks = [b for p in cfg.inputs for b, _ in read_file(p, "csv", cfg.spec, 64)]
    assert len(blocks) > 40
    if disorder == "reversed":
        blocks.reverse()
    else:
        random.Random(1).shuffle(blocks)
    for b in blocks:
        b.raw = None
    learn = Learn(model_dir=str(tmp_path / "beam" / "models"),
                  predictions=str(tmp_path / "beam" / "p"), dead_letter=None, **options)
    with BeamTestPipeline() as p:
        _ = (p | beam.Create(blocks).with_output_types(ExampleBlock) | learn)
    got = {(r["model_key"], r["examples_seen"]): (r["id"], r["prediction"])
           for r in read_output(str(tmp_path / "beam" / "p")).to_pylist()}
    assert len(got) == len(expected) == 3000
    assert got == expected  # every example, learned in the same order: bit-identical
    beam_models = final_models(str(tmp_path / "beam" / "models"))
    cli_models = final_models(str(tmp_path / "cli" / "models"))
    for key in KEYS:
        assert beam_models[key][0].equals(cli_models[key][0])
        assert beam_models[key][1:] == cli_models[key][1:]


def test_examples_skipped_in_a_run_that_did_not_resume_fail_the_run():
    counts = RunCounts(examples=900, refused=0, seconds=1.0, skipped=100)
    problem = refusal_problem(counts, 0.5, resumed=False)
    assert problem and "skipped as learned before" in problem and "did not resume" in problem
    assert refusal_problem(counts, 0.5, resumed=True) is None
