"""Delayed outcomes across crashes: runs over two timestamped topics (a wait, an expired label)
SIGKILLed and resumed with --resume learn each label once and end with an uninterrupted run's
models (docs/delayed-outcomes.md, "Exactly once across crashes"). Once, with the default Kafka
client: the join is under test here, not the clients (tests/integration runs them all)."""
import os
import sys
import time

import pytest

from unitless.connectors.files import read_output

from tests.commands import create_topics, send
from tests.integration.test_kafka_labels import WAIT, timed_join, timed_messages
from tests.killing import campaigns, final_models, run_complete
from tests.runners import runner_args
from tests.test_order import KEYS


@pytest.mark.parametrize("runner,kills", [
    ("fnapi", 30), ("prism", int(os.environ.get("UNITLESS_PRISM_KILLS", "4")))])
def test_killed_and_resumed_the_join_learns_every_label_once(broker, tmp_path, runner, kills):
    """30 kills on the FnApiRunner; on Prism, whose runs start slowly, 4 here
    (``UNITLESS_PRISM_KILLS=30`` by hand); see ``kill_campaigns``."""
    kill_campaigns(broker.bootstrap_servers, tmp_path, runner, runner_args(runner), kills)


def kill_campaigns(bootstrap, tmp_path, runner, runner_args, kills):
    """``timed_join``'s two topics (a wait, an expired label) read to their ends by runs on
    ``runner_args`` SIGKILLed at random moments and right after checkpoints, each resumed with
    --resume until one completes: its models equal an uninterrupted run's bit for bit (nothing
    lost, nothing learned twice: a label learned before the last checkpoint is not learned
    again, an example still waiting is read again and waits again without being served again);
    every example is served, every learned prediction is the uninterrupted run's, the dead
    letters are its dead letters (at least once)."""
    n = 1500
    features_topic, labels_topic = f"kill-features-{runner}", f"kill-labels-{runner}"
    create_topics(bootstrap, features_topic, labels_topic)
    features, labels, _, _, _ = timed_join(n, seed=11)
    start = time.time() - 3600
    send(bootstrap, features_topic, timed_messages(features, start))
    send(bootstrap, labels_topic, timed_messages(labels, start))

    def command(out, resume=True):
        return [sys.executable, "-m", "unitless.cli", "train",
                "--input", f"kafka://{bootstrap}/{features_topic}", "--labels",
                f"kafka://{bootstrap}/{labels_topic}", "--label-wait", f"{WAIT:g}s",
                "--expired-label", "-1", "--format", "jsonl", "--id-column", "id",
                "--model-key-column", "key", "--chunk-size", "16", "--checkpoint-every", "40",
                "--model-dir", str(out / "models"), "--predictions", str(out / "p"),
                "--dead-letter", str(out / "d"), *runner_args, *(["--resume"] if resume else [])]
    began = time.time()
    run_complete(command(tmp_path / "whole", resume=False))
    duration = time.time() - began
    expected = final_models(KEYS, tmp_path / "whole" / "models")
    whole = read_output(str(tmp_path / "whole" / "p")).to_pylist()
    learned = {(r["model_key"], r["examples_seen"]): r for r in whole if not r["served"]}
    dead = {(d["source"], d["position"], d["reason"])
            for d in read_output(str(tmp_path / "whole" / "d")).to_pylist()}

    def check(c):
        out = tmp_path / f"crash{c}"
        rows = read_output(str(out / "p")).to_pylist()
        assert {r["id"] for r in rows if r["served"]} == {f"e-{i}" for i in range(n)}
        mine = [r for r in rows if not r["served"]]
        for r in mine:  # (at least once: a duplicate is the original)
            want = learned[r["model_key"], r["examples_seen"]]
            assert (r["id"], r["prediction"], r["label"]) == (
                want["id"], want["prediction"], want["label"]), (r, want)
        assert {(r["model_key"], r["examples_seen"]) for r in mine} == set(learned)
        got = final_models(KEYS, out / "models")
        for key in KEYS:
            assert got[key][0].equals(expected[key][0]), key
            assert got[key][1:] == expected[key][1:], key
        assert {(d["source"], d["position"], d["reason"])
                for d in read_output(str(out / "d")).to_pylist()} == dead

    campaigns(lambda c: command(tmp_path / f"crash{c}"), lambda c: tmp_path / f"crash{c}" /
              "models", check, kills, duration)
