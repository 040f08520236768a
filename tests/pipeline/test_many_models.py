"""Many models at once (issue #13): 2,000 model keys in one `unitless train` run keep a bounded
memory, and each key's checkpoint is exactly what the plain learner makes of that key's examples
alone."""
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from unitless.cli.main import main
from unitless.connectors.files import read_file, read_output
from unitless.learner import learn, to_arrow
from unitless.parse.records import ExampleBlock
from unitless.pipelines.config import configure, new_learner
from unitless.store.catalog import latest_checkpoint, read_checkpoint

BITS = 18
KEYS = 2000
FEATURES = [f"f{j}" for j in range(6)]
# the command, reporting its own peak resident memory (KiB) on its last line of stderr
PEAK_RSS = ("import resource, sys\nfrom unitless.cli import main\ncode = main(sys.argv[1:])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
            "sys.exit(code)")


def run_measured(tmp_path, name, path, *extra):
    out = tmp_path / name
    done = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, "train", "--input", str(path), "--id-column", "id",
         "--algorithm", "scinol2", "--bits", str(BITS), "--model-dir", str(out / "models"),
         "--predictions", str(out / "p"), "--dead-letter", str(out / "d"), *extra],
        capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, int(done.stderr.strip().splitlines()[-1]) / 1024  # MiB


def test_two_thousand_models_in_bounded_memory_each_equal_to_its_examples_alone(tmp_path):
    rng = np.random.default_rng(13)
    n = 30 * KEYS
    X = rng.normal(size=(n, len(FEATURES))) * 10.0 ** rng.integers(-4, 5, size=len(FEATURES))
    X[rng.random(X.shape) < 0.3] = 0.0
    y = np.where(X @ rng.normal(size=len(FEATURES)) / 10.0 ** -4 + rng.normal(size=n) > 0, 1, -1)
    keys = rng.permutation(np.arange(n) % KEYS)  # 30 examples per key, keys interleaved
    path = tmp_path / "examples.csv"
    with open(path, "w") as f:
        f.write("id,key,label," + ",".join(FEATURES) + "\n")
        for i in range(n):
            values = ",".join("" if v == 0 else repr(float(v)) for v in X[i])
            f.write(f"e{i},k{keys[i]},{y[i]},{values}\n")

    _, one_model = run_measured(tmp_path, "one", path, "--ignore-columns", "key")
    out, many = run_measured(tmp_path, "many", path, "--model-key-column", "key")
    # ScInOL2 over 2^18 features held 5 float64 vectors per feature before state followed the
    # features carried: 2,000 such models were 20 GiB. Now each adds a few KiB.
    assert many < one_model + KEYS * 128 / 1024, \
        f"2,000 models: peak RSS {many:.0f} MiB, one model {one_model:.0f} MiB"

    # each key alone: the plain learner on the key's examples as the command parsed them
    cfg = configure([str(path)], id_column="id", model_key_column="key", algorithm="scinol2",
                    bits=BITS)
    by_key = {}
    for block, _ in read_file(cfg.inputs[0], cfg.format, cfg.spec):
        for key, part in block.split_by_key():
            by_key.setdefault(key, []).append(part)
    assert len(by_key) == KEYS
    for key, parts in by_key.items():
        state = new_learner(cfg)
        learn(state, ExampleBlock.concat(parts).batch())
        table = read_checkpoint(latest_checkpoint(str(out / "models"), key))
        meta = json.loads(table.schema.metadata[b"unitless"])
        assert meta["examples_seen"] == state.examples_seen == 30
        assert meta["cumulative_loss"] == state.cumulative_loss, key
        assert table.drop_columns(["name"]).equals(to_arrow(state).drop_columns(["name"])), key


def test_key_by_model_gathers_each_keys_examples_once_in_order_within_size(tmp_path):
    """KeyByModel on a real runner: every example handed on once, under its own key, each key's
    blocks at most ``size`` examples and in position order; with one key a block passes as soon
    as it holds ``size``; with a small byte bound the groups are split before the bundle ends."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that

    from unitless.pipelines.keying import key_by_model

    rng = np.random.default_rng(5)
    path = tmp_path / "examples.csv"
    with open(path, "w") as f:
        f.write("id,key,label,a\n")
        for i in range(3000):
            f.write(f"e{i},k{min(int(rng.zipf(1.5)), 300)},{rng.choice([-1, 1])},{i}\n")
    cfg = configure([str(path)], id_column="id", model_key_column="key")
    blocks = [b for b, _ in read_file(str(path), "csv", cfg.spec, 128)]
    assert len(blocks) > 20

    counts = dict(zip(*np.unique(np.concatenate([b.keys.to_numpy(zero_copy_only=False)
                                                 for b in blocks]), return_counts=True)))

    def check(size, split_early):
        def each_key_once_in_order(pairs):
            seen = {}
            for key, block in pairs:
                assert 0 < len(block) <= size
                assert set(block.keys.to_pylist()) == {key}
                seen.setdefault(key, []).append(block.positions)
            got = np.sort(np.concatenate([np.concatenate(p) for p in seen.values()]))
            assert (got == np.concatenate([b.positions for b in blocks])).all()
            for parts in seen.values():  # a key's blocks, as handed on, in position order
                whole = np.concatenate(parts)
                assert (np.diff(whole) > 0).all()
            fewest = sum(-(-n // size) for n in counts.values())  # each key's ceil(n / size)
            assert (len(pairs) > fewest) if split_early else (len(pairs) == fewest)
        return each_key_once_in_order

    for size, gather_bytes in ((50, 256 << 20), (50, 20_000), (1000, 256 << 20),
                               (1000, 20_000)):
        with beam.Pipeline(runner=FnApiRunner()) as p:
            keyed = (p | beam.Create(blocks, reshuffle=False)
                     | key_by_model(size, gather_bytes=gather_bytes))
            assert_that(keyed, check(size, split_early=gather_bytes < 1 << 20))

    # model groups: each block holds examples of its group's model keys only, within ``size``,
    # a group's blocks in position order, every example once
    from unitless.store.groups import group_key

    def by_group(pairs):
        seen = {}
        for group, block in pairs:
            assert 0 < len(block) <= 50
            assert {group_key(k, 4) for k in block.keys.to_pylist()} == {group}
            seen.setdefault(group, []).append(block.positions)
        assert len(seen) > 1 and all((np.diff(np.concatenate(p)) > 0).all()
                                     for p in seen.values())
        got = np.sort(np.concatenate([np.concatenate(p) for p in seen.values()]))
        assert (got == np.concatenate([b.positions for b in blocks])).all()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(blocks, reshuffle=False)
                    | key_by_model(50, model_groups=4), by_group)

    # one key: a block passes on as soon as the group holds ``size`` examples
    from unitless.pipelines.keying import KeyByModel
    one = [ExampleBlock.concat([b]) for b in blocks[:3]]
    for b in one:
        b.keys = pa.array(["only"] * len(b))
    fn = KeyByModel(128)
    fn.start_bundle()
    assert [len(list(fn.process(b, timestamp=0, window=None))) for b in one] == [1, 1, 1]


def test_split_by_key_gathers_blocks_into_each_keys_examples_in_position_order():
    """ExampleBlock.by_key over several blocks (arriving out of order; rows of equal or unequal
    length; held compact, their one row of features once, or whole) gives each key exactly its
    examples of all the blocks, in position order, compact where all blocks are compact with
    one row, and slices of those too; the span of blocks that tile, none where one is missing;
    a compact block pickles back whole. With more than 1,024 keys too (rows written in order).
    Split by groups of keys, each group's examples of all its keys, in position order."""
    import pickle
    rng = np.random.default_rng(11)

    def block(start, n, lengths, shared, keys):
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        indices = (np.tile(np.array([7, 3, 9]), n) if shared
                   else rng.integers(0, 50, indptr[-1]).astype(np.int64))
        return ExampleBlock("s", np.arange(start, start + n, dtype=np.int64),
                            pa.array([f"e{start + i}" for i in range(n)]),
                            pa.array([f"k{rng.integers(keys)}" for _ in range(n)]),
                            rng.normal(size=n), rng.random(n), indptr, indices,
                            rng.normal(size=indptr[-1]), {}, None, rng.random(n),
                            span=(start, start + n - 1))

    columns = ("positions", "labels", "weights", "indptr", "indices", "values", "event_times")
    for trial in range(88):
        many = trial >= 80  # (over 1,024 keys: rows written in order)
        n, count = (3000 if many else 20), int(rng.integers(1, 5))
        kind = trial % 4  # 0: one shared row of features, 1: equal lengths, 2: unequal, 3: none
        lengths = {0: 3, 1: 3, 2: None, 3: 0}[kind]
        blocks = [block(n * i, n, rng.integers(0, 5, n) if lengths is None
                        else np.full(n, lengths), kind == 0,
                        2000 if many else int(rng.integers(1, 6)))
                  for i in range(count)]
        if trial % 4 == 1:
            blocks = blocks[::-1]
        if trial % 5 == 2 and count > 1:
            blocks[-1].span = None
        whole = ExampleBlock.concat(blocks)  # (position order)
        compact = (trial // 4) % 2 == 1
        held = [b.compact() if compact else b for b in blocks]
        if kind == 0:
            assert (held[0].indptr is None) == compact
        got = dict(ExampleBlock.by_key(held))
        assert held == []  # emptied as copied
        keys = whole.keys.to_numpy(zero_copy_only=False)
        assert sorted(got) == sorted(set(keys))
        for key, piece in got.items():
            expected = whole.take(np.flatnonzero(keys == key))
            assert (piece.indptr is None) == (kind == 0 and compact), trial
            half = piece.slice(len(piece) // 2, len(piece)).full()
            piece = piece.full()
            for c in columns:
                assert np.array_equal(getattr(piece, c), getattr(expected, c)), (trial, c)
                assert np.array_equal(getattr(half, c), getattr(piece.slice(
                    len(piece) // 2, len(piece)), c)), (trial, c)
            assert piece.ids.equals(expected.ids) and set(piece.keys.to_pylist()) == {key}
            assert piece.span == whole.span
        # by groups of keys: each group's examples of all its keys, in position order
        parity = np.array([int(k[1:]) % 2 for k in keys])
        grouped = dict(ExampleBlock.by_key([b.compact() if compact else b for b in blocks],
                                           group=lambda ks: [f"g{int(k[1:]) % 2}"
                                                             for k in ks.to_pylist()]))
        assert sorted(grouped) == sorted({f"g{p}" for p in parity})
        for name, piece in grouped.items():
            expected, piece = whole.take(np.flatnonzero(parity == int(name[1:]))), piece.full()
            for c in columns:
                assert np.array_equal(getattr(piece, c), getattr(expected, c)), (trial, c)
            assert piece.keys.equals(expected.keys) and piece.span == whole.span
    compact = block(0, 10, np.full(10, 3), True, 2).compact()
    assert compact.indptr is None and len(compact.indices) == 3
    back = pickle.loads(pickle.dumps(compact))
    assert np.array_equal(back.indptr, np.arange(11) * 3)
    assert np.array_equal(back.indices, np.tile([7, 3, 9], 10))


def test_key_by_model_records_where_each_key_starts_in_a_partition_before_handing_it_on(
        tmp_path):
    """On a real runner, KeyByModel with ``starts`` writes each key's start record in a Kafka
    partition (the position before its first example there) before any piece of that key goes
    on: a step right after it finds the record there for every piece; once per key and
    partition (a later block adds none); none for a file's blocks."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    from unitless.store.starts import read_starts
    from unitless.pipelines.keying import key_by_model

    rng = np.random.default_rng(8)

    def block(source, start, n, restarts):
        keys = [f"k{int(k)}" for k in rng.integers(0, 6, n)]
        return ExampleBlock(source, np.arange(start, start + n, dtype=np.int64),
                            pa.array([None] * n, pa.string()), pa.array(keys), np.ones(n),
                            np.ones(n), np.arange(n + 1, dtype=np.int64),
                            np.zeros(n, dtype=np.int64), np.ones(n), restarts_midway=restarts)

    blocks = [block("t/0", 100, 40, True), block("t/0", 140, 40, True),
              block("t/1", 7, 30, True), block("file.csv", 0, 30, False)]
    root = str(tmp_path / "starts")
    expected = {}
    for b in blocks[:3]:
        for key, p in zip(b.keys.to_pylist(), b.positions):
            expected.setdefault(key, {}).setdefault(b.source, int(p) - 1)

    def recorded_before(pair):
        key, piece = pair
        if piece.restarts_midway:
            assert read_starts(root)[key][piece.source] <= int(piece.positions.min()) - 1
        return key

    with beam.Pipeline(runner=FnApiRunner()) as p:
        keys = (p | beam.Create(blocks, reshuffle=False)
                | key_by_model(10, starts=root) | beam.Map(recorded_before))
        assert_that(keys | beam.Distinct(), equal_to(sorted({k for b in blocks
                                                              for k in b.keys.to_pylist()})))
    assert read_starts(root) == expected
    files = sum(len(files) for _, _, files in os.walk(root))
    assert files == sum(len(v) for v in expected.values())  # once per key and partition
    # with model groups: a file per group per block that brings new keys, not one per key
    root = str(tmp_path / "grouped")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (p | beam.Create(blocks, reshuffle=False)
             | key_by_model(10, starts=root, model_groups=2))
    assert read_starts(root) == expected
    assert sum(len(files) for _, _, files in os.walk(root)) <= 2 * 3


@pytest.mark.parametrize("algorithm", ["nag", "omd_pnorm"])  # (shares the arena; keeps its own)
def test_models_learned_together_equal_a_keyed_step_each_bit_for_bit(tmp_path, algorithm):
    # the same run with 40 model keys in 4 groups, each group's blocks learned in one call
    # (``ModelGroup.learn``), and with a keyed step of its own per model key: every prediction
    # and every model's checkpoint the same, bit for bit (omd_pnorm keeps a learner per model)
    rng = np.random.default_rng(37)
    n, keys = 1200, 40
    X = rng.normal(size=(n, 4)) * 10.0 ** rng.integers(-3, 4, size=4)
    X[rng.random(X.shape) < 0.3] = 0.0
    y = np.where(X @ rng.normal(size=4) > 0, 1, -1)
    path = tmp_path / "examples.csv"
    with open(path, "w") as f:
        f.write("id,key,label,a,b,c,d\n")
        for i in range(n):
            label = "" if i % 17 == 0 else y[i]  # (served, not learned)
            values = ",".join("" if v == 0 else repr(float(v)) for v in X[i])
            f.write(f"e{i},k{rng.integers(keys)},{label},{values}\n")
    runs = {}
    for groups in ("4", "0"):
        out = tmp_path / groups
        assert main(["train", "--input", str(path), "--id-column", "id", "--model-key-column",
                     "key", "--algorithm", algorithm, "--model-groups", groups, "--chunk-size",
                     "64", "--model-dir", str(out / "m"), "--predictions", str(out / "p"),
                     "--dead-letter", str(out / "d")]) == 0
        table = read_output(str(out / "p"))
        runs[groups] = (table.sort_by("id"), out / "m")
    grouped, alone = runs["4"][0], runs["0"][0]
    assert grouped.num_rows == alone.num_rows == n
    for column in ("id", "model_key", "prediction", "loss", "examples_seen", "served"):
        assert grouped.column(column).equals(alone.column(column)), column
    for k in range(keys):
        a, b = (read_checkpoint(latest_checkpoint(str(runs[g][1]), f"k{k}")) for g in ("4", "0"))
        meta_a, meta_b = (json.loads(t.schema.metadata[b"unitless"]) for t in (a, b))
        for field in ("examples_seen", "cumulative_loss", "scalars", "examples_served", "errors"):
            assert meta_a[field] == meta_b[field], (k, field)
        assert a.drop_columns(["name"]).equals(b.drop_columns(["name"])), k
