"""FeatureNames: a feature keeps the first name it was given, whichever path merges names."""
import pickle

import numpy as np
import pyarrow as pa

from unitless.learner.names import FeatureNames, merged_names


def test_the_first_name_given_stays():
    a = FeatureNames.of({5: "a", 1: "b", 9: "c"})
    b = {5: "x", 2: "y", 10: "z", 0: "w"}
    merged = a.merged(b)
    assert dict(merged) == {0: "w", 1: "b", 2: "y", 5: "a", 9: "c", 10: "z"}
    assert merged.indices.tolist() == sorted(merged.indices.tolist())
    assert dict(merged_names([{}, {3: "q", 5: "first"}, a, b])) == {
        0: "w", 1: "b", 2: "y", 3: "q", 5: "first", 9: "c", 10: "z"}
    assert a.merged({1: "other"}) is a and a.merged({}) is a
    assert dict(FeatureNames().merged(a)) == dict(a)


def test_an_index_given_twice_keeps_its_first_place():
    names = FeatureNames.from_arrays(np.array([7, 3, 7, 3, 1]),
                                     pa.array(["s", "t", "u", "v", "w"]))
    assert dict(names) == {1: "w", 3: "t", 7: "s"}


def test_lookup_and_mapping():
    names = FeatureNames.of({4: "four", 2: "two"})
    assert names.lookup([2, 3, 4, 9]).to_pylist() == ["two", None, "four", None]
    assert FeatureNames().lookup([1, 2]).to_pylist() == [None, None]
    assert names[4] == "four" and names.get(3) is None and 2 in names and 3 not in names
    assert len(names) == 2 and list(names) == [2, 4] and names == {2: "two", 4: "four"}


def test_pickles_as_columns():
    rng = np.random.default_rng(1)
    indices = rng.choice(1 << 24, 50_000, replace=False)
    names = FeatureNames.from_arrays(indices, pa.array([f"f{i}" for i in indices]))
    again = pickle.loads(pickle.dumps(names, protocol=pickle.HIGHEST_PROTOCOL))
    assert again == names and again.indices.dtype == np.int64
