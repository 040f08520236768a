"""--model-ttl: a model key not seen for that long (on the input's clock, the watermark's) leaves
Beam state and the worker's memory, its newest checkpoint holding it, and is read back when the
key returns: every prediction and the final models bit for bit as if it had stayed; never while
examples of its own still wait. Streaming on Prism (TestStream), blocks of a Kafka-like
partition one second apart; on a real broker, tests/kafka/test_kafka_streaming.py. A
file's run, whose timers Beam fires in any order once its input ends: the learning step driven
directly."""
import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_stream
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from unitless.pipelines.config import configure
from unitless.pipelines.ordering import InOrder

from tests.helpers.ordered import (KEYS, assert_beam_models_are_cli_models, command_run,
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


@pytest.mark.prism
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
    from unitless.models.keyed_model import KeyedModel
    from unitless.models.model_group import ModelGroup
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
    from unitless.models.keyed_model import KeyedModel
    from unitless.models.model_group import ModelGroup
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


class KeyedStep:
    """The learning step (``InOrder`` over ``LearnBlocks``) called as a runner calls it, each
    model key's Beam state and timers held as the DirectRunner holds them, in memory; its
    outputs [(method name, tag, value)]."""

    def __init__(self, cfg):
        from unitless.pipelines.train import LearnBlocks
        self.step = InOrder(LearnBlocks(cfg))
        self.step.setup()
        self.keys = {}
        self.outputs = []

    def key(self, key):
        """The key's state and timers, as the step's methods name them."""
        from apache_beam.runners.direct.direct_userstate import (BagRuntimeState,
                                                                 ReadModifyWriteRuntimeState)
        from apache_beam.transforms.userstate import RuntimeTimer
        if key not in self.keys:
            step = self.step
            self.keys[key] = dict(
                stored=ReadModifyWriteRuntimeState(step.MODEL, None, list),
                waiting=BagRuntimeState(step.WAITING, None, list),
                earliest=ReadModifyWriteRuntimeState(step.EARLIEST, None, list),
                expire_at=ReadModifyWriteRuntimeState(step.EXPIRE_AT, None, list),
                log=BagRuntimeState(step.LOG, None, list),
                release=RuntimeTimer(), end=RuntimeTimer(), idle=RuntimeTimer(),
                expire=RuntimeTimer())
        return self.keys[key]

    def bundle(self, calls):
        """One bundle of ``calls`` [(method name, key, its other arguments)]."""
        self.step.start_bundle()
        for name, key, arguments in calls:
            state = self.key(key)
            method = getattr(self.step, name)
            wanted = method.__code__.co_varnames[:method.__code__.co_argcount]
            for output in method(**{n: v for n, v in state.items() if n in wanted},
                                 **arguments):
                tag = output.tag if isinstance(output, beam.pvalue.TaggedOutput) else "main"
                self.outputs.append((name, tag, getattr(output, "value", output)))
        self.step.finish_bundle()


@pytest.mark.parametrize("first", ["expire", "end"])
def test_models_leaving_at_a_files_end_are_counted_in_either_timer_order(tmp_path, first):
    """A file's blocks are stamped at the start of time, so once the input ends, each key's TTL
    timer and its end-of-input timer are both due, and Beam fires them in either order. The
    models leave by whichever comes first, counted as they leave: the run's accounts add up
    (the models' own count is the examples predicted), and they left by the TTL when it came
    first."""
    from collections import Counter
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.timestamp import MIN_TIMESTAMP
    from unitless.pipelines.accounting import ACCOUNTS, RANGES, Tally, covered_twice, \
        predictions_tally
    from unitless.pipelines.io.files import ReadFiles
    from unitless.pipelines.keying import KeyByModel
    path = tmp_path / "p.csv"
    write_idle_key_examples(path)
    cfg = configure([str(path)], id_column="id", model_key_column="key", chunk_size=BLOCK,
                    model_dir=str(tmp_path / "models"), predictions=str(tmp_path / "p"),
                    dead_letter=None, model_groups=2, model_ttl="1s")
    read = ReadFiles("csv", cfg.spec, BLOCK, None, None, spans=True)
    read.setup()
    blocks = list(read.process(str(path)))
    read.teardown()
    assert sum(map(len, blocks)) == 300
    keyed = KeyByModel(BLOCK, model_groups=2)
    keyed.setup()
    keyed.start_bundle()
    elements = [e for b in blocks for e in keyed.process(b, MIN_TIMESTAMP, GlobalWindow())]
    elements += list(keyed.finish_bundle())
    step = KeyedStep(cfg)
    step.bundle([("process", e.value[0], dict(element=e.value, timestamp=MIN_TIMESTAMP))
                 for e in elements])
    keys = sorted(step.keys)
    assert len(keys) == 2
    expire_at = {k: step.key(k)["expire_at"].read() for k in keys}
    assert set(expire_at.values()) == {MIN_TIMESTAMP.micros + 1_000_000}
    timers = {"expire": lambda k: ("expire_idle", k, dict(
                  key=k, fired=Timestamp(micros=expire_at[k]))),
              "end": lambda k: ("end_of_input", k, dict(key=k))}
    order = [first, *(set(timers) - {first})]
    step.bundle([timers[t](k) for k in keys for t in order])
    step.step.teardown()
    tallies = [predictions_tally(v) if tag == "main" else v
               for _, tag, v in step.outputs if tag in ("main", ACCOUNTS)]
    total = sum(tallies, Tally(read=300))
    assert total.problem(resumed=False) is None
    assert total.learned == total.in_models == 300
    # (each model's range of examples_seen, reported by the timer it left by)
    ranges = [(name, r) for name, tag, value in step.outputs if tag == RANGES
              for r in value[1]]
    assert {name for name, _ in ranges} == {timers[first](keys[0])[0]}
    examples = Counter(k for b in blocks for k in b.keys.to_pylist())
    assert sorted(r for _, r in ranges) == [(k, 0, examples[k]) for k in KEYS]
    assert covered_twice([r for _, r in ranges]) == 0
