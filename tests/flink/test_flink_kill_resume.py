"""A `unitless train` on Flink (the session's job server, 2 parallel subtasks, streaming mode)
SIGKILLed while its models are learning, then resumed with --resume on Flink: every example is
predicted, and every model ends equal to an uninterrupted FnApiRunner run's, bit for bit.

Input: two JSON-lines files. Their blocks wait in the Learn state until the watermark passes the
end of the input (docs/guarantees.md, "Learn out of order"), so learning, and with it the
checkpoints every --checkpoint-every examples, happens in the last seconds of the run; the kill
lands there, once the models have learned 10% of the examples (a model without a checkpoint yet
learns all of its own again). The resumed run then reads the files again and must skip exactly what
the checkpoints cover.
(A Kafka topic read with --streaming never ends, and a bounded one is Flink's batch mode: the
file input is what makes a streaming run end, so its final checkpoints can be compared.)

The Flink job of a killed client lives on in the job server's JVM, but its LOOPBACK SDK worker
was in the killed process group: the job fails ("SDK Harness connection lost", no restart) and
nothing of it can write any more. The test cancels it through the job service anyway and waits
until the job server's Flink log says the job reached a terminal state (it fails within a
second or two); the job service's own state is no evidence: a Cancel sent before the failure
came through makes it CANCELLED at once while the Flink job still runs, and once the job failed
the invocation stays RUNNING for ever (JobInvocation.onFailure sends the error to the dead
client's message stream, which throws, before it sets FAILED; a Cancel is then a no-op). Then it
checks that nothing changes in the run's directories any more."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
from apache_beam.portability.api import beam_job_api_pb2 as job_api
from apache_beam.portability.api import beam_job_api_pb2_grpc as job_api_grpc

from tests.helpers.flink_runs import (KEYS, assert_same_checkpoints, file_predictions,
                                      weighted_examples)
from unitless.learner import read_metadata
from unitless.store.catalog import load_latest

N = 6000  # 9 keys of 130 to 1,230 examples; 16 to 150 blocks of 8 per key
CHECKPOINT_EVERY = "50"


def jsonl_command(inputs, out, *extra):
    return [sys.executable, "-m", "unitless.cli", "train", "--input", *map(str, inputs),
            "--format", "jsonl", "--id-column", "id", "--model-key-column", "segment",
            "--chunk-size", "8", "--checkpoint-every", CHECKPOINT_EVERY,
            "--model-dir", str(out / "models"), "--predictions", str(out / "pred"),
            "--dead-letter", str(out / "dead"), *extra]


def resumable(models):
    """Examples learned or served (predicted without a label) by all keys as the checkpoints a
    resumed run starts from record (a kill between a checkpoint file and its `latest` pointer
    leaves the older one in force)."""
    found = [read_metadata(f[1]) for f in (load_latest(str(models), k) for k in KEYS) if f]
    return sum(meta["examples_seen"] + meta.get("examples_served", 0) for meta in found)


def file_stamps(root):
    return {(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in Path(root).rglob("*")}


def kill_when_learning(cmd, models, jobs, log):
    """Start the run in its own process group; SIGKILL the group once the models learned 10% of
    the examples. Returns the Beam job it submitted and the examples learned when killed."""
    before = {j.job_id for j in jobs.GetJobs(job_api.GetJobsRequest()).job_info}
    with open(log, "wb") as out:
        run = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 90
    # (on the examples a resumed run starts from, not on the checkpoint files' names: under
    # load a file can be written well before its `latest` pointer)
    while run.poll() is None and resumable(models) < N // 10 and time.time() < deadline:
        time.sleep(0.01)
    assert run.poll() is None, f"the run ended before it was killed:\n{log.read_text()[-3000:]}"
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    for _ in range(100):  # until the group's last process is gone (reaped)
        try:
            os.killpg(run.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("a process of the killed run's group is alive")
    new = [j for j in jobs.GetJobs(job_api.GetJobsRequest()).job_info if j.job_id not in before]
    assert len(new) == 1, new
    return new[0], resumable(models)


def wait_until_over(job, jobs, job_server_log, timeout=60):
    """Cancel the job; wait until Flink says it ended. Returns the job service's state then."""
    jobs.Cancel(job_api.CancelJobRequest(job_id=job.job_id))
    ended = re.compile(rf"Job {re.escape(job.job_name)} \([0-9a-f]+\) switched from state "
                       r"\w+ to (FAILED|CANCELED|FINISHED)\.")
    deadline = time.time() + timeout
    while not ended.search(job_server_log.read_text(errors="replace")):
        assert time.time() < deadline, f"the killed run's Flink job did not end in {timeout} s"
        time.sleep(0.2)
    state = jobs.GetState(job_api.GetJobStateRequest(job_id=job.job_id)).state
    return job_api.JobState.Enum.Name(state)


def test_a_run_killed_while_learning_resumes_on_flink_to_the_fnapi_runners_models(
        flink_job_server, flink_args, tmp_path):
    rows = weighted_examples(N, seed=7)
    inputs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for path, part in zip(inputs, (rows[:N // 2], rows[N // 2:])):
        path.write_text("".join(json.dumps(r) + "\n" for r in part))
    whole, crash = tmp_path / "whole", tmp_path / "crash"
    subprocess.run(jsonl_command(inputs, whole), check=True, capture_output=True)  # FnApiRunner

    jobs = job_api_grpc.JobServiceStub(grpc.insecure_channel(flink_job_server.endpoint))
    flink = [*flink_args, "--streaming"]
    job, at_kill = kill_when_learning(jsonl_command(inputs, crash, *flink), crash / "models", jobs,
                                      tmp_path / "killed.log")
    killed = time.time()
    state = wait_until_over(job, jobs, flink_job_server.log_path)
    print(f"killed at {at_kill} examples learned; the job ended {time.time() - killed:.1f} s "
          f"later (job service: {state})")
    quiet = file_stamps(crash)
    time.sleep(1)
    assert file_stamps(crash) == quiet, "the killed run's job still writes"
    assert N // 10 <= at_kill < N, at_kill  # killed mid-learning
    durable = len(file_predictions(crash))

    resumed = subprocess.run(jsonl_command(inputs, crash, *flink, "--resume"), capture_output=True,
                             text=True)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    # it predicted (learned or served) exactly the examples the checkpoints did not cover
    assert len(file_predictions(crash)) - durable == N - at_kill

    # every key's checkpoints (the last 3 kept) equal the FnApiRunner's, state bit for bit
    assert_same_checkpoints(crash / "models", whole / "models", rows)
    # every (model key, example) predicted; a prediction made again after the kill is the same
    reference = {(r["model_key"], r["id"]): r for r in file_predictions(whole)}
    predicted = file_predictions(crash)
    print(f"{len(predicted) - N} predictions made again after the kill")
    assert {(r["model_key"], r["id"]) for r in predicted} == set(reference) == {
        (r["segment"], r["id"]) for r in rows}
    for r in predicted:
        want = reference[r["model_key"], r["id"]]
        assert (r["examples_seen"], r["prediction"], r["loss"]) == (
            want["examples_seen"], want["prediction"], want["loss"]), r
    assert not [p for p in crash.rglob("*") if ".tmp" in p.name], "a temporary file remains"
