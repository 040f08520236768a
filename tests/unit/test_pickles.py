"""Beam state that an updated job carries over holds pickles an earlier version wrote, naming
classes by modules they have left since: ``unitless.pickles.loads`` reads them."""
import pickle

import numpy as np
import pyarrow as pa
import pytest

from unitless import pickles
from unitless.parse.csv import parse_csv
from unitless.parse.spec import RecordSpec
from unitless.pipelines.rounds import RoundMeta


def written_by_an_earlier_version(obj, module_now, module_then):
    """``obj``'s pickle as a version whose class lived in ``module_then`` wrote it (protocol 2
    names classes as text, so the name can be changed in place)."""
    data = pickle.dumps(obj, protocol=2)
    assert module_now.encode() in data
    return data.replace(module_now.encode() + b"\n", module_then.encode() + b"\n")


def test_a_block_pickled_when_records_were_in_connectors_loads():
    block, dead = parse_csv(RecordSpec(columns=["label", "x"]), "src",
                            [(1, b"1,2.5"), (2, b"-1,0.5")])
    data = written_by_an_earlier_version(block, "unitless.parse.records",
                                         "unitless.connectors.records")
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(data)
    back = pickles.loads(data)
    assert type(back) is type(block) and not dead
    assert back.positions.tolist() == [1, 2] and back.labels.tolist() == [1.0, -1.0]
    assert np.array_equal(back.values, block.values) and back.keys.equals(block.keys)


def test_a_class_that_left_a_module_still_there_loads():
    meta = RoundMeta(pa.array(["a"]), pa.array(["src"]), np.array([3]), None)
    data = written_by_an_earlier_version(meta, "unitless.pipelines.rounds",
                                         "unitless.pipelines.sharded")
    with pytest.raises(AttributeError):
        pickle.loads(data)
    back = pickles.loads(data)
    assert type(back) is RoundMeta and back.positions.tolist() == [3]
    assert back.ids.equals(meta.ids)


def test_a_name_no_version_had_is_still_an_error():
    data = pickle.dumps(RoundMeta, protocol=2).replace(b"RoundMeta", b"RoundMetaNever")
    with pytest.raises(AttributeError):
        pickles.loads(data)


def test_a_model_group_state_pickled_when_models_were_in_store_loads():
    from unitless.learner import new_state
    from unitless.models.keyed_model import KeyedModel
    from unitless.models.model_group import ModelGroup
    group = ModelGroup({"k": KeyedModel("k", new_state("scinol2", 8))})
    data = group.to_bytes()
    old = data[:32] + written_by_an_earlier_version(
        pickle.loads(data[32:]), "unitless.models.keyed_model", "unitless.store.keyed_model")
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(old[32:])
    back = ModelGroup.from_bytes(old)
    assert type(back.models["k"]) is KeyedModel and back.models["k"].key == "k"
