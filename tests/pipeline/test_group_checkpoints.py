"""Checkpoints by model group (``store.by_group``): real files, damaged ones, stale writers,
the per-key layout of earlier versions still read, and the files queried as a dataset."""
import base64
import json
import logging
import os
import pathlib
import random
import shutil

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from unitless.cli.main import main
from unitless.learner import from_arrow, read_metadata
from unitless.store import by_group, catalog, part_format, per_key
from unitless.store.checkpoint_file import read_schema, seal, table_to_bytes
from unitless.store.by_group import GroupCheckpoints
from unitless.store.group_writer import COMPACT_PARTS, GroupWriter, taken
from unitless.store.groups import group_dir, group_key, group_keys
from unitless.models.keyed_model import KeyedModel
from unitless.reports import summary

from tests.helpers.format1 import as_format1
from tests.helpers.states import trained_state

GROUPS = 4


def trained_model(key, n=60, seed=0):
    return KeyedModel(key, trained_state("nag", n, seed=seed))


def write_groups(writer, *models_):
    by_group = {}
    for model in models_:
        by_group.setdefault(group_key(model.key, GROUPS), []).append(
            taken(model.key, model.to_table()))
    return writer.write(by_group)


def group_files(model_dir, key):
    return sorted(os.listdir(group_dir(model_dir, GROUPS, group_key(key, GROUPS))))


def same_model(table, model):
    """The checkpoint holds the model as its own per-key file would: the same columns and
    metadata (but the write time), checksum included."""
    want = seal(model.to_table(), model.key)
    got_meta, want_meta = read_metadata(table), read_metadata(want)
    for name in ("time", "checksum"):
        got_meta.pop(name, None), want_meta.pop(name, None)
    return table.equals(want) and got_meta == want_meta


def test_a_model_keys_group_is_the_same_computed_alone_or_for_an_array_at_once():
    """``group_keys`` (an Arrow array of model keys at once, compiled) gives each key the group
    ``group_key`` gives it alone: zlib's CRC-32 of its UTF-8, whatever the characters, an
    empty key, a sliced array, large strings."""
    rnd = random.Random(3)
    keys = ["", "a", "é中文😀", "k123"] + ["".join(rnd.choice("abé😀z09/\\") for _ in
                                                   range(rnd.randrange(12))) for _ in range(500)]
    for groups in (1, 7, 1024, 0):
        for array in (pa.array(keys), pa.array(keys).slice(3, 200),
                      pa.array(keys, pa.large_string())):
            assert group_keys(array, groups) == [group_key(k, groups) for k in array.to_pylist()]


def test_a_runs_summary_shows_the_models_with_most_examples_and_totals_them_all(tmp_path):
    """``newest_shown`` (a run's summary, a line made for the models shown only) shows what
    lines for every model (``checkpoint_summaries``), sorted by examples then key, show:
    the same models, ties by key, and the same totals."""
    model_dir = str(tmp_path / "models")
    rng = np.random.default_rng(4)
    models = [trained_model(f"m{i}", n=int(rng.choice([5, 9, 9, 12])), seed=i) for i in range(40)]
    write_groups(GroupWriter(model_dir, GROUPS), *models)
    lines = sorted((summary.model_line(key, where, meta)
                    for key, where, meta in catalog.checkpoint_summaries(model_dir)),
                   key=lambda m: (-m.examples, m.key))
    assert len({m.examples for m in lines}) == 3
    for top in (0, 1, 3, 7, 40, 100):
        want, got = summary.shown(lines, top), summary.newest_shown(model_dir, top)
        assert (got.top, got.count, got.examples) == (want.top, want.count, want.examples), top
        assert got.progressive_loss == pytest.approx(want.progressive_loss, rel=1e-12)
        assert summary.render_models(got) == summary.render_models(want)


def test_a_group_holds_many_models_in_one_part_and_reads_each_back_exactly(tmp_path):
    model_dir = str(tmp_path / "models")
    keys = [f"customer-{i}" for i in range(40)] + ["", "a/b", "..", "€" * 30]
    trained_models = [trained_model(key, seed=i) for i, key in enumerate(keys)]
    write_groups(GroupWriter(model_dir, GROUPS), *trained_models)
    assert sorted(os.listdir(os.path.join(model_dir, "groups", str(GROUPS)))) == sorted(
        {per_key.key_dir_name(group_key(k, GROUPS)) for k in keys})
    for directory in os.listdir(os.path.join(model_dir, "groups", str(GROUPS))):
        names = os.listdir(os.path.join(model_dir, "groups", str(GROUPS), directory))
        assert len(names) == 2  # one part, one manifest, however many models
    assert catalog.model_keys(model_dir) == sorted(keys)
    for model in trained_models:
        where, table = catalog.load_latest(model_dir, model.key)
        assert same_model(table, model)
        assert catalog.read_checkpoint(where).equals(table)
        assert same_model(KeyedModel.from_table(table).to_table(), model)  # (decoded, too)


@pytest.mark.parametrize("earlier", ["format 2", "format 1"])
def test_a_group_whose_manifest_names_too_many_parts_is_written_again_as_one(
        tmp_path, monkeypatch, earlier):
    """Each model checkpointed alone leaves a part of its own; once a group's manifest would
    name more than COMPACT_PARTS, a write puts every model of the group in one part, each
    the state it had, copied as its checksum vouches for it (no learner decoded); parts of
    format 1 (earlier versions') too, their models then written in format 2."""
    model_dir = str(tmp_path / "models")
    writer = GroupWriter(model_dir, GROUPS)
    together = [k for k in map(str, range(400)) if group_key(k, GROUPS) == group_key("0", GROUPS)]
    models = [trained_model(k, n=30, seed=i) for i, k in enumerate(together[:COMPACT_PARTS + 2])]
    decoded = []
    monkeypatch.setattr(by_group, "from_arrow", lambda table: decoded.append(table))
    for model in models[:-1]:
        write_groups(writer, model)
    if earlier == "format 1":
        as_format1(model_dir)
        writer = GroupWriter(model_dir, GROUPS)
    write_groups(writer, models[-1])
    newest = GroupCheckpoints(group_dir(model_dir, GROUPS, group_key("0", GROUPS))).newest()
    assert len({part for part, _, _ in newest.values()}) == 1 and len(newest) == len(models)
    assert decoded == []
    assert [part_header(p).get("part_format", 1) for p in parts_of(model_dir)
            if os.path.basename(p) == next(iter(newest.values()))[0]] == [2]
    monkeypatch.undo()
    for model in models:
        table = catalog.load_latest(model_dir, model.key)[1]
        assert same_model(table, model), model.key
        assert same_model(KeyedModel.from_table(table).to_table(), model)


def test_unchanged_models_keep_their_part_and_old_files_go_with_keep(tmp_path):
    model_dir = str(tmp_path / "models")
    writer = GroupWriter(model_dir, GROUPS, keep=2)
    together = [k for k in map(str, range(40)) if group_key(k, GROUPS) == group_key("0", GROUPS)]
    moving, still = [trained_model(k, seed=i) for i, k in enumerate(together[:2])]
    write_groups(writer, moving, still)
    first = catalog.latest_checkpoint(model_dir, still.key)
    for _ in range(5):
        moving.state.examples_seen += 1
        write_groups(writer, moving)
    names = group_files(model_dir, "0")
    assert sum(n.startswith("manifest-") for n in names) == 2
    # the parts the two kept manifests name: the first (the unchanged model) and the last two
    assert sum(n.startswith("part-") for n in names) == 3
    assert catalog.latest_checkpoint(model_dir, still.key) == first
    assert read_metadata(catalog.load_latest(model_dir, moving.key)[1])["examples_seen"] == \
        moving.state.examples_seen


def test_the_summary_reads_the_manifests_figures_or_else_the_parts(tmp_path, monkeypatch):
    """A run's summary (``checkpoint_summaries``) takes each model's examples, progressive loss,
    errors and loss from its manifest: the same as its part's metadata, for models whose newest
    state is in an older part too; a manifest written before manifests held them (no
    "figures") is summarized from the parts."""
    model_dir = str(tmp_path / "models")
    writer = GroupWriter(model_dir, GROUPS)
    keys = [f"m{i}" for i in range(12)]
    write_groups(writer, *(trained_model(key, seed=i) for i, key in enumerate(keys)))
    write_groups(writer, trained_model("m3", n=90, seed=50))

    def figures(listed):
        return [(key, where, {f: meta[f] for f in ("examples_seen",) + by_group.FIGURES})
                for key, where, meta in listed]

    def summaries():
        return figures(catalog.checkpoint_summaries(model_dir))

    want = figures(catalog.checkpoint_metadata(model_dir))
    assert [key for key, *_ in want] == sorted(keys)
    assert dict((k, m["examples_seen"]) for k, _, m in want)["m3"] == 90
    assert summaries() == want
    read = []  # (the parts whose metadata it reads)
    monkeypatch.setattr(catalog, "part_metadata",
                        lambda *at: read.append(at) or by_group.part_metadata(*at))
    assert summaries() == want and read == []
    for manifest in tmp_path.glob("models/groups/*/*/manifest-*.json"):
        held = json.loads(manifest.read_text())
        del held["figures"]
        manifest.write_text(json.dumps(held))
    assert summaries() == want and len(read) == len(keys)


def changed_weight(path):
    """The part with one weight changed, its metadata (the checksums) left as they were."""
    part = pa.ipc.open_file(pa.py_buffer(open(path, "rb").read())).read_all()
    w = part.column("w").to_numpy().copy()
    w[0] = np.nextafter(w[0], np.inf)
    return table_to_bytes(part.set_column(part.column_names.index("w"), "w",
                                                   pa.array(w)))


def changed_counter(path):
    """The part with its first model's examples seen changed in its models table, its header
    (the checksum) left as it was."""
    part = pa.ipc.open_file(pa.py_buffer(open(path, "rb").read())).read_all()
    metadata = part.schema.metadata
    models = pa.ipc.open_stream(base64.b64decode(metadata[part_format.MODELS_KEY])).read_all()
    seen = models.column("examples_seen").to_numpy().copy()
    seen[0] += 1
    models = models.set_column(models.column_names.index("examples_seen"), "examples_seen",
                               pa.array(seen))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, models.schema) as writer:
        writer.write_table(models)
    return table_to_bytes(part.replace_schema_metadata({
        **metadata, part_format.MODELS_KEY: base64.b64encode(sink.getvalue().to_pybytes())}))


@pytest.mark.parametrize("damage", ["truncated", "a weight changed", "a counter changed",
                                    "gone"])
def test_a_damaged_newest_part_falls_back_to_the_models_previous_state(tmp_path, caplog,
                                                                       damage):
    model_dir = str(tmp_path / "models")
    writer = GroupWriter(model_dir, GROUPS)
    model = trained_model("k")
    write_groups(writer, model)
    before = catalog.load_latest(model_dir, "k")[1]
    model.state.examples_seen += 7
    where = write_groups(writer, model)["k"]
    part = where.rpartition("#")[0]
    data = open(part, "rb").read()
    if damage == "gone":
        os.remove(part)
    else:
        damaged = (data[:len(data) // 2] if damage == "truncated" else
                   changed_weight(part) if damage == "a weight changed" else changed_counter(part))
        with open(part, "wb") as f:
            f.write(damaged)
    by_group._parts.clear()  # (as a new process would read it)
    with caplog.at_level(logging.WARNING, "unitless"):
        found = catalog.load_latest(model_dir, "k")
    assert found[1].equals(before)
    assert read_metadata(found[1]) == read_metadata(before)
    assert "ignoring checkpoint" in caplog.text and os.path.basename(part) in caplog.text


@pytest.mark.parametrize("damage", [b"", b"{", b'{"format": "other"}', b"\xff\xfe"])
def test_an_unreadable_newest_manifest_falls_back_to_the_one_before(tmp_path, caplog, damage):
    model_dir = str(tmp_path / "models")
    writer = GroupWriter(model_dir, GROUPS)
    model = trained_model("k")
    write_groups(writer, model)
    before = catalog.load_latest(model_dir, "k")[1]
    directory = group_dir(model_dir, GROUPS, group_key("k", GROUPS))
    with open(os.path.join(directory, "manifest-000000000009-ff.json"), "wb") as f:
        f.write(damage)
    with caplog.at_level(logging.WARNING, "unitless"):
        assert read_metadata(catalog.load_latest(model_dir, "k")[1]) == read_metadata(before)
    assert "ignoring manifest" in caplog.text


def test_a_stale_writer_never_moves_a_model_back(tmp_path):
    """A retried bundle's writer (its view of the group older than the directory) writes a
    model's state of fewer examples: the newer one stays the model's newest."""
    model_dir = str(tmp_path / "models")
    ahead, stale = GroupWriter(model_dir, GROUPS), GroupWriter(model_dir, GROUPS)
    model = trained_model("k")
    write_groups(stale, model)
    model.state.examples_seen += 10
    write_groups(ahead, model)
    model.state.examples_seen -= 5
    write_groups(stale, model)
    assert read_metadata(catalog.load_latest(model_dir, "k")[1])["examples_seen"] == 70


def test_the_newest_models_query_with_duckdb_and_the_parts_read_as_a_dataset(tmp_path):
    """The README's recipe: every model's newest state as one table, queried with DuckDB; and
    the parts as one Arrow dataset with a model_key column."""
    model_dir = str(tmp_path / "models")
    keys = [f"c{i}" for i in range(30)]
    writer = GroupWriter(model_dir, GROUPS)
    write_groups(writer, *(trained_model(key, seed=i) for i, key in enumerate(keys)))
    moved = trained_model("c17", n=90, seed=99)  # (its newest state in a newer part)
    write_groups(writer, moved)
    weights = catalog.newest_models(model_dir)  # noqa: F841 (DuckDB reads it by its name)
    got = duckdb.sql("select name, w from weights where model_key = 'c17' "
                     "order by class, index").fetchall()
    want = catalog.load_latest(model_dir, "c17")[1]
    assert got == list(zip(want.column("name").to_pylist(), want.column("w").to_pylist()))
    assert read_metadata(want)["examples_seen"] == 90
    counts = dict(duckdb.sql("select model_key, count(*) from weights group by model_key")
                  .fetchall())
    assert sorted(counts) == sorted(keys)
    assert all(n == catalog.load_latest(model_dir, k)[1].num_rows for k, n in counts.items())
    parts = parts_of(tmp_path / "models")
    every = ds.dataset(parts, format="ipc").to_table(columns=["model_key"])
    assert sorted(set(every.column("model_key").to_pylist())) == sorted(keys)


@pytest.mark.parametrize("layout", ["per key", "group, part format 1"])
def test_a_run_resumes_models_checkpointed_by_earlier_versions_bit_for_bit(tmp_path, capsys,
                                                                           layout):
    """Checkpoints written in the per-key layout (by its writer, as earlier versions wrote them)
    or in groups of parts of format 1 load, each as it was: a run resumed from them over the
    whole input ends where one run over it ends, and writes what it continues in the group
    layout, part format 2."""
    rng = np.random.default_rng(3)
    lines = ["user,x1,x2,label"] + [
        f"u{i % 5},{rng.normal() * 1e3:.6f},{rng.normal() * 1e-3:.9f},{int(rng.random() < .5)}"
        for i in range(600)]
    data = tmp_path / "data.csv"  # (the first half, then all of it: the same source)
    data.write_text("\n".join(lines[:301]) + "\n")
    common = ["--input", str(data), "--model-key-column", "user", "--algorithm", "scinol2",
              "--dead-letter", str(tmp_path / "dead")]
    assert main(["train", "--model-dir", str(tmp_path / "tmp"),
                 "--predictions", str(tmp_path / "p2"), *common]) == 0
    data.write_text("\n".join(lines) + "\n")
    assert main(["train", "--model-dir", str(tmp_path / "one"),
                 "--predictions", str(tmp_path / "p1"), *common]) == 0
    old = str(tmp_path / "old")
    # the first half's models, as earlier versions wrote them
    if layout == "per key":
        for key in catalog.model_keys(str(tmp_path / "tmp")):
            table = catalog.load_latest(str(tmp_path / "tmp"), key)[1]
            per_key.write_checkpoint(old, key, table.replace_schema_metadata(
                {b"unitless": json.dumps({k: v for k, v in read_metadata(table).items()
                                          if k != "checksum"}).encode()}),
                read_metadata(table)["examples_seen"])
        assert not os.path.exists(os.path.join(old, "groups"))
    else:
        shutil.copytree(tmp_path / "tmp", old)
        as_format1(old)
        for key in catalog.model_keys(str(tmp_path / "tmp")):  # (read back as they were)
            got, want = (catalog.load_latest(d, key)[1] for d in (old, str(tmp_path / "tmp")))
            assert got.equals(want) and (
                {**read_metadata(got), "checksum": ""} == {**read_metadata(want), "checksum": ""})
        assert {part_header(p).get("part_format", 1) for p in parts_of(old)} == {1}
    assert main(["train", "--model-dir", old, "--resume",
                 "--predictions", str(tmp_path / "p3"), *common]) == 0
    assert catalog.model_keys(old) == catalog.model_keys(str(tmp_path / "one")) == [
        f"u{i}" for i in range(5)]
    for key in catalog.model_keys(old):
        got = catalog.load_latest(old, key)
        assert "/groups/" in got[0]  # (the resumed run wrote the new layout)
        want = catalog.load_latest(str(tmp_path / "one"), key)[1]
        assert got[1].drop_columns([]).equals(want.replace_schema_metadata(
            got[1].schema.metadata)), key
        meta_got, meta_want = read_metadata(got[1]), read_metadata(want)
        for name in ("examples_seen", "cumulative_loss", "scalars", "input_positions"):
            assert meta_got[name] == meta_want[name], (key, name)
    assert "300 examples learned" in capsys.readouterr().out.rsplit("model key", 1)[1]
    newest = {catalog.load_latest(old, key)[0].rpartition("#")[0] for key in catalog.model_keys(old)}
    assert {part_header(p)["part_format"] for p in newest} == {2}


def parts_of(model_dir):
    return [str(p) for p in pathlib.Path(model_dir).glob("groups/*/*/part-*.arrow")]


def part_header(path):
    return json.loads(read_schema(path).metadata[by_group.PART_KEY])


def test_a_resumed_run_decodes_only_the_models_with_something_new(tmp_path, monkeypatch):
    """--resume reads its input again: the models whose examples there they learned before skip
    them without their learners decoded; those with new examples are decoded and learn them;
    every model ends where one run over the whole input ends, bit for bit."""
    rng = np.random.default_rng(5)

    def lines(n, keys):
        return [f"u{i % keys},{rng.normal() * 1e3:.6f},{rng.normal() * 1e-3:.9f},"
                f"{int(rng.random() < .5)}" for i in range(n)]
    first, later = ["user,x1,x2,label", *lines(480, 12)], lines(60, 3)  # (new: u0 to u2)
    data = tmp_path / "data.csv"
    common = ["--input", str(data), "--model-key-column", "user",
              "--dead-letter", str(tmp_path / "dead")]
    data.write_text("\n".join(first) + "\n")
    assert main(["train", "--model-dir", str(tmp_path / "resumed"),
                 "--predictions", str(tmp_path / "p1"), *common]) == 0
    data.write_text("\n".join(first + later) + "\n")
    assert main(["train", "--model-dir", str(tmp_path / "one"),
                 "--predictions", str(tmp_path / "p2"), *common]) == 0
    decoded = []

    def counted(table):
        decoded.append(read_metadata(table)["model_key"])
        return from_arrow(table)
    monkeypatch.setattr(by_group, "from_arrow", counted)
    assert main(["train", "--model-dir", str(tmp_path / "resumed"), "--resume",
                 "--predictions", str(tmp_path / "p3"), *common]) == 0
    assert sorted(decoded) == ["u0", "u1", "u2"]
    keys = catalog.model_keys(str(tmp_path / "one"))
    assert keys == catalog.model_keys(str(tmp_path / "resumed")) and len(keys) == 12
    for key in keys:
        got, want = (catalog.load_latest(str(tmp_path / run), key)[1]
                     for run in ("resumed", "one"))
        assert got.equals(want.replace_schema_metadata(got.schema.metadata)), key
        for name in ("examples_seen", "cumulative_loss", "scalars", "input_positions"):
            assert read_metadata(got)[name] == read_metadata(want)[name], (key, name)


def test_resuming_with_another_number_of_model_groups_is_refused(tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("user,x,label\n" + "".join(f"u{i % 3},{i},{i % 2}\n" for i in range(50)))
    args = ["train", "--input", str(data), "--model-dir", str(tmp_path / "m"),
            "--predictions", str(tmp_path / "p"), "--model-key-column", "user",
            "--dead-letter", str(tmp_path / "dead")]
    assert main(args + ["--model-groups", "8"]) == 0
    capsys.readouterr()
    assert main(args + ["--resume", "--model-groups", "16"]) == 2
    assert "resume with --model-groups 8" in capsys.readouterr().err


def test_inspect_names_one_model_of_a_model_directory(tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("user,x,label\n" + "".join(f"u{i % 3},{i},{i % 2}\n" for i in range(50)))
    assert main(["train", "--input", str(data), "--model-dir", str(tmp_path / "m"),
                 "--predictions", str(tmp_path / "p"), "--model-key-column", "user",
                 "--dead-letter", str(tmp_path / "dead")]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "m"), "--model-key", "u1", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["model_key"] == "u1" and info["examples_seen"] == 17
    assert main(["inspect", info["file"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["examples_seen"] == 17
    assert main(["inspect", str(tmp_path / "m"), "--model-key", "nobody"]) == 2
    assert "no valid checkpoint of model 'nobody'" in capsys.readouterr().err
