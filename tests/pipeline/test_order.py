"""Order by construction: a model learns each source's examples in input order however the runner
delivers its blocks (Beam promises no order after the shuffle; Flink's batch mode reverses and
interleaves them). Blocks fed to Learn shuffled, reversed and from two files interleaved give
the predictions and checkpoints of the command's in-order run, and nothing is skipped."""
import dataclasses
import random

import apache_beam as beam
import numpy as np
import pytest

from unitless.beam import Learn
from unitless.connectors.files import read_file
from unitless.parse.records import ExampleBlock
from unitless.pipelines.accounting import Tally
from unitless.pipelines.config import configure
from unitless.store.catalog import checkpoint_history

from tests.helpers.ordered import (KEYS, assert_beam_models_are_cli_models, command_run, learned,
                                   partition_blocks, stream_run, write_random_key_examples)
from tests.helpers.runners import RUNNERS, pipeline


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("disorder", ["reversed", "shuffled"])
def test_blocks_delivered_out_of_order_are_learned_in_input_order(tmp_path, disorder, runner):
    """Two files' blocks handed to Learn reversed or shuffled: every model learns its examples
    in input order, bit for bit as the command reading the files in order. In this file's
    tests the command keeps each model key a key of its own (``--model-groups 0``) and Learn
    puts four of the five in one group (``model_groups=2``): the same results either way."""
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for seed, path in enumerate(paths):
        write_random_key_examples(path, 1500, seed)
    options = dict(id_column="id", model_key_column="key", chunk_size=64)
    expected = command_run(tmp_path, paths, 64)  # the command: files read in order
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
    learn = Learn(model_dir=str(tmp_path / "beam" / "models"),  # (k0-k3 share a group)
                  predictions=str(tmp_path / "beam" / "p"), dead_letter=None, model_groups=2,
                  **options)
    with pipeline(runner) as p:
        _ = (p | beam.Create(blocks).with_output_types(ExampleBlock) | learn)
    got = learned(tmp_path / "beam" / "p")
    assert len(got) == len(expected) == 3000
    assert got == expected  # every example, learned in the same order: bit-identical
    assert_beam_models_are_cli_models(tmp_path)


@pytest.mark.parametrize("disorder", ["none", "reversed", "shuffled"])
def test_a_file_read_whole_is_learned_as_it_arrives_when_in_order(tmp_path, disorder):
    """One file's blocks, each with the span of lines it was read from (as ``ReadFiles`` gives
    them when a run reads one file): delivered in order, models learn them as they arrive
    (counted), nothing waiting for the end of the input; delivered reversed or shuffled, those
    out of order wait. Either way: the command's predictions and models, bit for bit."""
    from apache_beam.metrics.metric import MetricsFilter

    path = tmp_path / "a.csv"
    write_random_key_examples(path, 1500, 3)
    options = dict(id_column="id", model_key_column="key", chunk_size=64)
    expected = command_run(tmp_path, [path], 64)
    cfg = configure([str(path)], **options)
    blocks, start = [], 0
    for b, _ in read_file(str(path), "csv", cfg.spec, 64):
        b.raw, b.span = None, (start, int(b.positions[-1]))
        start = b.span[1] + 1
        blocks.append(b)
    if disorder == "reversed":
        blocks.reverse()
    elif disorder == "shuffled":
        random.Random(2).shuffle(blocks)
    learn = Learn(model_dir=str(tmp_path / "beam" / "models"),  # (k0-k3 share a group)
                  predictions=str(tmp_path / "beam" / "p"), dead_letter=None, model_groups=2,
                  **options)
    p = pipeline("fnapi")
    _ = p | beam.Create(blocks).with_output_types(ExampleBlock) | learn
    result = p.run()
    result.wait_until_finish()
    assert len(expected) == 1500 and learned(tmp_path / "beam" / "p") == expected
    assert_beam_models_are_cli_models(tmp_path)
    on_arrival = result.metrics().query(MetricsFilter().with_name("blocks_learned_on_arrival"))
    learned_on_arrival = sum(c.committed or 0 for c in on_arrival["counters"])
    if disorder == "none":
        assert learned_on_arrival > 0


def test_examples_skipped_in_a_run_that_did_not_resume_fail_the_run():
    counts = Tally(read=1000, learned=900, replayed=100, in_models=900)
    problem = counts.problem(resumed=False)
    assert problem and "skipped as learned before" in problem and "did not resume" in problem
    assert counts.problem(resumed=True) is None


@pytest.mark.prism
def test_a_partition_block_that_continues_a_model_is_learned_on_arrival_in_order(tmp_path):
    """Streaming (Prism, TestStream): blocks of a Kafka-like partition (``restarts_midway``, each
    with its ``span`` of offsets) arrive with the watermark behind them, one of them before the
    block it follows. Those that continue where their model's learning ends are learned as they
    arrive (counted), the others wait for the watermark: every example learned once, in offset
    order, bit for bit as the command learns the file in order."""
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue
    from apache_beam.utils.timestamp import Timestamp
    path = tmp_path / "p.csv"
    write_random_key_examples(path, 300, 7)
    expected = command_run(tmp_path, [path], 25)
    blocks = partition_blocks(path, 25, id_column="id", model_key_column="key")
    assert len(blocks) == 12

    def add(i):
        return TimestampedValue(blocks[i], Timestamp(i + 1))
    # 3 arrives before 2 (each watermark step lets the runner deliver what came before it):
    # 3 waits, 2 continues 1, 4 follows 3 (waiting), the watermark then releases 3 and 4
    stream = (TestStream().add_elements([add(0)]).advance_watermark_to(2)
              .add_elements([add(1)]).advance_watermark_to(2.5)
              .add_elements([add(3)]).advance_watermark_to(2.6)
              .add_elements([add(2)]).add_elements([add(4)]).advance_watermark_to(6))
    for i in range(5, 12):
        stream = stream.add_elements([add(i)])
    stream = stream.advance_watermark_to_infinity()
    result, got = stream_run(tmp_path, stream, chunk_size=25, checkpoint_every=20,
                             keep_checkpoints=1000)
    assert len(got) == len(expected) == 300
    assert got == expected  # every example once, in offset order: bit-identical
    on_arrival = result.metrics().query(MetricsFilter().with_name("blocks_learned_on_arrival"))
    assert sum(c.committed or 0 for c in on_arrival["counters"]) > 0
    # a checkpoint taken while the watermark trailed what its model learned on arrival names an
    # earlier restart position (another key's first examples there may not be recorded yet);
    # once the watermark passed everything, where it learned to
    source = blocks[0].source
    for key in KEYS:
        metas = [meta for _, meta in checkpoint_history(str(tmp_path / "beam" / "models"), key)]
        assert all(m["restart_positions"][source] <= m["input_positions"][source]
                   for m in metas)
        assert any(m["restart_positions"][source] < m["input_positions"][source] for m in metas)
        assert metas[-1]["restart_positions"] == metas[-1]["input_positions"]


def test_a_large_waiting_block_waits_in_parts_each_a_state_value_of_its_own(tmp_path,
                                                                           monkeypatch):
    """A block whose columns outgrow ``WAITING_COLUMNS_BYTES`` waits as its consecutive parts
    of about that size, each a state value with its own header (so no value grows with a
    reader's block); handed on in order they are the block again, its span tiled."""
    from unitless.pipelines import ordering
    path = tmp_path / "a.csv"
    write_random_key_examples(path, 3000, 0)
    cfg = configure([str(path)], id_column="id", model_key_column="key")
    (block, _), = read_file(cfg.inputs[0], "csv", cfg.spec, 10_000)
    block.span = (0, int(block.positions.max()))  # (as a file read whole in one block)
    block.names = block.names.merged({1 << 40: "in no row"})
    monkeypatch.setattr(ordering, "WAITING_COLUMNS_BYTES", block.nbytes // 5)
    header = (7, block.source, int(block.positions.min()), int(block.positions.max()))
    entries = ordering.waiting_entries(header, block)
    assert len(entries) >= 5
    headers = [ordering.waiting_header(e) for e in entries]
    parts = [ordering.waiting_block(e) for e in entries]
    assert all(p.nbytes <= 1.05 * (block.nbytes // 5) for p in parts)  # (rows vary)
    assert [h[:2] for h in headers] == [(7, block.source)] * len(entries)
    assert [h[2:] for h in headers] == [(int(p.positions[0]), int(p.positions[-1]))
                                        for p in parts]
    whole, again = block.full(), ExampleBlock.concat(parts).full()
    assert again.span == block.span
    for column in ("positions", "labels", "weights", "indptr", "indices", "values"):
        assert (getattr(again, column) == getattr(whole, column)).all()
    assert again.ids.equals(block.ids) and again.keys.equals(block.keys)
    for part in parts:  # (each with the names of the features its rows use)
        assert set(part.names) == set(np.unique(part.full().indices).tolist())
    # the user's own records (no source, no positions): their parts keep the block's header,
    # so that they are learned in the order they came, one after another
    user = ordering.waiting_entries((7, "", -1, -1), dataclasses.replace(block, source=None))
    assert [ordering.waiting_header(e) for e in user] == [(7, "", -1, -1)] * len(entries)
    assert [ordering.waiting_block(e).positions[0] for e in user] == [
        p.positions[0] for p in parts]


def test_blocks_that_wait_in_parts_are_learned_in_input_order(tmp_path, monkeypatch):
    """As ``test_blocks_delivered_out_of_order_are_learned_in_input_order`` (shuffled, on the
    FnApiRunner, which runs the step in this process) with every waiting block split into
    parts of about 1 KiB of columns (``ordering.waiting_entries``): the same predictions, bit
    for bit, and the command's models."""
    from unitless.pipelines import ordering
    split = []
    entries = ordering.waiting_entries

    def counted(header, block):
        out = entries(header, block)
        split.append(len(out))
        return out
    monkeypatch.setattr(ordering, "WAITING_COLUMNS_BYTES", 1 << 10)
    monkeypatch.setattr(ordering, "waiting_entries", counted)
    test_blocks_delivered_out_of_order_are_learned_in_input_order(tmp_path, "shuffled", "fnapi")
    assert max(split) > 2


def test_each_handler_has_what_in_order_asks_of_it(tmp_path):
    """``InOrder``'s handlers against the contract written as Protocols (order_handler.py):
    the learning step has every member, the shard sequencer the ones it must have and no
    timers."""
    from unitless.pipelines.order_handler import (ArrivingHandler, ExpiringHandler, IdleHandler,
                                                  OrderHandler, ReleasingHandler)
    from unitless.pipelines.rounds import CutRounds
    from unitless.pipelines.train import LearnBlocks
    cfg = configure(model_dir=str(tmp_path / "models"), predictions=None, dead_letter=None)
    learning, sequencer = LearnBlocks(cfg), CutRounds(cfg)
    kinds = (OrderHandler, ArrivingHandler, ReleasingHandler, IdleHandler, ExpiringHandler)
    assert [isinstance(learning, kind) for kind in kinds] == [True] * 5
    assert [isinstance(sequencer, kind) for kind in kinds] == [True] + [False] * 4
