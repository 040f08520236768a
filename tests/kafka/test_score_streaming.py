"""`unitless score --streaming` on Prism against a real broker takes up, while it runs, a key's
newer checkpoint and a key's first, written by a training run meanwhile, and skips a newer
checkpoint that is corrupt, keeping the model in use; every score names its checkpoint."""
import json
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.commands import create_topics, send, train
from tests.helpers.kafka_io import consume_all, keyed, keyed_examples
from tests.helpers.killing import kill_group
from tests.helpers.runners import PRISM
from unitless.store.group_writer import GroupWriter, taken
from unitless.store.groups import group_counts, group_key
from unitless.store.catalog import load_latest


def train_jsonl(tmp_path, name, rows, *extra):
    """A run over these rows as JSON lines, its models in tmp_path/models, all runs' alike."""
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train(tmp_path / name, "--input", data, "--id-column", "id", "--model-key-column", "segment",
          "--model-dir", tmp_path / "models", *extra)


def scores_of(bootstrap, topic, ids, timeout=120):
    """{id: score message} once every id in ``ids`` has one."""
    wanted, deadline = set(ids), time.time() + timeout
    while time.time() < deadline:
        got = {s["id"]: s for s in (json.loads(m.value) for m in
                                    consume_all(bootstrap, topic, 10 ** 9, timeout=2))}
        if wanted <= set(got):
            return got
    raise AssertionError(f"no score for {sorted(wanted - set(got))[:5]} after {timeout} s")


def test_a_streaming_score_takes_up_new_checkpoints_and_keys(broker, tmp_path):
    bootstrap, topic = broker.bootstrap_servers, "live-scores"
    create_topics(bootstrap, topic, f"{topic}-scores", f"{topic}-dead")
    rows = keyed_examples(900, seed=1)
    alpha = [r for r in rows if r["segment"] == "alpha"]
    train_jsonl(tmp_path, "first", alpha[:150])  # alpha@150; beta and gamma have no model yet
    scoring = subprocess.Popen(
        [sys.executable, "-m", "unitless.cli", "score", "--input", f"kafka://{bootstrap}/{topic}",
         "--id-column", "id", "--model-key-column", "segment", "--model-dir",
         str(tmp_path / "models"), "--predictions", f"kafka://{bootstrap}/{topic}-scores",
         "--dead-letter", f"kafka://{bootstrap}/{topic}-dead", "--refresh-seconds", "0.2",
         "--runner", "PrismRunner", "--prism_location", PRISM, "--streaming"],
        stdout=open(tmp_path / "score.log", "w"), stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        probe = keyed_examples(60, seed=2)
        first = [dict(r, id=f"1-{i}", segment="alpha") for i, r in enumerate(probe[:20])]
        send(bootstrap, topic, keyed(first))
        got = scores_of(bootstrap, f"{topic}-scores", [r["id"] for r in first])
        assert {got[r["id"]]["checkpoint_id"] for r in first} == {"alpha@150"}
        # training goes on meanwhile: alpha's newer checkpoint, beta's first
        train_jsonl(tmp_path, "more", alpha[150:] + [r for r in rows if r["segment"] == "beta"],
              "--resume")
        time.sleep(0.5)
        second = [dict(r, id=f"2-{i}", segment="alpha" if i % 2 else "beta")
                  for i, r in enumerate(probe[20:40])]
        send(bootstrap, topic, keyed(second))
        got = scores_of(bootstrap, f"{topic}-scores", [r["id"] for r in second])
        assert {got[r["id"]]["checkpoint_id"] for r in second} == {"alpha@300", "beta@300"}
        assert all(got[r["id"]]["checkpoint_id"].startswith(r["segment"]) for r in second)
        # a newer checkpoint of alpha that is corrupt: skipped, alpha@300 kept
        models = str(tmp_path / "models")
        groups, = group_counts(models)
        table = load_latest(models, "alpha")[1]
        meta = json.loads(table.schema.metadata[b"unitless"])
        meta["examples_seen"] = 999
        newer = GroupWriter(models, groups).write({group_key("alpha", groups): [
            taken("alpha", table.replace_schema_metadata(
                {b"unitless": json.dumps(meta).encode()}))]})
        damaged = Path(newer["alpha"].rpartition("#")[0])
        damaged.write_bytes(damaged.read_bytes()[:200])
        time.sleep(0.5)
        third = [dict(r, id=f"3-{i}", segment="alpha") for i, r in enumerate(probe[40:])]
        send(bootstrap, topic, keyed(third))
        got = scores_of(bootstrap, f"{topic}-scores", [r["id"] for r in third])
        assert {got[r["id"]]["checkpoint_id"] for r in third} == {"alpha@300"}
        assert scoring.poll() is None, (tmp_path / "score.log").read_text()[-3000:]
    finally:
        kill_group(scoring)
    assert damaged.name in (tmp_path / "score.log").read_text()
    assert consume_all(bootstrap, f"{topic}-dead", 1, timeout=3) == []
