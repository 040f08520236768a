"""KeyedModel, the per-key learner of the pipeline, without Beam."""
import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from unitless.learner import new_state, to_arrow
from unitless.parse.jsonl import parse_jsonl
from unitless.parse.spec import RecordSpec
from unitless.models.keyed_model import KeyedModel
from unitless.models.model_group import ModelGroup

SPEC = RecordSpec(label="label", id="id", bits=10)


def jsonl_block(rows):
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
    predictions, dead, skipped = m.learn_block(jsonl_block(rows))
    assert skipped == 0 and predictions.column("id").to_pylist() == ["a", "c"]
    assert [(d.position, d.reason) for d in dead] == [
        (2, "label 3.0 is not a logistic label (-1/+1, or 0/1)")]
    assert '"label": 3.0' in dead[0].raw  # the parsed values stand in for the raw record
    clean = model()
    clean.learn_block(jsonl_block([rows[0], rows[2]]))
    assert to_arrow(m.state).column("w").to_pylist() == to_arrow(clean.state).column("w").to_pylist()
    assert m.state.examples_seen == 2


def test_a_replayed_block_is_skipped_up_to_the_last_learned_position():
    rows = [f'{{"id": "e{i}", "label": {1 if i % 2 else -1}, "x": {i}.5}}' for i in range(6)]
    m = model()
    m.learn_block(jsonl_block(rows[:4]))
    predictions, dead, skipped = m.learn_block(jsonl_block(rows))  # a source replays from the start
    assert skipped == 4 and dead == [] and predictions.column("id").to_pylist() == ["e4", "e5"]
    assert predictions.column("examples_seen").to_pylist() == [5, 6]


def test_a_model_read_back_dormant_learns_only_what_its_checkpoint_has_not():
    """A resumed model known by its checkpoint's metadata alone (``ModelGroup.dormant``, its
    learner not decoded) skips what it learned; decoded once it has something new, it learns
    that, as the decoded model would; a decoded model that is not the checkpoint read first
    fails the run (what was skipped was skipped by the other)."""
    rows = [f'{{"id": "e{i}", "label": {1 if i % 2 else -1}, "x": {i}.5}}' for i in range(6)]
    m = model()
    m.learn_block(jsonl_block(rows[:4]))
    saved = m.to_table()

    def group_with_dormant():
        group = ModelGroup()
        group.dormant[""] = KeyedModel.from_metadata(json.loads(  # (the blocks' model key)
            saved.schema.metadata[b"unitless"]), None)
        return group

    def learn(group, block, woken):
        read_back = lambda key, _: woken.append(key) or KeyedModel.from_table(saved)  # noqa: E731
        return group.learn(block, lambda k: group.model(k, read_back),
                           known_of=lambda k: group.models.get(k) or group.dormant[k])

    group, woken = group_with_dormant(), []
    replayed = jsonl_block(rows[:4])
    predictions, dead, skipped, models = learn(group, replayed, woken)
    assert (predictions, skipped, models, woken) == (None, 4, [], [])
    replayed.span = (1, 9)  # (made up: read whole to line 9, so learned through it)
    group.learned(replayed)
    assert group.dormant[""].through == {"src": 9}
    predictions, dead, skipped, models = learn(group, jsonl_block(rows), woken)
    assert skipped == 4 and woken == [""] and not group.dormant
    assert models[0].through == {"src": 9}  # (kept when it was decoded)
    assert predictions.column("examples_seen").to_pylist() == [5, 6]
    m.learn_block(jsonl_block(rows))
    assert to_arrow(models[0].state).equals(to_arrow(m.state))
    group = group_with_dormant()
    group.dormant[""].checkpoint_id = "k@3"  # (as if a checkpoint before it were read first)
    try:
        learn(group, jsonl_block(rows), [])
    except RuntimeError as err:
        assert "not the one read before" in str(err)
    else:
        raise AssertionError("a model read back other than the one that skipped was taken")


def test_a_partition_block_continues_a_model_only_right_after_what_it_learned_there():
    """Offsets 1..10 of a Kafka-like partition, read whole (span 0..12: the reader started at
    0, and 11 and 12 were refused or were another key's); cut into parts of 3, each part's span
    starts where the one before ends; a model continues from a part only right after the one
    it learned, also after a round trip through Beam state; a model that learned nothing there
    only from the run's first block there (span from -1)."""
    rows = [f'{{"id": "e{i}", "label": {1 if i % 2 else -1}, "x": {i}.5}}' for i in range(10)]
    whole = jsonl_block(rows)
    whole.restarts_midway, whole.span = True, (0, 12)
    parts = whole.parts(3)
    assert [p.span for p in parts] == [(0, 3), (4, 6), (7, 9), (10, 12)]
    assert [p.positions.tolist() for p in parts] == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]]
    m = model()
    m.enter_source(parts[0])
    assert m.restart == {"src": 0}  # where it starts there
    assert not m.continues(parts[0])  # a model's first block there waits for the watermark
    opening = whole.parts(3)[0]
    opening.span = (-1, 3)  # ... but the run's first block there (read from where it started)
    assert m.continues(opening) and not model().continues(parts[0])
    fresh = model()
    assert fresh.continues(opening)  # (also before it entered the source)
    fresh.enter_source(parts[1])  # a later block came first, then the run's first one
    assert not fresh.continues(parts[1]) and fresh.continues(opening)
    fresh.passed("src", 2)  # (its group's other models learned a block the watermark passed)
    assert fresh.restart == {"src": 3} and fresh.passed_partitions == set()
    m.learn_block(parts[0])
    assert m.passed_partitions == set()  # (its start records there still count)
    m.mark_checkpoint()
    m.passed("src", 3)  # (the watermark passed it)
    assert m.passed_partitions == {"src"} and m.checkpoint_behind()
    assert KeyedModel.from_table(m.to_table()).passed_partitions == {"src"}
    assert m.continues(parts[1]) and not m.continues(parts[2])
    m.learn_block(parts[1])
    m = ModelGroup.from_bytes(ModelGroup({"k": m}).to_bytes()).models["k"]  # (as stored)
    assert m.continues(parts[2]) and not m.continues(parts[3])
    m.learn_block(parts[2])
    m.learn_block(parts[3])
    assert m.through == {"src": 12} and m.positions == {"src": 10}
    # learned on arrival, not yet passed by the watermark: a restart still begins after 3
    assert m.restart == {"src": 3}
    m.passed("src", 10)
    assert m.restart == {"src": 10}
    after = jsonl_block(rows[:1])
    after.restarts_midway, after.positions, after.span = True, np.array([13]), (13, 13)
    assert m.continues(after)
    after.span = (14, 14)  # offset 13 not read: what it held may come later
    assert not m.continues(after)


def test_a_checkpoints_metadata_is_the_model_as_it_was_when_taken():
    """A checkpoint taken is written later (at the bundle's end), and its model may learn on
    meanwhile: its metadata keeps where the model was when it was taken, not where it is when
    written (a resumed run would skip examples its state never learned)."""
    m = KeyedModel("k", new_state("nag", 1 << 4))
    m.learns_to("p0", 5, (0, 5))
    m.restart["p0"], m.unlearned["p1"], m.positions["p1"] = 5, 3, 3
    meta = m.checkpoint_metadata()
    taken = json.loads(json.dumps(meta))
    m.learns_to("p0", 9, (6, 9))
    m.learns_to("p1", 4, (4, 4))
    m.restart["p0"] = 9
    assert json.loads(json.dumps(meta)) == taken


def test_a_groups_beam_state_holds_no_compiled_code_and_pickles_from_threads_at_once():
    """A group's models as Beam state (``to_bytes``) are arrays and settings only: a runner
    with several SDK threads (Flink, parallelism 2) pickles groups at the same time, and numba
    dispatchers do not pickle from two threads at once (nor need to be kept)."""
    rows = [f'{{"id": "e{i}", "label": {1 if i % 2 else -1}, "x": {i}.5}}' for i in range(6)]
    groups = []
    for _ in range(8):
        m = model()
        m.learn_block(jsonl_block(rows))
        groups.append(ModelGroup({"k": m}))
    assert all(b"numba" not in g.to_bytes() for g in groups)
    with ThreadPoolExecutor(8) as pool:
        encoded = list(pool.map(lambda g: g.to_bytes(), groups * 4))
    back = ModelGroup.from_bytes(encoded[0]).models["k"]
    assert back.state.examples_seen == 6
    assert to_arrow(back.state).equals(to_arrow(groups[0].models["k"].state))
