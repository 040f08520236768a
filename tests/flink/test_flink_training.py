"""The training pipeline on Apache Flink (Beam's portable Flink runner, an embedded local Flink
1.19 cluster, 2 parallel subtasks) gives the FnApiRunner's predictions and checkpoints, bit for
bit: files in Flink's batch and streaming modes, a bounded Kafka topic, and `unitless train
--runner FlinkRunner` with no other Flink option. Every ninth example has no label: served in
its place in its key's order, not learned."""
import json

import pytest

from tests.helpers.commands import create_topics, send, train
from tests.helpers.flink_runs import (assert_same_checkpoints, file_predictions,
                                      weighted_examples)
from unitless.cli.main import main
from unitless.connectors.storage import atomic_write

# 9 model keys of unequal sizes, each learning from dozens of blocks (--chunk-size 8), read from
# two files (so that a key's blocks come from both of Flink's reading subtasks)
N = 3000
CHUNK = "8"
CHECKPOINT_EVERY = "120"
# the options of every run here (the inputs and the runner aside)
FLINK_RUN = ("--format", "jsonl", "--id-column", "id", "--model-key-column", "segment",
             "--chunk-size", CHUNK, "--checkpoint-every", CHECKPOINT_EVERY)


@pytest.fixture(scope="module")
def jsonl_halves(tmp_path_factory):
    d = tmp_path_factory.mktemp("flink-data")
    rows = weighted_examples(N, seed=7)
    half = N // 2
    for name, part in (("a.jsonl", rows[:half]), ("b.jsonl", rows[half:])):
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in part))
    return d, rows



@pytest.fixture(scope="module")
def fnapi_run(jsonl_halves, tmp_path_factory):
    """The same run on Beam's in-process FnApiRunner (unitless's default)."""
    d, _ = jsonl_halves
    out = tmp_path_factory.mktemp("fnapi")
    return train(out, "--input", str(d / "a.jsonl"), str(d / "b.jsonl"), *FLINK_RUN)


def prediction_rows(rows):
    return sorted((r["model_key"], r["examples_seen"], r["served"], r["prediction"], r["loss"],
                   r["id"]) for r in rows)


def assert_same_predictions(got, want, rows):
    ids = [r["id"] for r in got]
    assert len(ids) == len(set(ids)), "an example was predicted more than once"
    assert set(ids) == {r["id"] for r in rows}, "an example was not predicted"
    # bit for bit: == on floats (NaN would fail, and there is none)
    assert prediction_rows(got) == prediction_rows(want)
    assert {r["id"] for r in got if r["served"]} == {r["id"] for r in rows if r["label"] is None}


@pytest.mark.parametrize("mode", ["batch", "streaming"])
def test_files_on_flink_equal_the_fnapi_runner(mode, jsonl_halves, fnapi_run, flink_args, tmp_path):
    """Flink batch translates the stateful Learn stage into a groupBy that may deliver a key's
    blocks in any order; streaming keeps each subtask's order. Both must learn every block of
    every key in input order."""
    d, rows = jsonl_halves
    out = train(tmp_path, "--input", str(d / "a.jsonl"), str(d / "b.jsonl"), *FLINK_RUN,
                *flink_args,
                *(["--streaming"] if mode == "streaming" else []))
    assert_same_predictions(file_predictions(out), file_predictions(fnapi_run), rows)
    assert_same_checkpoints(out / "models", fnapi_run / "models", rows)


def test_the_job_servers_own_options_reach_the_job_and_no_other_passes(
        jsonl_halves, fnapi_run, flink_args, flink_job_server, tmp_path, capsys):
    """Flink's own options are not Beam's Python SDK's: the job server declares them, and the
    command takes them (``runners``): the job server holds them among the job's options (its
    job list, ``GetJobs``), and the run is the same. An option the job server does not declare
    either is refused in one line: Flink's bundle time is ``max_bundle_time_mills``."""
    import grpc
    from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc
    d, rows = jsonl_halves
    inputs = [str(d / "a.jsonl"), str(d / "b.jsonl")]
    out = train(tmp_path, "--input", *inputs, *FLINK_RUN, *flink_args, "--streaming",
                "--max_bundle_size=3", "--max_bundle_time_mills", "40")
    assert_same_predictions(file_predictions(out), file_predictions(fnapi_run), rows)
    with grpc.insecure_channel(flink_job_server.endpoint) as channel:
        jobs = beam_job_api_pb2_grpc.JobServiceStub(channel).GetJobs(
            beam_job_api_pb2.GetJobsRequest(), timeout=60).job_info
    given = [(job.pipeline_options["beam:option:max_bundle_size:v1"],
              job.pipeline_options["beam:option:max_bundle_time_mills:v1"]) for job in jobs
             if "beam:option:max_bundle_size:v1" in job.pipeline_options]
    assert [(int(size), int(mills)) for size, mills in given] == [(3, 40)]
    code = main(["train", "--input", *inputs, "--format", "jsonl",
                 "--model-dir", str(tmp_path / "typo"), *flink_args,
                 "--max_bundle_time_millis=40"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1] == (
        "unitless: error: unknown option '--max_bundle_time_millis=40' (not a unitless option, "
        "nor an Apache Beam pipeline option, nor one the job server declares)")


def test_flink_runner_with_no_flink_option_uses_the_projects_job_server(
        jsonl_halves, fnapi_run, flink_jar, tmp_path, monkeypatch):
    """`unitless train --runner FlinkRunner` as a user types it: the project's job server jar
    (Beam's own download of the job server is not reachable everywhere), Flink 1.19, an
    embedded cluster, LOOPBACK workers."""
    from unitless.runtime.runners import beam_options
    monkeypatch.setenv("UNITLESS_FLINK_JOB_SERVER_JAR", str(flink_jar))
    opts = beam_options(["--runner", "FlinkRunner"]).get_all_options()
    assert (opts["flink_job_server_jar"], opts["flink_version"], opts["flink_master"],
            opts["environment_type"]) == (str(flink_jar), "1.19", "[local]", "LOOPBACK")
    # what the user gives stays
    opts = beam_options(["--runner", "FlinkRunner", "--flink_master", "host:8081",
                          "--environment_type", "DOCKER"]).get_all_options()
    assert (opts["flink_job_server_jar"], opts["flink_master"], opts["environment_type"]) == (
        str(flink_jar), "host:8081", "DOCKER")
    opts = beam_options(["--runner", "FlinkRunner", "--flink_job_server_jar", "/x.jar",
                          "--flink_version", "1.20"]).get_all_options()
    assert (opts["flink_job_server_jar"], opts["flink_version"]) == ("/x.jar", "1.20")

    monkeypatch.delenv("UNITLESS_FLINK_JOB_SERVER_JAR")  # found by deploy/flink's script
    d, rows = jsonl_halves
    out = train(tmp_path, "--input", str(d / "a.jsonl"), str(d / "b.jsonl"), *FLINK_RUN,
                "--runner", "FlinkRunner", "--parallelism", "2")
    assert_same_predictions(file_predictions(out), file_predictions(fnapi_run), rows)
    assert_same_checkpoints(out / "models", fnapi_run / "models", rows)


def test_bounded_kafka_topic_on_flink_equals_the_fnapi_runner(broker, flink_args, tmp_path):
    """A topic of 2 partitions read up to its end offsets (bounded: Flink's batch mode), each
    partition an offset-range restriction of the splittable Kafka reader."""
    bootstrap, topic = broker.bootstrap_servers, "flink-examples"
    create_topics(bootstrap, topic)
    rows = weighted_examples(2000, seed=11)
    send(bootstrap, topic, [(row["segment"].encode(), json.dumps(row).encode()) for row in rows])

    source = [f"kafka://{bootstrap}/{topic}"]
    want = train(tmp_path / "fnapi", "--input", *source, *FLINK_RUN)
    got = train(tmp_path / "flink", "--input", *source, *FLINK_RUN, *flink_args)
    assert_same_predictions(file_predictions(got), file_predictions(want), rows)
    assert_same_checkpoints(got / "models", want / "models", rows)


def test_inputs_and_outputs_on_s3_on_flink_equal_the_fnapi_runner(jsonl_halves, fnapi_run,
                                                                  flink_args, bucket):
    """Every file the job reads and writes on s3:// (a real S3 API server, tests/conftest.py):
    the Flink workers read the inputs and write the checkpoints, predictions and dead letters
    through Beam's S3 file system, as a cluster's workers would without a shared disk."""
    d, rows = jsonl_halves
    for name in ("a.jsonl", "b.jsonl"):
        atomic_write(f"{bucket}/in/{name}", (d / name).read_bytes())
    out = train(f"{bucket}/out", "--input", f"{bucket}/in/*.jsonl", *FLINK_RUN,
                *flink_args, "--streaming")
    assert_same_predictions(file_predictions(out), file_predictions(fnapi_run), rows)
    assert_same_checkpoints(f"{out}/models", fnapi_run / "models", rows)
