"""KeyedModel, the per-key learner of the pipeline, without Beam."""
import numpy as np

from unitless.connectors.formats import RecordSpec, parse_jsonl
from unitless.learner import new_state, to_arrow
from unitless.pipelines.keyed_model import KeyedModel

SPEC = RecordSpec(label="label", id="id", bits=10)


def block(rows):
    items = [(i + 1, line) for i, line in enumerate(rows)]
    parsed, dead = parse_jsonl(SPEC, "src", items)
    assert dead == []
    parsed.raw = None  # as the pipeline's sources hand blocks on
    return parsed


def model():
    return KeyedModel("k", new_state("nag", 1 << 10, "logistic", bias_index=0))


def test_examples_the_model_refuses_become_dead_letters_and_never_touch_it():
    # a model resumed with a loss the source did not check for: its own checks still hold
    rows = ['{"id": "a", "label": 1, "x": 2.0}', '{"id": "b", "label": 3, "x": 1.0}',
            '{"id": "c", "label": -1, "x": 0.5}']
    m = model()
    predictions, dead, skipped = m.learn_block(block(rows))
    assert skipped == 0 and predictions.column("id").to_pylist() == ["a", "c"]
    assert [(d.position, d.reason) for d in dead] == [
        (2, "label 3.0 is not a logistic label (-1/+1, or 0/1)")]
    assert '"label": 3.0' in dead[0].raw  # the parsed values stand in for the raw record
    clean = model()
    clean.learn_block(block([rows[0], rows[2]]))
    assert to_arrow(m.state).column("w").to_pylist() == to_arrow(clean.state).column("w").to_pylist()
    assert m.state.examples_seen == 2


def test_a_replayed_block_is_skipped_up_to_the_last_learned_position():
    rows = [f'{{"id": "e{i}", "label": {1 if i % 2 else -1}, "x": {i}.5}}' for i in range(6)]
    m = model()
    m.learn_block(block(rows[:4]))
    predictions, dead, skipped = m.learn_block(block(rows))  # a source replays from the start
    assert skipped == 4 and dead == [] and predictions.column("id").to_pylist() == ["e4", "e5"]
    assert predictions.column("examples_seen").to_pylist() == [5, 6]
