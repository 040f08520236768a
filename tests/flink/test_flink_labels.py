"""Delayed outcomes (``--labels``) on Apache Flink (2 parallel subtasks): the file join in Flink's
batch mode, whose groupBy may hand a key's blocks over in any order, and two timestamped topics
with --label-wait and --expired-label; each model equals the plain run over its joined records in
label order, bit for bit, as on the FnApiRunner and Prism."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.integration.test_kafka_labels import check_timed_join  # noqa: E402
from tests.test_delayed_outcomes import assert_joined, train, write_join  # noqa: E402


def test_labels_files_joined_on_flink(flink_args, tmp_path):
    features, labels, reference, bad = write_join(tmp_path, "features.csv", seed=1)
    joined = train(tmp_path, "joined", [features], "--labels", str(labels), *flink_args)
    assert_joined(joined, train(tmp_path, "plain", [reference]), {str(labels)}, bad)


def test_labels_topic_with_a_wait_on_flink(broker, flink_args, tmp_path):
    check_timed_join(broker.bootstrap_servers, tmp_path, "flink", flink_args)
