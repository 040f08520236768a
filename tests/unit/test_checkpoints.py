"""Checkpoints against hostile model keys and damaged files, through real files on disk."""
import itertools
import json
import logging
import os
import random
import struct
import subprocess
import threading

import numpy as np
import pyarrow as pa
import pytest

from unitless.cli.main import main
from unitless.connectors import storage
from unitless.learner import from_arrow, new_state, read_metadata
from unitless.learner.arrow_form import TableRows
from unitless.learner.state import METADATA_KEY
from unitless.store.checkpoint_file import seal, table_to_bytes
from unitless.store.per_key import (checkpoint_name, key_dir, key_dir_name, latest_checkpoint,
                                    load_latest, model_keys, read_checkpoint, write_checkpoint,
                                    write_checkpoints)
from unitless.reports.inspect import summary
from unitless.store import catalog as stored
from unitless.models.keyed_model import KeyedModel
from unitless.store.ownership import OWNER
from unitless.store.resume import resume_offsets

from tests.helpers.states import trained_state

HOSTILE_KEYS = ["..", ".", "", "_default", "/", "a/b", "x" * 10_000, "€" * 30]
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-%ABCDEF")


def model_table(key, algorithm="nag", n=60, seed=0):
    return KeyedModel(key, trained_state(algorithm, n, seed=seed)).to_table()


def examples_in(path):
    return json.loads(read_checkpoint(path).schema.metadata[METADATA_KEY])["examples_seen"]


def snapshot(root, skip):
    """{relative path: content (files) or None (directories)} under root, except under skip."""
    out = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(directory, d) != skip]
        for d in dirs:
            out[os.path.relpath(os.path.join(directory, d), root)] = None
        for f in files:
            with open(os.path.join(directory, f), "rb") as fh:
                out[os.path.relpath(os.path.join(directory, f), root)] = fh.read()
    return out


@pytest.fixture
def box(tmp_path):
    """(parent, model_dir): a model directory inside a parent holding decoys that look like
    checkpoints, which no key may touch."""
    parent = tmp_path / "parent"
    models = parent / "models"
    models.mkdir(parents=True)
    decoy = table_to_bytes(seal(model_table("decoy"), "decoy"))
    for name in ("ckpt-000000000001.arrow", "ckpt-000000000002.arrow"):
        (parent / name).write_bytes(decoy)
    (parent / "latest").write_text("ckpt-000000000002.arrow")
    (tmp_path / "ckpt-000000000001.arrow").write_bytes(decoy)
    return tmp_path, str(models)


# --- key directories -----------------------------------------------------------------------------

@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=lambda k: repr(k[:12]) + f"[{len(k)}]")
def test_a_hostile_key_stays_in_its_own_directory_and_round_trips(box, key):
    outside, models = box
    before = snapshot(str(outside), models)
    paths = [write_checkpoint(models, key, model_table(key, n=n), n, keep=1) for n in (10, 20, 30)]
    directory = key_dir(models, key)
    name = os.path.basename(directory)
    assert os.path.dirname(os.path.realpath(directory)) == os.path.realpath(models)
    assert name not in (".", "..") and set(name) <= NAME_CHARS and len(name) <= 131
    assert os.listdir(models) == [name]
    assert sorted(os.listdir(directory)) == ["ckpt-000000000030.arrow", "latest"]  # keep=1
    assert latest_checkpoint(models, key) == paths[-1]
    assert model_keys(models) == [key]
    path, table = load_latest(models, key)
    assert path == paths[-1] and KeyedModel.from_table(table).key == key
    assert examples_in(path) == 30
    assert snapshot(str(outside), models) == before  # nothing created, changed or deleted


def test_all_hostile_keys_side_by_side_get_distinct_directories(box):
    outside, models = box
    before = snapshot(str(outside), models)
    keys = HOSTILE_KEYS + ["A", "a", "%41", "k-", "h-"]
    for i, key in enumerate(keys):
        write_checkpoint(models, key, model_table(key, n=10 + i), 10 + i, keep=1)
    names = [key_dir_name(k) for k in keys]
    assert len({n.lower() for n in names}) == len(keys)  # distinct even without case
    assert sorted(os.listdir(models)) == sorted(names)
    assert model_keys(models) == sorted(keys)
    for i, key in enumerate(keys):
        path, table = load_latest(models, key)
        assert KeyedModel.from_table(table).key == key and examples_in(path) == 10 + i
    assert key_dir_name("") != key_dir_name("_default")
    assert snapshot(str(outside), models) == before


def test_directory_names_are_one_to_one_ascii_and_short():
    rng = random.Random(7)
    alphabet = "aA._-/%~€\\ \x00\n" + "".join(chr(c) for c in range(0x20, 0x7f))
    keys = {"", "_default", ".", ".."}
    for _ in range(3000):
        length = rng.choice([0, 1, 2, 5, 30, 33, 34, 99, 100, 101, 300])
        keys.add("".join(rng.choice(alphabet) for _ in range(length)))
    keys |= {"x" * n for n in range(95, 106)} | {"€" * n for n in range(30, 40)}
    keys |= {"\udc80", "\U0001f600" * 100}
    names = {}
    for key in keys:
        name = key_dir_name(key)
        assert name.isascii() and set(name) <= NAME_CHARS and 2 <= len(name) <= 131, (key, name)
        assert name not in (".", "..") and name.startswith(("k-", "h-"))
        assert names.setdefault(name.lower(), key) == key, "two keys share a directory"


def test_checkpoint_names_are_twelve_digits():
    assert checkpoint_name(0) == "ckpt-000000000000.arrow"
    for bad in (-1, 10 ** 12, True):
        with pytest.raises(ValueError):
            checkpoint_name(bad)


def test_model_keys_reads_keys_from_checkpoints_and_ignores_everything_else(tmp_path, caplog):
    models = str(tmp_path)
    write_checkpoint(models, "a", model_table("a"), 60)
    write_checkpoint(models, "b/c", model_table("b/c"), 60)
    os.mkdir(tmp_path / "not-a-model")
    os.mkdir(tmp_path / "k-empty")
    (tmp_path / "k-file").write_text("x")
    (tmp_path / "k-garbage").mkdir()
    (tmp_path / "k-garbage" / "ckpt-000000000001.arrow").write_bytes(b"not arrow")
    os.symlink(key_dir(models, "a"), tmp_path / "k-link")
    # a copied (or renamed) key directory: its name is not the key its checkpoints hold
    os.mkdir(tmp_path / "k-zz")
    os.link(latest_checkpoint(models, "a"), tmp_path / "k-zz" / "ckpt-000000000060.arrow")
    with caplog.at_level(logging.WARNING, logger="unitless"):
        assert model_keys(models) == ["a", "b/c"]
    assert any("k-zz" in r.getMessage() for r in caplog.records)
    assert model_keys(str(tmp_path / "missing")) == []
    # reading a directory uses the directory itself, whatever its name
    assert KeyedModel.from_table(read_checkpoint(str(tmp_path / "k-zz"))).key == "a"
    assert summary(str(tmp_path / "k-zz"))["model_key"] == "a"


def test_a_checkpoint_of_another_key_is_not_loaded_for_this_key(tmp_path, caplog):
    models = str(tmp_path)
    write_checkpoint(models, "a", model_table("a"), 60)
    os.makedirs(key_dir(models, "b"))
    os.link(latest_checkpoint(models, "a"), os.path.join(key_dir(models, "b"),
                                                          "ckpt-000000000060.arrow"))
    with caplog.at_level(logging.WARNING, logger="unitless"):
        assert latest_checkpoint(models, "b") is None
    assert "holds model 'a', not 'b'" in caplog.text
    with pytest.raises(ValueError, match="cannot be written as model 'b'"):
        write_checkpoint(models, "b", model_table("a"), 70)


# --- the latest pointer --------------------------------------------------------------------------

@pytest.mark.parametrize("content", [
    "../../etc/passwd", "/etc/passwd", "../outside/ckpt-000000000099.arrow", "OUTSIDE",
    "ckpt-000000000020.arrow/../../outside/ckpt-000000000099.arrow", "ckpt-99.arrow",
    "ckpt-000000000050.arrow", "\xff\xfe", ""])
def test_latest_may_only_name_a_checkpoint_file_of_its_directory(tmp_path, caplog, content):
    models = tmp_path / "models"
    outside = tmp_path / "outside"
    outside.mkdir()
    for n in (10, 20):
        write_checkpoint(str(models), "k", model_table("k", n=n), n)
    # a valid checkpoint of the same key, with more examples, outside the key's directory
    planted = outside / "ckpt-000000000099.arrow"
    planted.write_bytes(table_to_bytes(seal(model_table("k", n=99), "k")))
    directory = key_dir(str(models), "k")
    content = content.replace("OUTSIDE", str(planted))
    with open(os.path.join(directory, "latest"), "wb") as f:
        f.write(content.encode("latin-1"))
    with caplog.at_level(logging.WARNING, logger="unitless"):
        path = latest_checkpoint(str(models), "k")
    assert path == os.path.join(directory, "ckpt-000000000020.arrow")
    assert [r.name for r in caplog.records] == ["unitless"]
    assert os.path.join(directory, "latest") in caplog.text
    # and a writer repairs it
    write_checkpoint(str(models), "k", model_table("k", n=30), 30)
    with open(os.path.join(directory, "latest")) as f:
        assert f.read() == "ckpt-000000000030.arrow"


def test_latest_is_followed_when_it_names_an_older_file_exactly(tmp_path, caplog):
    models = str(tmp_path)
    two_checkpoints(models)
    directory = key_dir(models, "k")
    pointer = os.path.join(directory, "latest")
    for content, expected in [("ckpt-000000000010.arrow", 10), ("ckpt-000000000010.arrow\n", 10),
                              (" ckpt-000000000010.arrow", 20), ("ckpt-000000000010.arrow ", 20),
                              ("ckpt-000000000010.arrow\nx", 20)]:
        with open(pointer, "w") as f:
            f.write(content)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="unitless"):
            assert examples_in(latest_checkpoint(models, "k")) == expected, content
        assert len(caplog.records) == (expected == 20)


def test_latest_that_is_a_directory_or_a_fifo_is_ignored(tmp_path, caplog):
    models = str(tmp_path)
    write_checkpoint(models, "k", model_table("k"), 60)
    directory = key_dir(models, "k")
    pointer = os.path.join(directory, "latest")
    os.remove(pointer)
    for make in (os.mkfifo, os.mkdir):  # opening a FIFO would block for ever
        make(pointer)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="unitless"):
            assert latest_checkpoint(models, "k") == os.path.join(directory,
                                                                  "ckpt-000000000060.arrow")
        assert "not a regular file" in caplog.text
        (os.remove if make is os.mkfifo else os.rmdir)(pointer)


# --- damaged files -------------------------------------------------------------------------------

def two_checkpoints(models, key="k"):
    old = write_checkpoint(models, key, model_table(key, n=10), 10)
    new = write_checkpoint(models, key, model_table(key, n=20, seed=1), 20)
    return old, new


def test_a_truncated_newest_checkpoint_falls_back_to_the_older_one(tmp_path, caplog):
    models = str(tmp_path)
    old, new = two_checkpoints(models)
    size = os.path.getsize(new)
    with open(new, "r+b") as f:
        f.truncate(size // 2)
    with caplog.at_level(logging.WARNING, logger="unitless"):
        found = load_latest(models, "k")
    assert found[0] == old and examples_in(old) == 10
    assert found[1].equals(read_checkpoint(old))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and new in warnings[0] and "not a readable Arrow file" in warnings[0]
    with pytest.raises(ValueError, match=r"invalid checkpoint .*ckpt-000000000020\.arrow: it is not "
                                         r"a readable Arrow file"):
        read_checkpoint(new)
    assert examples_in(os.path.dirname(new)) == 10  # the model directory: its newest valid one
    assert model_keys(models) == ["k"]


@pytest.mark.parametrize("damage", ["empty", "not arrow", "every file"])
def test_unreadable_checkpoints(tmp_path, caplog, damage):
    models = str(tmp_path)
    old, new = two_checkpoints(models)
    targets = [old, new] if damage == "every file" else [new]
    for path in targets:
        with open(path, "wb") as f:
            f.write(b"" if damage == "empty" else b"PAR1 this is not an Arrow file" * 10)
    with caplog.at_level(logging.WARNING, logger="unitless"):
        path = latest_checkpoint(models, "k")
    assert path == (None if damage == "every file" else old)
    assert len(caplog.records) == len(targets)
    if damage == "every file":
        with pytest.raises(FileNotFoundError, match="holds no valid checkpoint"):
            read_checkpoint(key_dir(models, "k"))
        assert resume_offsets(models, "topic") == {}


def test_a_flipped_bit_in_a_weight_is_detected_and_falls_back(tmp_path, caplog):
    models = str(tmp_path)
    old, new = two_checkpoints(models)
    weights = read_checkpoint(new).column("w").to_pylist()
    weight = next(w for w in weights if w != 0)
    data = bytearray(open(new, "rb").read())
    packed = struct.pack("<d", weight)
    assert data.count(packed) == 1
    data[data.index(packed) + 7] ^= 0x10  # exponent bit 8: the weight is scaled by 2^±256
    with open(new, "wb") as f:
        f.write(bytes(data))
    damaged = pa.ipc.open_file(new).read_all()  # still a readable Arrow file ...
    changed = set(damaged.column("w").to_pylist()) - set(weights)
    assert len(changed) == 1 and np.isfinite(list(changed)[0])  # ... with one finite weight off
    with caplog.at_level(logging.WARNING, logger="unitless"):
        assert latest_checkpoint(models, "k") == old
    assert "checksum does not match" in caplog.text and new in caplog.text
    with pytest.raises(ValueError, match="checksum does not match"):
        read_checkpoint(new)


def test_a_changed_metadata_value_is_detected(tmp_path):
    models = str(tmp_path)
    old, new = two_checkpoints(models)
    data = open(new, "rb").read()
    assert data.count(b'"examples_seen":20') == 2  # the schema is stored twice
    with open(new, "wb") as f:
        f.write(data.replace(b'"examples_seen":20', b'"examples_seen":30'))
    with pytest.raises(ValueError, match="checksum does not match"):
        read_checkpoint(new)
    assert latest_checkpoint(models, "k") == old


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("column", ["w", "s"])
def test_a_non_finite_state_value_with_a_valid_checksum_is_refused(tmp_path, caplog, bad, column):
    models = str(tmp_path)
    old = write_checkpoint(models, "k", model_table("k", n=10), 10)
    table = model_table("k", n=20)
    values = table.column(column).to_numpy().copy()
    values[0] = bad
    table = table.set_column(table.column_names.index(column), column, pa.array(values))
    new = write_checkpoint(models, "k", table, 20)  # the writer checks nothing
    with pytest.raises(ValueError, match=f"invalid checkpoint .*: model column '{column}' holds "
                                         f"{bad}, not finite"):
        read_checkpoint(new)
    with caplog.at_level(logging.WARNING, logger="unitless"):
        assert latest_checkpoint(models, "k") == old
    assert "not finite" in caplog.text


def test_a_checkpoint_without_a_checksum_is_refused(tmp_path, caplog):
    models = str(tmp_path)
    old = write_checkpoint(models, "k", model_table("k", n=10), 10)
    unsealed = os.path.join(key_dir(models, "k"), "ckpt-000000000020.arrow")
    with open(unsealed, "wb") as f:
        f.write(table_to_bytes(model_table("k", n=20)))
    with pytest.raises(ValueError, match="it has no checksum"):
        read_checkpoint(unsealed)
    with caplog.at_level(logging.WARNING, logger="unitless"):
        assert latest_checkpoint(models, "k") == old


def test_metadata_with_a_wrong_dimension_gives_a_clear_error(tmp_path):
    models = str(tmp_path)
    table = model_table("k")
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    meta["dim"] = 3  # the table has feature indices up to 5
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})
    with pytest.raises(ValueError, match=r"model column 'index' holds \d, outside 0..2"):
        from_arrow(table)
    path = write_checkpoint(models, "k", table, 60)  # sealed: the checksum matches
    with pytest.raises(ValueError, match=r"invalid checkpoint .*: model column 'index' holds "):
        read_checkpoint(path)
    assert latest_checkpoint(models, "k") is None


# --- from_arrow refuses what to_arrow could not have written -------------------------------------

def with_meta(table, **changes):
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    for name, value in changes.items():
        if value is DELETE:
            del meta[name]
        else:
            meta[name] = value
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})


DELETE = object()


def replace_column(table, name, array):
    return table.set_column(table.column_names.index(name), name, array)


def kotlowski2_table():
    return KeyedModel("k", trained_state("kotlowski2")).to_table()


BAD_TABLES = {
    "dim 0": (lambda t: with_meta(t, dim=0), "'dim' is 0, outside 1.."),
    "dim negative": (lambda t: with_meta(t, dim=-6), "'dim' is -6, outside 1.."),
    "dim a string": (lambda t: with_meta(t, dim="6"), "'dim' is '6', not an integer"),
    "dim a float": (lambda t: with_meta(t, dim=6.5), "'dim' is 6.5, not an integer"),
    "dim huge": (lambda t: with_meta(t, dim=1 << 40), "'dim' is 1099511627776, outside"),
    "no dim": (lambda t: with_meta(t, dim=DELETE), "'dim' is None, not an integer"),
    "no classes": (lambda t: with_meta(t, n_classes=0), "'n_classes' is 0, outside 1.."),
    "bias index past dim": (lambda t: with_meta(t, bias_index=6), "'bias_index' is 6, outside -1..5"),
    "bias index below -1": (lambda t: with_meta(t, bias_index=-2), "'bias_index' is -2"),
    "negative examples": (lambda t: with_meta(t, examples_seen=-1), "'examples_seen' is -1"),
    "nan loss": (lambda t: with_meta(t, cumulative_loss=float("nan")), "cumulative_loss is nan"),
    "unknown algorithm": (lambda t: with_meta(t, algorithm="nope"), "unknown algorithm 'nope'"),
    "unknown loss": (lambda t: with_meta(t, loss="nope"), "unknown loss 'nope'"),
    "algorithm not a string": (lambda t: with_meta(t, algorithm=["nag"]), "not a string"),
    "missing hyperparameter": (lambda t: with_meta(t, hyperparameters={}),
                               "nag takes hyperparameters ['learning_rate']"),
    "extra hyperparameter": (lambda t: with_meta(t, hyperparameters={"learning_rate": 0.5,
                                                                     "x": 1.0}), "the model has"),
    "nan hyperparameter": (lambda t: with_meta(t, hyperparameters={"learning_rate": float("nan")}),
                           "hyperparameter 'learning_rate' is nan"),
    "scalar list too short": (lambda t: with_meta(t, scalars={"t": [], "N": [1.0]}),
                              "scalar 't' is not a list of 1 values"),
    "scalar missing": (lambda t: with_meta(t, scalars={"t": [1.0]}), "scalar 'N' is not a list"),
    "scalar infinite": (lambda t: with_meta(t, scalars={"t": [1.0], "N": [float("inf")]}),
                        "scalar 'N' is inf, not finite"),
    "metadata not an object": (lambda t: t.replace_schema_metadata({METADATA_KEY: b"[1, 2]"}),
                               "not a JSON object"),
    "metadata not JSON": (lambda t: t.replace_schema_metadata({METADATA_KEY: b"{nope"}), ""),
    "no metadata": (lambda t: t.replace_schema_metadata({}), "no 'unitless' metadata"),
    "schema version": (lambda t: with_meta(t, schema_version=3), "schema version 3"),
    "version-1 snag": (lambda t: with_meta(model_table("k", "snag"), schema_version=1),
                       "this snag model was written by an earlier unitless"),
    "index past dim": (lambda t: replace_column(t, "index", pa.array(
        [7] + t.column("index").to_pylist()[1:], pa.int64())), "'index' holds 7, outside 0..5"),
    "negative index": (lambda t: replace_column(t, "index", pa.array(
        [-1] + t.column("index").to_pylist()[1:], pa.int64())), "'index' holds -1"),
    "class past K": (lambda t: replace_column(t, "class", pa.array(
        [1] * t.num_rows, pa.int32())), "'class' holds 1, outside 0..0"),
    "index a float": (lambda t: replace_column(t, "index", t.column("index").cast(pa.float64())),
                      "'index' is double, not an integer"),
    "index with a null": (lambda t: replace_column(t, "index", pa.array(
        [None] + t.column("index").to_pylist()[1:], pa.int64())), "'index' has null values"),
    "row twice": (lambda t: pa.concat_tables([t, t.slice(0, 1)]), "(class, index) row twice"),
    "no w column": (lambda t: t.drop_columns(["w"]), "has no 'w' column"),
    "w twice": (lambda t: t.append_column("w", t.column("w")), "has 2 'w' columns"),
    "no name column": (lambda t: t.drop_columns(["name"]), "has no 'name' column"),
    "w as float32": (lambda t: replace_column(t, "w", t.column("w").cast(pa.float32())),
                     "'w' is float, not double"),
    "w with a null": (lambda t: replace_column(t, "w", pa.array(
        [None] + t.column("w").to_pylist()[1:], pa.float64())), "'w' has null values"),
    "name as numbers": (lambda t: replace_column(t, "name", pa.array(range(t.num_rows))),
                        "'name' is int64, not string"),
}


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_from_arrow_refuses_a_bad_table_with_a_one_line_value_error(case):
    damage, expected = BAD_TABLES[case]
    table = damage(model_table("k"))
    with pytest.raises(ValueError) as err:
        from_arrow(table)
    message = str(err.value)
    assert expected in message and "\n" not in message, message


@pytest.mark.parametrize("case,expected", [
    ("narrow", "'S_pinv' is fixed_size_list<item: double>[5], not fixed_size_list<item: double>[6]"),
    ("nan", "'P' holds nan, not finite"),
    ("list", "'S_pinv' is list<item: double>, not fixed_size_list"),
])
def test_from_arrow_refuses_bad_matrix_columns(case, expected):
    table = kotlowski2_table()
    assert from_arrow(table).M.any()
    name = "P" if case == "nan" else "S_pinv"
    rows = table.column(name).to_pylist()
    if case == "narrow":
        array = pa.FixedSizeListArray.from_arrays(pa.array([v for r in rows for v in r[:5]]), 5)
    elif case == "nan":
        rows[0][0] = float("nan")
        array = pa.FixedSizeListArray.from_arrays(pa.array([v for r in rows for v in r]), 6)
    else:
        array = pa.array(rows, pa.list_(pa.float64()))
    with pytest.raises(ValueError) as err:
        from_arrow(replace_column(table, name, array))
    assert expected in str(err.value)


def test_valid_tables_still_round_trip_bit_exactly():
    for algorithm in ("nag", "kotlowski2", "scinol2", "omd_pnorm"):
        state = trained_state(algorithm)
        restored = from_arrow(KeyedModel("k", state).to_table())
        for a, b in ((state.dense_vectors(), restored.dense_vectors()),
                     (state.dense_matrices(), restored.dense_matrices()), (state.S, restored.S)):
            assert a.tobytes() == b.tobytes()


def test_version_1_checkpoints_of_unchanged_learners_still_load():
    state = trained_state("nag")
    restored = from_arrow(with_meta(KeyedModel("k", state).to_table(), schema_version=1))
    assert restored.dense_vectors().tobytes() == state.dense_vectors().tobytes()
    assert restored.S.tobytes() == state.S.tobytes()


def test_the_checksum_does_not_depend_on_chunking(tmp_path):
    table = seal(model_table("k"), "k")
    rechunked = pa.concat_tables([table.slice(0, 2), table.slice(2)])
    assert rechunked.column("w").num_chunks == 2
    from unitless.store.checkpoint_file import check_table, checksum
    assert checksum(rechunked) == checksum(table)
    check_table(rechunked)
    kot = seal(kotlowski2_table(), "k")
    check_table(pa.concat_tables([kot.slice(0, 1), kot.slice(1)]))


def test_the_checksum_is_the_one_checkpoints_already_written_hold():
    """The checksum's definition is part of the file format: a fixed table (every column kind a
    checkpoint has, a null, a non-ASCII string) keeps the digest it had when checkpoints were
    first sealed, whatever the code computing it."""
    from unitless.store.checkpoint_file import checksum
    table = pa.table({
        "class": pa.array([0, 0, 1], pa.int32()), "index": pa.array([3, 7, 7], pa.int64()),
        "name": pa.array(["x", None, "é"], pa.string()), "w": pa.array([0.5, -1e-300, 2.0]),
        "G": pa.FixedSizeListArray.from_arrays(pa.array([1.0, 0.0, 0.0, 1.0, 2.5, 0.0]), 2),
    }).replace_schema_metadata({METADATA_KEY: json.dumps(
        {"model_key": "k", "examples_seen": 3, "scalars": {"a": [1.5]}}).encode()})
    assert checksum(table) == ("sha256:1f608bdfcc5854e340083f977623e8da"
                               "0a00418335e98c882b94ffe55669785d")
    sealed = seal(table, "k")
    assert checksum(sealed) == checksum(table) == json.loads(
        sealed.schema.metadata[METADATA_KEY])["checksum"]


def test_tables_sealed_together_have_the_checksums_sealed_one_at_a_time():
    """``seal_many`` converts each table's columns once for all the models whose rows it holds:
    each checksum is the one the model's table alone has (every column kind: a null and
    non-ASCII names, a fixed-size list, several classes, an empty table; tables of different
    schemas together; and models' rows of one table, as ``ManyStates.checkpoints`` gives
    them)."""
    from unitless.store.checkpoint_file import checksum, seal_many
    tables = [(f"k{i}", model_table(f"k{i}", n=n, seed=i)) for i, n in enumerate((1, 7, 30))]
    named = model_table("named", n=5, seed=9)
    names = pa.array(["é", None, "x", "", "b", None][:named.num_rows], pa.string())
    tables.append(("named", named.set_column(named.column_names.index("name"), "name", names)))
    multiclass = KeyedModel("m", new_state("nag", 1 << 6, "logistic", n_classes=3)).to_table()
    tables += [("m", multiclass), ("k", kotlowski2_table()),
               ("empty", model_table("empty", n=5).slice(0, 0))]
    shared = pa.concat_tables([table.replace_schema_metadata(None) for _, table in tables[:4]])
    ends = np.cumsum([table.num_rows for _, table in tables[:4]]).tolist()
    of_one = [(key, TableRows(shared, end - table.num_rows, table.num_rows), table)
              for (key, table), end in zip(tables[:4], ends)]
    wholes = [(key, TableRows.whole(table), table) for key, table in tables]
    for batch in (wholes[:4], wholes, wholes[::-1], of_one, of_one[::-1] + wholes[4:]):
        given = [(key, rows, read_metadata(table)) for key, rows, table in batch]
        for (key, rows, meta, as_stored), (_, _, table) in zip(seal_many(given), batch):
            sealed = rows.slice().replace_schema_metadata({METADATA_KEY: as_stored})
            assert json.loads(as_stored) == meta and meta["model_key"] == key
            assert meta["checksum"] == checksum(sealed) == checksum(seal(table, key))


# --- many at once -------------------------------------------------------------------------------

def test_checkpoints_written_together_equal_those_written_one_at_a_time(tmp_path):
    """Several keys, several checkpoints of a key, in any order, and one older than a key's
    newest (a re-run bundle): the same files, pointers and pruning as one write at a time."""
    items = [(key, model_table(key, n=n, seed=n), n) for key in ("a", "b/c", "")
             for n in (10, 20, 30, 40)]
    random.Random(1).shuffle(items)
    one, many = str(tmp_path / "one"), str(tmp_path / "many")
    newest = model_table("a", n=50, seed=50)
    write_checkpoint(one, "a", newest, 50)
    write_checkpoint(many, "a", newest, 50)
    for key, table, n in items:
        write_checkpoint(one, key, table, n, keep=2)
    paths = write_checkpoints(many, items, keep=2)
    assert paths == [os.path.join(key_dir(many, key), checkpoint_name(n)) for key, _, n in items]
    for key in ("a", "b/c", ""):
        assert examples_in(latest_checkpoint(many, key)) == (50 if key == "a" else 40)
    assert snapshot(many, None) == snapshot(one, None)


# --- failed writes -------------------------------------------------------------------------------

def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    disk = tmp_path / "tiny"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tiny tmpfs to fill: {mounted.stderr.strip()}")
    try:
        models = str(disk / "models")
        small = write_checkpoint(models, "k", model_table("k", n=10), 10)
        directory = key_dir(models, "k")
        before = sorted(os.listdir(directory))
        big = KeyedModel("k", trained_state("nag", n=50, dim=5000)).to_table()
        assert len(table_to_bytes(big)) > 64 * 1024
        with pytest.raises(OSError) as err:
            write_checkpoint(models, "k", big, 50)
        assert err.value.errno == 28  # ENOSPC: no space left on device
        assert sorted(os.listdir(directory)) == before  # no temporary file, no new pointer
        assert latest_checkpoint(models, "k") == small
        with pytest.raises(OSError):  # a batch that fails part way: none of it
            write_checkpoints(models, [("j", model_table("j", n=10), 10), ("k", big, 50)])
        assert sorted(os.listdir(directory)) == before
        assert not os.path.exists(key_dir(models, "j")) or not os.listdir(key_dir(models, "j"))
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_taken_temporary_name_is_refused_and_left_alone(tmp_path, monkeypatch):
    """A temporary name already on disk (another writer's) is neither written nor removed: the
    write fails, and that file stays as it was."""
    monkeypatch.setattr(storage, "_TOKEN", ["f" * 16, itertools.count(7)])
    taken = tmp_path / f".x{storage.TEMP_MARK}{'f' * 16}{7:016x}"
    taken.write_bytes(b"another writer's")
    with pytest.raises(FileExistsError):
        storage.atomic_write_many([(str(tmp_path / "x"), b"new"), (str(tmp_path / "y"), b"new")])
    assert taken.read_bytes() == b"another writer's"
    assert os.listdir(tmp_path) == [taken.name]


# --- end to end --------------------------------------------------------------------------------

def test_train_with_hostile_keys_keeps_every_model_inside_the_model_dir(tmp_path, capsys):
    keys = ["..", ".", "", "k" * 300]
    rng = np.random.default_rng(3)
    path = tmp_path / "data.csv"
    with open(path, "w") as f:
        f.write("id,segment,label,f1,f2\n")
        for i in range(200):
            f.write(f"e{i},{keys[i % 4]},{rng.choice([-1, 1])},{rng.normal()!r},"
                    f"{rng.normal() * 1e3!r}\n")
    box = tmp_path / "box"
    models = box / "models"
    models.mkdir(parents=True)
    decoy = table_to_bytes(seal(model_table("decoy"), "decoy"))
    (box / "ckpt-000000000001.arrow").write_bytes(decoy)
    (box / "latest").write_text("ckpt-000000000001.arrow")
    before = snapshot(str(box), str(models))
    code = main(["train", "--input", str(path), "--id-column", "id", "--model-key-column",
                 "segment", "--chunk-size", "10", "--checkpoint-every", "20",
                 "--keep-checkpoints", "1", "--model-dir", str(models), "--model-groups", "0",
                 "--predictions", str(tmp_path / "pred"), "--dead-letter", str(tmp_path / "dead")])
    assert code == 0
    assert snapshot(str(box), str(models)) == before
    groups = models / "groups" / "0"  # (no model groups: a group directory per key)
    assert sorted(os.listdir(models)) == [OWNER, "groups"]
    assert os.listdir(models / "groups") == ["0"]
    assert sorted(os.listdir(groups)) == sorted(key_dir_name(k) for k in keys)
    assert stored.model_keys(str(models)) == sorted(keys)
    for key in keys:
        directory = groups / key_dir_name(key)
        names = sorted(os.listdir(directory))
        assert [n.split("-")[0] for n in names] == ["manifest", "part"]  # --keep-checkpoints 1
        capsys.readouterr()
        assert main(["inspect", str(models), "--model-key", key, "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        assert info["model_key"] == key and info["examples_seen"] == 50
        assert info["file"] == f"{directory}{os.sep}{names[1]}#0"
        assert stored.load_checkpoint(info["file"])[1].equals(
            stored.load_latest(str(models), key)[1])


def test_a_restarted_partition_begins_where_no_model_could_miss_an_example(tmp_path):
    """Model a learned offsets up to 1190 of a partition on arrival, but the watermark passed
    only up to 999 (its restart position); model b's checkpoint is from before restart
    positions existed. The partition restarts after the smallest restart position (999), not
    after what a learned (a key first seen after 999 may have no checkpoint yet); dead letters
    count as written up to the furthest position learned."""
    from unitless.store.resume import resume_positions
    state = new_state("nag", 1 << 6, "logistic", bias_index=0)
    a = KeyedModel("a", state, {"t/0": 1190}, restart={"t/0": 999})
    b = KeyedModel("b", new_state("nag", 1 << 6, "logistic", bias_index=0), {"t/0": 1500,
                                                                           "t/1": 7})
    write_checkpoint(str(tmp_path), "a", a.to_table(), 1)
    old = b.to_table()
    meta = json.loads(old.schema.metadata[METADATA_KEY])
    del meta["restart_positions"]
    old = old.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})
    write_checkpoint(str(tmp_path), "b", old, 1)
    assert resume_positions(str(tmp_path)) == ({"t/0": 999, "t/1": 7}, {"t/0": 1500, "t/1": 7})
    assert KeyedModel.from_table(old).restart == {"t/0": 1500, "t/1": 7}  # as it restarted


def test_a_start_record_holds_a_partition_back_until_it_is_pruned(tmp_path):
    """Key k has no checkpoint, only start records (written by the reading stage): the
    partition restarts after its earliest (40), though model a has learned far past it; a's
    own start records count too (a's restart position there may not cover a block of its own
    still in flight) until they are pruned, which removes a key's records of the given
    partitions only."""
    from unitless.store.resume import covered_partitions, resume_positions
    from unitless.store.starts import prune_starts, read_starts, starts_dir, write_starts
    a = KeyedModel("a", new_state("nag", 1 << 6, "logistic", bias_index=0), {"t/0": 1190},
                   restart={"t/0": 999})
    write_checkpoint(str(tmp_path), "a", a.to_table(), 1)
    root = starts_dir(str(tmp_path))
    write_starts(root, [("k", "t/0", 70), ("a", "t/0", 10), ("a", "t/0", -1)])
    write_starts(root, [("a", "t/1", 5)])
    write_starts(root, [("k", "t/0", 40)])  # another worker saw k earlier: a file of its own
    assert read_starts(root) == {"k": {"t/0": 40}, "a": {"t/0": -1, "t/1": 5}}
    assert resume_positions(str(tmp_path)) == ({"t/0": -1, "t/1": 5}, {"t/0": 1190})
    prune_starts(root, "a", {("a", "t/0")})  # (a file goes once all its records are covered)
    assert read_starts(root) == {"k": {"t/0": 40}, "a": {"t/1": 5}}
    assert resume_positions(str(tmp_path)) == ({"t/0": 40, "t/1": 5}, {"t/0": 1190})
    assert model_keys(str(tmp_path)) == ["a"]  # (the records' directory is no model's)
    # once a's checkpoint records that the watermark moved its restart position in t/1, its
    # records there are superseded, pruned or not, and the reading stage writes none
    a.restart["t/1"] = 2
    a.passed("t/1", 9)
    write_checkpoint(str(tmp_path), "a", a.to_table(), 2)
    assert resume_positions(str(tmp_path)) == ({"t/0": 40, "t/1": 9}, {"t/0": 1190})
    assert covered_partitions(str(tmp_path)) == {("a", "t/1")}
    # a record written by earlier versions (a file per key and source) still counts
    old = os.path.join(root, key_dir_name("old"))
    os.makedirs(old)
    with open(os.path.join(old, f"{'t/2'.encode().hex()}-3"), "w") as f:
        json.dump({"model_key": "old", "source": "t/2", "position": 3}, f)
    assert read_starts(root)["old"] == {"t/2": 3}
    prune_starts(root, "old", {("old", "t/2")})
    assert "old" not in read_starts(root)


# --- a run's start reads each checkpoint once ----------------------------------------------------

def test_a_runs_start_reads_each_checkpoint_once_and_only_while_it_lasts(tmp_path, monkeypatch,
                                                                          caplog):
    """Within ``read_once``, the settings check, the resume positions and the covered
    partitions (each over every key's latest checkpoint) read and verify each file once; after
    it, a file damaged since is read again and refused."""
    from unitless.store import checkpoint_file, per_key, resume
    models = str(tmp_path)
    newest = {key: two_checkpoints(models, key)[1] for key in ("a", "b", "c")}
    reads, listed = [], []

    def counted(path, limit=-1):
        reads.append(path)
        return real(path, limit)

    def counted_listing(directory):
        listed.append(directory)
        return real_listing(directory)
    real, real_listing = checkpoint_file.read_bytes, per_key.list_dir
    monkeypatch.setattr(checkpoint_file, "read_bytes", counted)
    monkeypatch.setattr(per_key, "list_dir", counted_listing)
    with checkpoint_file.read_once():
        with checkpoint_file.read_once():  # (nested: the outer one holds)
            for _ in range(3):
                assert per_key.model_keys(models) == ["a", "b", "c"]
                assert resume.resume_positions(models) == ({}, {})
                assert resume.covered_partitions(models) == set()
                assert [latest_checkpoint(models, k) for k in "abc"] == list(newest.values())
        assert sorted(reads) == sorted(newest.values())
        key_dirs = sorted(os.path.dirname(path) for path in newest.values())
        assert sorted(d for d in listed if d in key_dirs) == key_dirs  # (each listed once)
        # a runner's thread (one started now, too) reads for itself
        worker = threading.Thread(target=latest_checkpoint, args=(models, "a"))
        worker.start()
        worker.join()
        assert reads[-1] == newest["a"] and len(reads) == 4
    with checkpoint_file.read_once():  # the learner as checking the file decoded it, handed once
        path, table, state = per_key.load_latest_learner(models, "c")
        assert path == newest["c"] and per_key.load_latest_learner(models, "c")[2] is None
        again = from_arrow(table)
        assert (state.V.tobytes(), state.S.tobytes()) == (again.V.tobytes(), again.S.tobytes())
    with checkpoint_file.read_once():  # a state no reader took goes to the first that takes one
        once = checkpoint_file.kept_reads()
        room = once.bytes_left
        assert latest_checkpoint(models, "a") == newest["a"]
        path, table, state = per_key.load_latest_learner(models, "a")
        assert state is not None and per_key.load_latest_learner(models, "a")[2] is None
        assert room - once.bytes_left == table.nbytes  # (the state's room given back)
        per_key.load_checkpoint(newest["b"])  # a file read as it is: no state kept
        assert once.tables[newest["b"]][1] is None
        again = from_arrow(table)
        assert (state.V.tobytes(), state.S.tobytes()) == (again.V.tobytes(), again.S.tobytes())
    reads.clear()
    with checkpoint_file.read_once(limit=0):  # (no room: every reader reads again)
        latest_checkpoint(models, "a")
        latest_checkpoint(models, "a")
    assert reads == [newest["a"]] * 2
    with open(newest["b"], "r+b") as f:
        f.truncate(os.path.getsize(newest["b"]) // 2)
    with caplog.at_level(logging.WARNING, logger="unitless"):
        assert latest_checkpoint(models, "b") != newest["b"]
    assert newest["b"] in caplog.text
