"""Part format 2 (``store.part_format``): each model's metadata comes back as it was written,
value for value and type for type (a format-1 part held it as JSON), whatever fields a
model holds, and the part's checksum covers its models table and its rows."""
import json

import numpy as np
import pyarrow as pa
import pytest

from unitless.learner.arrow_form import TableRows
from unitless.store import by_group, part_format
from unitless.store.checkpoint_file import table_from_bytes
from unitless.store.group_writer import _part_bytes

SHARED = {"schema_version": 2, "algorithm": "nag", "loss": "logistic",
          "hyperparameters": {"learning_rate": 1.0}, "dim": 8, "n_classes": 1, "bias_index": 7}


def model(key, **fields):
    return {**SHARED, "model_key": key, "examples_seen": 3, "cumulative_loss": 1.5,
            "progressive_loss": 0.5, "scalars": {"t": [3.0], "N": [2.5]},
            "input_positions": {"a.csv": 4}, "checkpoint_examples": 3, "checkpoint_id": None,
            "examples_served": 1, "time": 1.25, "errors": 1.0, "unlearned_sources": {},
            "learned_through": {"a.csv": 9}, "restart_positions": {"topic/0": 2},
            "watermark_passed": ["topic/0"], **fields}


def written(metas, rows=1):
    """[(first row, rows, metadata)] of the part holding ``metas`` (``rows`` rows of weights
    each), and the part as read."""
    weights = pa.table({"w": pa.array(np.arange(len(metas) * rows), pa.float64())})
    data, digest = _part_bytes("0/4", 1, [(m["model_key"], TableRows(weights, i * rows, rows), m)
                                          for i, m in enumerate(metas)])
    table = table_from_bytes(data)
    found_format, models = by_group._part_index(table.schema.metadata)
    assert found_format == 2
    assert [meta["checksum"] for _, _, meta in models] == [
        f"{digest}#{i}" for i in range(len(metas))]
    return models, table


def same(got, want):
    """Equal, and the same JSON (an int stays an int, a float a float)."""
    got = {k: v for k, v in got.items() if k != "checksum"}
    return json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


@pytest.mark.parametrize("odd", [
    {},  # every field a column, the settings shared
    {"errors": 0},  # an int where the others hold a float: the field as JSON
    {"input_positions": {"a.csv": 1 << 70}},  # past int64
    {"checkpoint_id": "k@3", "label_join": {"rejoin": {"t/0": 5}, "closed": [[], [], []]}},
    {"algorithm": "scinol2"},  # a setting not shared
    {"hyperparameters": {"learning_rate": 1}},  # equal to the others' 1.0, not as JSON
    {"scalars": {"t": [1]}},
])
def test_each_models_metadata_reads_back_as_written(odd):
    metas = [model("k0"), model("k1", **odd), model("", examples_seen=7)]
    del metas[2]["examples_served"]  # (a field one model lacks)
    models, table = written(metas)
    assert [(first, rows) for first, rows, _ in models] == [(0, 1), (1, 1), (2, 1)]
    assert all(same(meta, want) for (_, _, meta), want in zip(models, metas))
    part_format.verify(table)


def test_a_part_of_models_without_rows_reads_back_valid():
    """Models that have learned nothing (a Kafka partition's start, checkpointed before its
    first example) make a body without rows, which the file holds as no record batch."""
    metas = [model("k0", examples_seen=0), model("k1", examples_seen=0)]
    models, table = written(metas, rows=0)
    assert table.num_rows == 0 and [(first, rows) for first, rows, _ in models] == [(0, 0)] * 2
    assert all(same(meta, want) for (_, _, meta), want in zip(models, metas))
    part_format.verify(table)


def test_the_checksum_covers_the_models_table_and_the_rows():
    metas = [model("k0"), model("k1")]
    _, table = written(metas)
    rows = table.set_column(1, "w", pa.array([0.0, 1.5]))
    with pytest.raises(ValueError, match="checksum"):
        part_format.verify(rows)
    other, _ = _part_bytes("0/4", 1, [(m["model_key"], TableRows(table.select(["w"]), i, 1),
                                       {**m, "errors": 2.0}) for i, m in enumerate(metas)])
    models = table_from_bytes(other).schema.metadata[part_format.MODELS_KEY]
    with pytest.raises(ValueError, match="checksum"):
        part_format.verify(table.replace_schema_metadata(
            {**table.schema.metadata, part_format.MODELS_KEY: models}))
