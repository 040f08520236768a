"""The bare per-key loop: what `unitless train` does for each model key, without Beam.

    python benchmarks/system/bare_keys.py train --input data.csv --predictions P --model-dir M ...

Takes `unitless train`'s own arguments (one file; the options it reads: the record layout,
the model key column, the learner, --chunk-size) and does the work that run does per key in
one plain loop: read and parse the file (refusing what the learner would), gather blocks
and split them by model key as the keying step does (until they hold ``--chunk-size``
examples a key, or 256 MiB), learn each key's examples in order (``KeyedModel``; predictions
written as part files every 262,144), and at the end write each key's checkpoint
(``GroupWriter.write``, one call: a part and a manifest per model group). No Beam: no state,
timers, shuffle or bundles. What it measures is the floor of the product's own per-key work,
which the pipeline adds Beam's per-key costs to (``many_models.py``).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from unitless.cli.main import _config, parse_args  # noqa: E402
from unitless.connectors.files import read_file  # noqa: E402
from unitless.connectors.sinks import open_sink  # noqa: E402
from unitless.parse.records import ExampleBlock  # noqa: E402
from unitless.pipelines.config import learner_check, new_learner  # noqa: E402
from unitless.store.group_writer import GroupWriter, taken  # noqa: E402
from unitless.store.groups import group_key  # noqa: E402
from unitless.models.keyed_model import KeyedModel  # noqa: E402

# ``KeyByModel``'s default and ``Delivery.FLUSH_ROWS``, copied: importing them would import
# Beam into this loop that runs without it
GATHER_BYTES = 256 << 20
FLUSH_ROWS = 1 << 18


def learn_blocks(cfg, blocks, models, sink):
    """Split ``blocks`` by model key and learn each key's examples (``chunk_size`` a call)."""
    for key, piece in ExampleBlock.by_key(blocks):
        model = models.get(key)
        if model is None:
            model = models[key] = KeyedModel(key, new_learner(cfg))
        for part in piece.parts(cfg.chunk_size):
            sink.write(model.learn_block(part.full())[0])
            if sink.rows >= FLUSH_ROWS:
                sink.flush()


def main(argv):
    args, _ = parse_args(argv)
    cfg = _config(args)
    path, = cfg.inputs
    sink = open_sink(cfg.predictions, cfg.output_format, "predictions")
    models, held, keys, examples, nbytes = {}, [], set(), 0, 0
    check = learner_check(cfg)
    for block, _ in read_file(path, cfg.format, cfg.spec, cfg.chunk_size):
        # (as the reading step refuses, io.dead_letters.hand_on)
        block, _ = block.screen(check(block))
        block.raw = None
        keys.update(block.keys.unique().to_pylist())
        examples += len(block)
        block = block.compact()
        held.append(block)
        nbytes += block.nbytes
        # handed on as ``KeyByModel`` does: chunk_size examples for each key held, or its bytes
        if examples >= cfg.chunk_size * len(keys) or nbytes >= GATHER_BYTES:
            learn_blocks(cfg, held, models, sink)
            held, keys, examples, nbytes = [], set(), 0, 0
    if held:
        learn_blocks(cfg, held, models, sink)
    sink.flush()
    checkpoints = {}  # group key -> [(model key, table, metadata)]
    for model in models.values():
        model.mark_checkpoint()
        checkpoints.setdefault(group_key(model.key, cfg.model_groups), []).append(
            taken(model.key, model.to_table()))
    GroupWriter(cfg.model_dir, cfg.model_groups, cfg.keep_checkpoints).write(checkpoints)
    print(f"{sum(m.state.examples_seen for m in models.values())} examples, "
          f"{len(models)} model keys")


if __name__ == "__main__":
    main(sys.argv[1:])
