"""The training pipeline against a real Kafka broker (KRaft, started by deploy/kafka)."""
import json
import os
import time

import numpy as np
import pytest
from kafka.partitioner.default import murmur2

from tests.helpers.commands import create_topics, send, train
from tests.helpers.kafka_io import KEYS, consume_all, keyed, keyed_examples
from tests.helpers.messages import check_message, strict_loads
from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.store.catalog import load_latest
from unitless.store.starts import read_starts, starts_dir


def topic_run(bootstrap, topic):
    """Options of a run over ``topic``, its predictions and dead letters on topics beside it."""
    return ["--input", f"kafka://{bootstrap}/{topic}", "--format", "jsonl", "--id-column", "id",
            "--model-key-column", "segment", "--chunk-size", "100",
            "--predictions", f"kafka://{bootstrap}/{topic}-predictions",
            "--dead-letter", f"kafka://{bootstrap}/{topic}-dead"]


def test_examples_in_predictions_out_equal_to_the_file_pipeline(broker, tmp_path):
    bootstrap = broker.bootstrap_servers
    topic = "examples"
    create_topics(bootstrap, topic, f"{topic}-dead")
    create_topics(bootstrap, f"{topic}-predictions", partitions=5)  # a partition for each key
    rows = keyed_examples(900, seed=1)
    bad = [b"{not json", b"\xff\xfe{binary, not UTF-8",
           json.dumps({"id": "x", "segment": "alpha", "label": "nan", "a": 1}).encode(),
           json.dumps({"id": "y", "segment": "alpha", "label": 5, "a": 1}).encode()]
    send(bootstrap, topic, keyed(rows, bad))
    train(tmp_path / "run", *topic_run(bootstrap, topic))

    messages = consume_all(bootstrap, f"{topic}-predictions", len(rows))
    assert len(messages) == len(rows)
    predictions = [strict_loads(m.value) for m in messages]
    assert all(p["schema"] == "unitless.prediction/4" for p in predictions)
    for p in predictions:
        check_message(p)
    assert {p["id"] for p in predictions} == {r["id"] for r in rows}
    for m, p in zip(messages, predictions):  # in the partition Kafka's Java client would pick
        assert m.key.decode() == p["model_key"]
        assert m.partition == (murmur2(m.key) & 0x7FFFFFFF) % 5
    for key in KEYS:  # in order per model key
        seen = [p["examples_seen"] for p in predictions if p["model_key"] == key]
        assert sorted(seen) == list(range(1, len(seen) + 1))

    # the same examples through the file pipeline give the same predictions
    path = tmp_path / "same.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["train", "--input", str(path), "--id-column", "id", "--model-key-column",
                 "segment", "--model-dir", str(tmp_path / "file" / "models"),
                 "--predictions", str(tmp_path / "file" / "pred"),
                 "--dead-letter", str(tmp_path / "file" / "dead")]) == 0
    from_file = {r["id"]: r["prediction"] for r in read_output(
        str(tmp_path / "file" / "pred")).to_pylist()}
    for p in predictions:
        assert p["prediction"] == pytest.approx(from_file[p["id"]], rel=1e-12, abs=1e-15)

    dead = consume_all(bootstrap, f"{topic}-dead", len(bad))
    assert sorted(m.value for m in dead) == sorted(bad)
    for m in dead:
        headers = dict(m.headers)
        assert headers["unitless.source"].decode().startswith(f"{topic}/")
        assert headers["unitless.reason"]


def test_restart_with_resume_learns_each_example_exactly_once(broker, tmp_path):
    bootstrap = broker.bootstrap_servers
    topic = "stream"
    create_topics(bootstrap, topic, f"{topic}-predictions", f"{topic}-dead")
    # (gamma has nothing new after the restart: what the resumed run reads again of it is all
    # replays, and it must not leave a start record holding the partition back)
    first = keyed_examples(600, seed=2)
    second = [r for r in keyed_examples(450, seed=3) if r["segment"] != "gamma"]
    send(bootstrap, topic, keyed(first))
    train(tmp_path / "resumed", *topic_run(bootstrap, topic), "--checkpoint-every", "50")
    # the reading stage's start records are gone once every model's restart position passed
    # them (at the end of the input at the latest): a resume restarts from the checkpoints
    starts = starts_dir(str(tmp_path / "resumed" / "models"))
    assert os.path.isdir(starts) and read_starts(starts) == {}
    send(bootstrap, topic, keyed(second))
    train(tmp_path / "resumed", *topic_run(bootstrap, topic), "--checkpoint-every", "50",
          "--resume")
    assert read_starts(starts) == {}
    # one uninterrupted run over everything, into a fresh model dir
    train(tmp_path / "whole", *topic_run(bootstrap, topic), "--checkpoint-every", "50")
    for key in KEYS:
        a = load_latest(str(tmp_path / "resumed" / "models"), key)[1]
        b = load_latest(str(tmp_path / "whole" / "models"), key)[1]
        ma, mb = (json.loads(t.schema.metadata[b"unitless"]) for t in (a, b))
        n_key = sum(r["segment"] == key for r in first + second)
        assert ma["examples_seen"] == mb["examples_seen"] == n_key
        np.testing.assert_allclose(a.column("w").to_numpy(), b.column("w").to_numpy(),
                                   rtol=1e-12, atol=0)
        assert ma["input_positions"] == mb["input_positions"]


def test_unreachable_broker_is_a_clear_error_within_bounded_time(kafka_client, tmp_path, capsys):
    started = time.time()
    code = main(["train", "--input", "kafka://127.0.0.1:9/none", "--model-dir",
                 str(tmp_path / "m")])
    assert code == 2
    assert time.time() - started < 30
    assert "unitless: error: Kafka broker 127.0.0.1:9 unreachable" in capsys.readouterr().err


def test_score_reads_examples_from_kafka_and_writes_scores_to_kafka(broker, tmp_path):
    # models trained from a file; scoring reads a topic (labels optional, a key without a
    # model and a broken message become dead letters) and writes a message per score
    bootstrap = broker.bootstrap_servers
    topic = "to-score"
    create_topics(bootstrap, topic, f"{topic}-scores", f"{topic}-dead")
    rows = keyed_examples(600, seed=4)
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    models = str(tmp_path / "models")
    assert main(["train", "--input", str(path), "--id-column", "id", "--model-key-column",
                 "segment", "--model-dir", models, "--predictions", str(tmp_path / "pred"),
                 "--dead-letter", str(tmp_path / "dead")]) == 0
    fresh = keyed_examples(300, seed=5)
    for r in fresh[::2]:
        del r["label"]
    unknown = dict(fresh[0], id="u", segment="delta")
    send(bootstrap, topic, keyed(fresh + [unknown], bad=[b"{broken"]))
    assert main(["score", "--input", f"kafka://{bootstrap}/{topic}", "--id-column", "id",
                 "--model-key-column", "segment", "--model-dir", models,
                 "--predictions", f"kafka://{bootstrap}/{topic}-scores",
                 "--dead-letter", f"kafka://{bootstrap}/{topic}-dead"]) == 0
    scores = [strict_loads(m.value) for m in consume_all(bootstrap, f"{topic}-scores", 300)]
    assert all(s["schema"] == "unitless.score/1" for s in scores)
    for s in scores:
        check_message(s)
    dead = consume_all(bootstrap, f"{topic}-dead", 2)
    assert sorted(s["id"] for s in scores) == sorted(r["id"] for r in fresh)
    # the same scores as scoring the same examples from a file
    file_input = tmp_path / "fresh.jsonl"
    file_input.write_text("".join(json.dumps(r) + "\n" for r in fresh))
    assert main(["score", "--input", str(file_input), "--id-column", "id",
                 "--model-key-column", "segment", "--model-dir", models,
                 "--predictions", str(tmp_path / "scores"), "--dead-letter",
                 str(tmp_path / "score_dead")]) == 0
    from_file = {r["id"]: r for r in read_output(str(tmp_path / "scores")).to_pylist()}
    for s in scores:
        assert s["prediction"] == pytest.approx(from_file[s["id"]]["prediction"], rel=1e-12)
        assert (s["loss"] is None) == ("label" not in fresh[int(s["id"].split("-")[1])])
    reasons = sorted(dict(m.headers)["unitless.reason"].decode() for m in dead)
    assert len(dead) == 2 and "invalid JSON" in reasons[0], reasons
    assert "no model for key 'delta'" in reasons[1], reasons
    assert sorted(m.value for m in dead) == sorted([b"{broken", json.dumps(unknown).encode()])


def test_score_takes_the_model_key_from_the_message_key(broker, tmp_path):
    """Without --model-key-column a message's key is its model key, for scoring as for
    training: every example finds its model (the reader's check asks for it by that key)."""
    bootstrap, topic = broker.bootstrap_servers, "score-by-message-key"
    create_topics(bootstrap, topic, f"{topic}-scores", f"{topic}-dead")
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in keyed_examples(300, seed=6)))
    models = str(tmp_path / "models")
    assert main(["train", "--input", str(path), "--id-column", "id", "--model-key-column",
                 "segment", "--model-dir", models, "--predictions", str(tmp_path / "pred"),
                 "--dead-letter", str(tmp_path / "dead")]) == 0
    fresh = [{k: v for k, v in r.items() if k != "label"} for r in keyed_examples(60, seed=7)]
    send(bootstrap, topic, keyed(fresh))  # (keyed by segment; the field is a feature here)
    assert main(["score", "--input", f"kafka://{bootstrap}/{topic}", "--id-column", "id",
                 "--model-dir", models, "--predictions", f"kafka://{bootstrap}/{topic}-scores",
                 "--dead-letter", f"kafka://{bootstrap}/{topic}-dead"]) == 0
    scores = [json.loads(m.value) for m in consume_all(bootstrap, f"{topic}-scores", 60)]
    assert sorted(s["model_key"] for s in scores) == sorted(KEYS[i % 3] for i in range(60))
    assert consume_all(bootstrap, f"{topic}-dead", 1, timeout=3) == []


def test_a_partitions_blocks_tile_its_offsets_from_where_the_run_started(broker, tmp_path):
    """The Kafka reader on the FnApiRunner over a real topic: each partition's blocks tile the
    offsets read, the first one's span from -1 (nothing before it is read in this run, so a
    model learns it on arrival: ``KeyedModel.continues``), also when the run starts midway (a
    resumed run); a range that is not where the run started gets no such span."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that

    from unitless.connectors.kafka import KafkaSourceConfig, KafkaTopic
    from unitless.pipelines.config import configure
    from unitless.pipelines.io.partitions import ReadPartition
    from unitless.pipelines.config import learner_check
    bootstrap = broker.bootstrap_servers
    topic = "tiles"
    create_topics(bootstrap, topic, partitions=1)
    send(bootstrap, topic, keyed(keyed_examples(250, seed=4)))
    cfg = configure([f"kafka://{bootstrap}/{topic}"], id_column="id",
                    model_key_column="segment", chunk_size=100)
    source = KafkaSourceConfig(KafkaTopic.parse(cfg.inputs[0]), cfg.format, cfg.spec,
                               learner_check(cfg), 60)

    def spans(element, expected):
        def check(blocks):
            got = sorted((b.span, int(b.positions[0]), int(b.positions[-1])) for b in blocks)
            assert [s for s, _, _ in got] == expected, got
            assert all(s[1] == last for s, _, last in got)
        # (the FnApiRunner named: after Beam's default DirectRunner here, this process's later
        # Prism pipelines failed to start, Beam trying to download a Prism of its own)
        with beam.Pipeline(runner=FnApiRunner()) as p:
            blocks = (p | beam.Create([element]) | beam.ParDo(ReadPartition(source))
                      .with_outputs("dead", main="blocks")).blocks
            assert_that(blocks, check)

    spans((0, 0, 250), [(-1, 59), (60, 119), (120, 179), (180, 239), (240, 249)])
    spans((0, 100, 250), [(-1, 159), (160, 219), (220, 249)])  # (resumed at 100)

    # a range split off the run's (here by hand: from 100 on), which is not where it started
    from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
    from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
    reader = ReadPartition(source)
    reader.setup()
    try:
        out = list(reader.process((0, 0, 250), OffsetRestrictionTracker(OffsetRange(100, 250)),
                                  ManualWatermarkEstimator(None)))
    finally:
        reader.teardown()
    assert [b.value.span for b in out] == [(100, 159), (160, 219), (220, 249)]


def test_a_range_split_off_by_the_runner_starts_at_or_past_every_stamp_it_leaves_behind(
        broker, tmp_path):
    """The runner may split a partition's range (at fraction 0) between two claims, while the
    reader still holds claimed records not yet handed on; the range split off starts with the
    reader's watermark at that moment. Every block the first range then hands on is stamped at
    or before that watermark, so the rest's blocks, stamped later than it on any worker's
    clock, are learned after them."""
    from apache_beam.io.restriction_trackers import OffsetRange
    from apache_beam.io.watermark_estimators import ManualWatermarkEstimator

    from unitless.connectors.kafka import KafkaSourceConfig, KafkaTopic
    from unitless.pipelines.config import configure
    from unitless.pipelines.io.partitions import ReadPartition, _PartitionTracker
    from unitless.pipelines.config import learner_check
    bootstrap = broker.bootstrap_servers
    topic = "split"
    create_topics(bootstrap, topic, partitions=1)
    send(bootstrap, topic, keyed(keyed_examples(250, seed=5)))
    cfg = configure([f"kafka://{bootstrap}/{topic}"], id_column="id",
                    model_key_column="segment")
    source = KafkaSourceConfig(KafkaTopic.parse(cfg.inputs[0]), cfg.format, cfg.spec,
                               learner_check(cfg), 100)
    estimator = ManualWatermarkEstimator(None)

    class SplitAfterFirstClaim(_PartitionTracker):  # (as a runner's split request would)
        split_at = None

        def try_claim(self, position):
            claimed = super().try_claim(position)
            if claimed and self.split_at is None:
                self.split_at = estimator.current_watermark()
                assert self.try_split(0) is not None
            return claimed

    tracker = SplitAfterFirstClaim(OffsetRange(0, 250))
    reader = ReadPartition(source)
    reader.setup()
    try:
        out = [v for v in reader.process((0, 0, 250), tracker, estimator)
               if hasattr(v, "timestamp")]
    finally:
        reader.teardown()
    assert out and tracker.split_at is not None
    assert all(v.timestamp <= tracker.split_at for v in out), (tracker.split_at, out)
    assert tracker.current_restriction().stop == out[-1].value.span[1] + 1 < 250


def test_read_examples_from_a_topic_in_the_users_own_pipeline(broker, tmp_path):
    """``ReadExamples`` over a topic without ``learner=`` (the user's own pipeline, which checks
    nothing more than the format does): every record read is in a block, each unreadable one
    in its dead letters. (It called the missing check on the first poll before.)"""
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to
    from unitless.beam import ReadExamples
    from tests.helpers.runners import pipeline
    bootstrap, topic = broker.bootstrap_servers, "own-pipeline"
    create_topics(bootstrap, topic)
    rows = keyed_examples(60, seed=4)
    send(bootstrap, topic, keyed(rows, [b"{not json"]))
    with pipeline("fnapi") as p:
        read = ReadExamples(f"kafka://{bootstrap}/{topic}", format="jsonl", id_column="id",
                            model_key_column="segment")
        ids = p | read | beam.FlatMap(lambda block: block.ids.to_pylist())
        assert_that(ids, equal_to([r["id"] for r in rows]))
        dead = read.dead_letters | beam.FlatMap(lambda table: table.column("raw").to_pylist())
        assert_that(dead, equal_to([b"{not json"]), label="dead letters")
