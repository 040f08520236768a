"""Scoring refuses what training refuses, in training's words: a feature value that is not
finite or past its bound, a label that is not the model's; and an example whose prediction or
loss is not finite. The refused go to the dead letters (RunInference: ``refused``), so no
output holds NaN or infinity, and every JSON output parses strictly."""
import warnings

import numpy as np
import pytest

from tests.helpers.commands import train
from tests.helpers.messages import strict_json_lines, strict_loads
from tests.unit.test_hostile_records import reading, write_fuzz_input
from unitless.cli.main import main
from unitless.learner import to_arrow
from unitless.models.keyed_model import KeyedModel
from unitless.store.catalog import load_latest
from unitless.store.per_key import write_checkpoint

HEADER = "id,segment,label,x1,x2"
KEYED = ["--id-column", "id", "--model-key-column", "segment"]


def rows(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) * [1e-3, 1e3]
    y = np.where(X @ [1e3, -1e-3] > 0, 1, -1)
    return [f"e{seed}-{i},{'ab'[i % 2]},{y[i]},{float(X[i, 0])!r},{float(X[i, 1])!r}"
            for i in range(n)]


# records training refuses (or serves) though they parse, each beside good ones
PROBES = ["n1,a,1,nan,2.0", "n2,b,-1,inf,2.0", "n3,a,,-inf,2.0", "n4,b,1,0.5,1e300",
          "n5,a,5,0.5,2.0", "n6,b,0.5,0.5,2.0", "n7,a,,0.5,-1e101", "u1,a,,0.5,2.0"]


def write_csv(path, lines):
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    return path


def score(tmp_path, data, models, *extra):
    """`unitless score` (the command's default runner) with JSON lines outputs: (the score
    rows, the dead letters), each line parsed strictly, and the RuntimeWarnings it raised."""
    pred, dead = tmp_path / "scores", tmp_path / "score-dead"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["score", "--input", str(data), "--model-dir", str(models),
                     "--predictions", str(pred), "--dead-letter", str(dead),
                     "--output-format", "jsonl", *map(str, extra)])
    assert code == 0
    runtime = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    return strict_json_lines(pred), strict_json_lines(dead), runtime


def reasons(dead_letters):
    return {d["position"]: d["reason"] for d in dead_letters}


def test_score_refuses_what_training_refuses_with_its_reasons(tmp_path):
    models = train(tmp_path / "trained", "--input", write_csv(tmp_path / "t.csv", rows(200, 1)),
                   *KEYED, "--algorithm", "nag") / "models"
    probe = write_csv(tmp_path / "probe.csv", rows(10, 2) + PROBES + rows(10, 3))
    trained = train(tmp_path / "again", "--input", probe, *KEYED, "--algorithm", "nag",
                    "--max-dead-fraction", "1")
    expected = reasons(strict_json_lines(trained / "dead"))
    assert len(expected) == len(PROBES) - 1  # (u1 has no label: served)
    scored, dead, runtime = score(tmp_path, probe, models, *KEYED)
    assert reasons(dead) == expected
    assert any("is not finite with |x| ≤ 1e+100" in r for r in expected.values())
    assert any("label 5.0 is not a logistic label" in r for r in expected.values())
    assert sorted(r["id"] for r in scored) == sorted(
        [f"e2-{i}" for i in range(10)] + [f"e3-{i}" for i in range(10)] + ["u1"])
    assert all(np.isfinite(r["prediction"]) for r in scored)
    assert runtime == []


def overflowing_model(tmp_path):
    """A model directory whose key a model is sgd (squared loss) with weights of 1e300: a
    feature value of 1e100 gives it an infinite prediction, one of 1e-100 a finite prediction
    of 1e200 whose squared loss is infinite."""
    trained = train(tmp_path / "sgd", "--input", write_csv(tmp_path / "t.csv", rows(20, 1)),
                    *KEYED, "--algorithm", "sgd", "--loss", "squared", "--no-bias") / "models"
    state = KeyedModel.from_table(load_latest(str(trained), "a")[1]).state
    state.V[:, :, :state.n_slots] = 1e300
    write_checkpoint(str(tmp_path / "huge"), "a", to_arrow(state), state.examples_seen)
    return tmp_path / "huge"


def test_a_prediction_or_loss_that_is_not_finite_is_refused_with_its_reason(tmp_path):
    models = overflowing_model(tmp_path)
    probe = write_csv(tmp_path / "probe.csv", ["big,a,1,1e100,0", "lossy,a,1,1e-100,0",
                                               "fine,a,1,0,0", "unlabeled,a,,1e-100,0"])
    scored, dead, runtime = score(tmp_path, probe, models, *KEYED, "--no-bias")
    assert reasons(dead) == {2: "the prediction is not finite", 3: "the loss is not finite"}
    # (refused where the model is, past the reader: the record as parsed, as training's are)
    assert [strict_loads(d["raw"])["id"] for d in dead] == ["big", "lossy"]
    assert sorted((r["id"], r["prediction"]) for r in scored) == [
        ("fine", 0.0), ("unlabeled", pytest.approx(1e200))]
    assert runtime == []


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_scoring_dead_letters_equal_training_on_the_hostile_corpus(tmp_path, fmt):
    """The hostile-record corpus of test_hostile_records: scored by models trained on its good
    records, every record training refuses is refused, with training's reason, and no other."""
    mixed, only_good, bad, _, _ = write_fuzz_input(tmp_path, fmt, seed=11)
    options = reading(fmt)
    models = train(tmp_path / "good-run", "--input", only_good, *options) / "models"
    training = reasons(strict_json_lines(train(tmp_path / "mixed-run", "--input", mixed,
                                               *options) / "dead"))
    assert set(training) == set(bad)
    without = [o for i, o in enumerate(options)
               if o != "--max-dead-fraction" and options[i - 1] != "--max-dead-fraction"]
    _, dead, runtime = score(tmp_path, mixed, models, *without)
    scoring = reasons(dead)
    assert set(scoring) == set(training)
    # a record of a key no model has ('': the hostile record names none) is refused for that
    # where its label is not the learner's: scoring knows a learner by its model only
    differ = {p: (scoring[p], training[p]) for p in training if scoring[p] != training[p]}
    assert all(s.startswith("no model for key ") and " label" in t and (
        "is not a logistic label" in t or "is not a class" in t) for s, t in differ.values())
    assert len(differ) < len(training) // 10, len(differ)
    assert runtime == []
