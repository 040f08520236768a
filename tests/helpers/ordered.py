"""The order tests' helpers: five model keys' examples, the command's and Learn's runs of them."""
import numpy as np

from unitless.beam import Learn
from unitless.cli.main import main
from unitless.connectors.files import read_file, read_output
from unitless.parse.records import ExampleBlock
from unitless.pipelines.config import configure

from tests.helpers.killing import final_models
from tests.helpers.runners import pipeline

KEYS = [f"k{i}" for i in range(5)]


def write_random_key_examples(path, n, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write("id,key,a,b,label\n")
        for i in range(n):
            a, b = rng.normal() * 1e3, rng.normal() * 1e-2
            label = 1 if a / 1e3 + b / 1e-2 + rng.normal() > 0 else -1
            f.write(f"{path.stem}-{i},{KEYS[rng.integers(len(KEYS))]},{a},{b},{label}\n")


def learned(directory):
    """{(model key, examples seen): (id, prediction)} of a run's predictions."""
    return {(r["model_key"], r["examples_seen"]): (r["id"], r["prediction"])
            for r in read_output(str(directory)).to_pylist()}


def command_run(tmp_path, paths, chunk_size):
    """The command over the files in order, a key of its own per model key, under tmp_path/cli:
    its ``learned`` predictions."""
    assert main(["train", "--input", *map(str, paths), "--id-column", "id",
                 "--model-key-column", "key", "--chunk-size", str(chunk_size), "--model-dir",
                 str(tmp_path / "cli" / "models"), "--predictions", str(tmp_path / "cli" / "p"),
                 "--dead-letter", str(tmp_path / "cli" / "d"), "--model-groups", "0"]) == 0
    return learned(tmp_path / "cli" / "p")


def assert_beam_models_are_cli_models(tmp_path):
    """The final models under tmp_path/beam and tmp_path/cli are the same, bit for bit."""
    beam_models = final_models(KEYS, tmp_path / "beam" / "models")
    cli_models = final_models(KEYS, tmp_path / "cli" / "models")
    for key in KEYS:
        assert beam_models[key][0].equals(cli_models[key][0])
        assert beam_models[key][1:] == cli_models[key][1:]


def partition_blocks(path, chunk_size, **options):
    """The file's blocks as a Kafka-like partition gives them: ``restarts_midway``, each with
    its ``span`` of positions."""
    cfg = configure([str(path)], **options)
    blocks = [b for b, _ in read_file(str(path), "csv", cfg.spec, chunk_size)]
    for b in blocks:
        b.raw, b.restarts_midway = None, True
        b.span = (int(b.positions[0]), int(b.positions[-1]))
    return blocks


def stream_run(tmp_path, stream, **options):
    """Learn over a TestStream of ExampleBlocks on Prism, streaming, into tmp_path/beam (model
    keys k0-k3 share one of two groups): the result and its ``learned`` predictions."""
    learn = Learn(model_dir=str(tmp_path / "beam" / "models"),
                  predictions=str(tmp_path / "beam" / "p"), dead_letter=None, model_groups=2,
                  id_column="id", model_key_column="key", **options)
    p = pipeline("prism", streaming=True)
    _ = p | stream.with_output_types(ExampleBlock) | learn
    result = p.run()
    result.wait_until_finish()
    return result, learned(tmp_path / "beam" / "p")
