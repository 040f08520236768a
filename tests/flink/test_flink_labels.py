"""Delayed outcomes (``--labels``) on Apache Flink (2 parallel subtasks): the file join in Flink's
batch mode, whose groupBy may hand a key's blocks over in any order, and two timestamped topics
with --label-wait and --expired-label; each model equals the plain run over its joined records in
label order, bit for bit, as on the FnApiRunner and Prism; and the kill campaign over those topics
(a bounded topic is Flink's batch mode); a wait in Flink's streaming mode with its RocksDB state
backend. And the join keyed by example id, spread over two subtasks (``JoinById``)."""
import os

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from tests.helpers.commands import train
from tests.helpers.labels import (HOURS, JOINED, assert_joined, check_timed_join,
                                  kill_campaigns, write_join)
from tests.pipeline.test_join_buckets import join_by_id_checked


def test_labels_files_joined_on_flink(flink_args, tmp_path):
    features, labels, reference, bad = write_join(tmp_path, "features.csv", seed=1)
    joined = train(tmp_path / "joined", "--input", features, *JOINED, "--labels", labels,
                   *flink_args)
    plain = train(tmp_path / "plain", "--input", reference, *JOINED)
    assert_joined(joined, plain, {str(labels)}, bad)


def test_join_by_id_on_flink(flink_args):
    """``JoinById``'s buckets and clocks in Flink's batch mode, keys over two subtasks."""
    with beam.Pipeline(options=PipelineOptions(flink_args)) as p:
        join_by_id_checked(p)


def test_labels_topic_with_a_wait_on_flink(broker, flink_args, tmp_path):
    """A one-hour wait over records timestamped over two days (``check_timed_join``)."""
    check_timed_join(broker.bootstrap_servers, tmp_path, "flink", flink_args, scale=HOURS)


def test_killed_and_resumed_on_flink_the_join_learns_every_label_once(broker, flink_args,
                                                                      tmp_path):
    """``kill_campaigns`` on Flink: a killed client's job fails with its SDK worker (nothing of
    it writes any more) while the resumed run's job starts. 4 kills here (each run starts a
    Flink job); ``UNITLESS_FLINK_KILLS=30`` by hand."""
    kill_campaigns(broker.bootstrap_servers, tmp_path, "flink", flink_args,
                   int(os.environ.get("UNITLESS_FLINK_KILLS", "4")))


def test_labels_streaming_on_flink_with_rocksdb_state(flink_job_server, flink_args, tmp_path):
    """A one-hour wait over files in Flink's streaming mode, Beam's state in Flink's RocksDB
    state backend (``--state_backend rocksdb``, docs/operations.md): as ``check_timed_join``,
    and the job server's log says the learning step's state was RocksDB's."""
    log = flink_job_server.log_path
    before = log.stat().st_size
    check_timed_join(None, tmp_path, "rocksdb", [
        *flink_args, "--streaming", "--state_backend", "rocksdb",
        "--state_backend_storage_path", (tmp_path / "flink-state").as_uri()], "files",
        scale=HOURS)
    with open(log, "rb") as f:
        f.seek(before)
        lines = f.read().decode(errors="replace").splitlines()
    assert any("Learn" in line and "loads the state backend as RocksDBStateBackend" in line
               for line in lines)
