"""One model over feature shards on Apache Flink (streaming, 2 parallel subtasks, the shards'
parts through a real Kafka topic): every (model, shard) learns exactly what the one-process
reference protocol learns, and every example is predicted once, as on Prism; on the session's
job server and on the embedded cluster `--runner FlinkRunner` starts, whose network buffers
unitless sets to go within 5 ms."""
import logging

import pyarrow.compute as pc
import pytest

from tests.helpers.sharding import (KEYS, feedback_topic, reference, shard_states,
                                    write_examples)
from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.runtime.flink import BUFFER_TIMEOUT


@pytest.mark.parametrize("runner", ["job server", "FlinkRunner"])
def test_shards_on_flink_learn_what_the_reference_protocol_learns(broker, runner, request,
                                                                   tmp_path, caplog,
                                                                   monkeypatch):
    if runner == "FlinkRunner":
        flink_args = ["--runner", "FlinkRunner", "--parallelism", "2"]
        monkeypatch.setenv("FLINK_CONF_DIR", "-")  # (so that it is unset again afterwards)
        monkeypatch.delenv("FLINK_CONF_DIR")
        caplog.set_level(logging.INFO)  # (the job server's log, which Beam logs line by line)
    else:
        flink_args = request.getfixturevalue("flink_args")
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
    if runner == "FlinkRunner":
        assert f"Loading configuration property: {BUFFER_TIMEOUT}, 5 ms" in caplog.text
