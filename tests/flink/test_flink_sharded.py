"""One model over feature shards on Apache Flink (streaming, 2 parallel subtasks, the shards'
parts through a real Kafka topic): every (model, shard) learns exactly what the one-process
reference protocol learns, and every example is predicted once, as on Prism."""
import sys
from pathlib import Path

import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.sharding import (KEYS, feedback_topic, reference, shard_states,  # noqa: E402
                            write_examples)
from unitless.cli import main  # noqa: E402
from unitless.connectors.files import read_output  # noqa: E402


def test_shards_on_flink_learn_what_the_reference_protocol_learns(broker, flink_args,
                                                                   tmp_path):
    data = write_examples(tmp_path / "examples.csv", 72, 21)
    shards, delay = 3, 2
    code = main(["train", "--input", str(data), "--id-column", "id", "--model-key-column",
                 "segment", "--chunk-size", "10", "--model-dir", str(tmp_path / "models"),
                 "--predictions", str(tmp_path / "predictions"), "--dead-letter",
                 str(tmp_path / "dead"), "--shards", str(shards), "--max-delay", str(delay),
                 "--feedback-topic", feedback_topic(broker.bootstrap_servers), *flink_args,
                 "--streaming"])
    assert code == 0
    got = read_output(str(tmp_path / "predictions"))
    assert sorted(got.column("id").to_pylist()) == sorted(f"r{i}" for i in range(72))
    for key in KEYS:
        mine = got.filter(pc.equal(got.column("model_key"), key)).sort_by("examples_seen")
        assert mine.column("examples_seen").to_pylist() == list(range(1, 37))
        result, expected = reference(data, key, shards, delay)
        assert mine.column("prediction").to_numpy().tobytes() == result.scores[:, 0].tobytes()
        for state, want in zip(shard_states(tmp_path / "models", key, shards), expected):
            assert state.examples_seen == 36
            assert state.dense_vectors().tobytes() == want.dense_vectors().tobytes()
            assert state.S.tobytes() == want.S.tobytes()
