"""--model-ttl: a model key not seen for that long (on the input's clock, the watermark's) leaves
Beam state and the worker's memory, its newest checkpoint holding it, and is read back when the
key returns: every prediction and the final models bit for bit as if it had stayed; never while
examples of its own still wait. Streaming on Prism (TestStream), blocks of a Kafka-like
partition one second apart; on a real broker, tests/integration/test_kafka_streaming.py."""
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_stream
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from unitless.pipelines.config import configure

from tests.ordered import (KEYS, assert_beam_models_are_cli_models, command_run,
                           partition_blocks, stream_run)

BLOCK = 25


def write_idle_key_examples(path):
    """300 examples, 12 blocks of 25: k0 has examples in the first two blocks and the last four
    only, the other keys in every block."""
    import numpy as np
    rng = np.random.default_rng(11)
    with open(path, "w") as f:
        f.write("id,key,a,b,label\n")
        for i in range(300):
            keys = KEYS if i < 2 * BLOCK or i >= 8 * BLOCK else KEYS[1:]
            a, b = rng.normal() * 1e3, rng.normal() * 1e-2
            label = 1 if a / 1e3 + b / 1e-2 + rng.normal() > 0 else -1
            f.write(f"e{i},{keys[i % len(keys)]},{a},{b},{label}\n")


def counter(result, name):
    found = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(c.committed or 0 for c in found)


def test_an_idle_model_leaves_state_and_returns_bit_for_bit(tmp_path):
    """k0 is not seen from the third block to the eighth (6 s on the blocks' clock; TTL 3 s):
    it leaves state, and returns when its examples do."""
    path = tmp_path / "p.csv"
    write_idle_key_examples(path)
    expected = command_run(tmp_path, [path], BLOCK)
    blocks = partition_blocks(path, BLOCK, id_column="id", model_key_column="key")
    assert len(blocks) == 12
    stream = test_stream.TestStream()
    for i, block in enumerate(blocks):  # stamped i + 1 s, the watermark half a second behind
        stream = stream.add_elements([TimestampedValue(block, Timestamp(i + 1))])
        stream = stream.advance_watermark_to(i + 1.5)
    stream = stream.advance_watermark_to_infinity()
    result, got = stream_run(tmp_path, stream, chunk_size=BLOCK, checkpoint_every=20,
                             model_ttl="3s")
    assert len(got) == len(expected) == 300
    assert got == expected  # every example once, in order, by the same model: bit-identical
    assert_beam_models_are_cli_models(tmp_path)
    # (all models may also leave at the end of the input, as the watermark passes every timer)
    assert counter(result, "models_evicted") >= 1
    assert counter(result, "models_returned") == 1


def test_a_model_with_examples_waiting_stays():
    """Which models leave: those last seen at or before the TTL's start, but those whose
    examples still wait in the keyed step's state (Prism hands a stateful step its elements
    and timers in time order, so a block that waits past its model's TTL is not made there:
    Flink and Dataflow do deliver them so), which count as seen now and stay."""
    from unitless.learner import new_state
    from unitless.store.keyed_model import KeyedModel, ModelGroup
    group = ModelGroup()
    for key, seen in (("a", 1_000), ("b", 2_000), ("c", 5_000), ("d", None)):
        model = group.model(key, lambda k, evicted: KeyedModel(k, new_state("nag", 4)))
        model.last_seen = seen
    idle = group.idle_since(2_000, 6_000, held={"b"})
    assert [m.key for m in idle] == ["a"]
    assert group.models["b"].last_seen == 6_000  # held: seen now
    group.evict(idle[0])
    assert set(group.models) == {"b", "c", "d"} and group.evicted == {"a": (0, 0)}
    assert group.least_recently_seen() == 5_000
    def cannot_return(key, evicted):
        raise RuntimeError("its checkpoint is gone")
    with pytest.raises(RuntimeError):
        group.model("a", cannot_return)
    assert group.evicted == {"a": (0, 0)}  # (a retry must not start it afresh)
    given = []
    back = group.model("a", lambda k, evicted: given.append(evicted) or KeyedModel(
        k, new_state("nag", 4)))
    assert back.key == "a" and given == [(0, 0)] and group.evicted == {}


def test_a_groups_state_written_before_models_could_leave_still_reads():
    """Beam state an earlier version wrote (a runner's savepoint, an updated job): the models
    pickled alone."""
    import pickle
    from unitless.learner import new_state
    from unitless.store.keyed_model import KeyedModel, ModelGroup
    models = {k: KeyedModel(k, new_state("nag", 4)) for k in ("a", "b", "c")}
    for some in (dict(list(models.items())[:n]) for n in (1, 2, 3)):
        group = ModelGroup.from_bytes(b"0" * 32 + pickle.dumps(some))
        assert sorted(group.models) == sorted(some) and group.evicted == {}


def test_model_ttl_is_a_duration_and_not_for_sharded_models():
    assert configure(model_ttl="15m").model_ttl == 900
    assert configure(model_ttl="1.5d").model_ttl == 129_600
    assert configure(model_ttl=None).model_ttl == 0
    for bad in ("soon", "-1s", "5w"):
        with pytest.raises(ValueError, match="--model-ttl wants a duration"):
            configure(model_ttl=bad)
    with pytest.raises(ValueError, match="without --shards"):
        configure(model_ttl="1h", shards=2, feedback_topic="kafka://localhost:9092/f")
