"""Serving apart from learning (``--serve-apart``, always with ``--labels``): an example without a
label is served by the newest published state of its model (a checkpoint), named by its version
and age, and the learning is what it would have been had it been served in its place."""
from dataclasses import replace
import json
import shutil
import time

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to
import numpy as np

from unitless.beam import Rows, Serve
from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.parse.jsonl import parse_records
from unitless.pipelines.config import configure
from unitless.pipelines.serve import PublishedModels
from unitless.pipelines.train import LearnBlocks
from unitless.store.groups import published_dir
from unitless.models.model_group import ModelGroup

from tests.helpers.commands import train
from tests.helpers.killing import final_models
from tests.helpers.runners import pipeline

KEYS = ["k0", "k1", "k2"]
COLUMNS = ["--id-column", "id", "--model-key-column", "key", "--checkpoint-every", "0"]


def write_rows(path, first, n, seed, labeled=lambda i: True, keys=KEYS):
    """``n`` examples ids first..first+n-1 of ``keys``, features of very different scales,
    labeled where ``labeled(i)`` (else the label is blank: to serve)."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write("id,key,a,b,label\n")
        for i in range(first, first + n):
            a, b = rng.normal() * 1e3, rng.normal() * 1e-2
            y = 1 if a / 1e3 + b / 1e-2 + rng.normal() > 0 else -1
            f.write(f"e-{i},{keys[i % len(keys)]},{a},{b},{y if labeled(i) else ''}\n")
    return path


def test_served_apart_by_the_published_state_and_learned_as_in_its_place(tmp_path):
    """A resumed run serving apart over a file of labeled and unlabeled examples: every
    unlabeled example of a published model is served by that model's published state (as
    ``unitless score`` predicts with it: exactly, with its version and checkpoint id, its age,
    flagged stale past --max-staleness), one of a key never published by a fresh model (no
    age); the labeled ones are learned exactly as a run serving in its place learns them (the
    FnApiRunner runs the learning step after the reading and serving stage, so nothing is
    published in the run before every example is served)."""
    first = train(tmp_path / "first", "--input", write_rows(tmp_path / "a.csv", 0, 300, 1),
                  *COLUMNS)
    mixed = write_rows(tmp_path / "b.csv", 300, 400, 2, labeled=lambda i: i % 3 == 0,
                       keys=[*KEYS, "new"])
    for name in ("apart", "in-place", "scored"):
        shutil.copytree(first / "models", tmp_path / name / "models")
    published = final_models(KEYS, tmp_path / "scored" / "models")
    apart = train(tmp_path / "apart", "--input", mixed, *COLUMNS, "--resume", "--serve-apart",
                  "--max-staleness", "0.001")
    in_place = train(tmp_path / "in-place", "--input", mixed, *COLUMNS, "--resume")
    assert main(["score", "--input", str(mixed), "--model-dir",
                 str(tmp_path / "scored" / "models"), "--id-column", "id",
                 "--model-key-column", "key", "--predictions", str(tmp_path / "scored" / "pred"),
                 "--dead-letter", str(tmp_path / "scored" / "dead")]) == 0
    scores = {r["id"]: r for r in read_output(str(tmp_path / "scored" / "pred")).to_pylist()}
    rows = read_output(str(apart / "pred")).to_pylist()
    served = [r for r in rows if r["served"]]
    assert len(served) == sum(1 for i in range(300, 700) if i % 3)
    for r in served:
        if r["model_key"] == "new":  # (never published: a fresh model)
            assert (r["examples_seen"], r["checkpoint_id"], r["model_age_seconds"],
                    r["stale"]) == (0, None, None, False)
            assert r["prediction"] == 0.0
            continue
        state = published[r["model_key"]]
        assert r["prediction"] == scores[r["id"]]["prediction"]
        assert r["checkpoint_id"] == scores[r["id"]]["checkpoint_id"]
        assert r["examples_seen"] == state[1]
        assert r["model_age_seconds"] > 0 and r["stale"] is True
    # learning: as the run that served each example in its place
    got, want = (final_models([*KEYS, "new"], out / "models") for out in (apart, in_place))
    for key in [*KEYS, "new"]:  # (examples seen, loss and input positions too)
        assert got[key][0].equals(want[key][0]) and got[key][1:] == want[key][1:]
    learned = sorted((r["id"], r["examples_seen"], r["prediction"]) for r in rows
                     if not r["served"])
    assert learned == sorted((r["id"], r["examples_seen"], r["prediction"])
                             for r in read_output(str(in_place / "pred")).to_pylist()
                             if not r["served"])
    # rows learned, and rows served in place, are not served apart: no age, no flag
    assert all(r["model_age_seconds"] is None and r["stale"] is None
               for r in read_output(str(in_place / "pred")).to_pylist())


def test_what_serving_apart_takes_is_checked_in_one_line(tmp_path, capsys):
    data = write_rows(tmp_path / "a.csv", 0, 10, 1)
    for more, said in ((["--publish-seconds", "0"], "--publish-seconds wants a duration above 0"),
                       (["--max-staleness", "soon"], "--max-staleness wants a duration")):
        assert train(tmp_path / "out", "--input", data, *COLUMNS, "--serve-apart", *more,
                     expect=None) == 2
        assert said in capsys.readouterr().err


def test_serve_in_a_users_pipeline_answers_with_the_published_states(tmp_path):
    """``unitless.beam.Serve`` over the model directory of a run that learned elsewhere: the
    user's own records, each answered by its key's published state as ``unitless score``
    predicts with it, a key never published by a fresh model; a record the learner refuses is
    a dead letter."""
    first = train(tmp_path / "first", "--input", write_rows(tmp_path / "a.csv", 0, 300, 1),
                  *COLUMNS)
    records = [{"id": f"q{i}", "key": ["k0", "k1", "new"][i % 3], "a": 1e3 * (i - 5),
                "b": 1e-2 * i} for i in range(12)]
    records.append({"id": "bad", "key": "k0", "a": float("inf"), "b": 1.0})
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records[:-1]))
    assert main(["score", "--input", str(path), "--model-dir", str(first / "models"),
                 "--id-column", "id", "--model-key-column", "key", "--predictions",
                 str(tmp_path / "scored"), "--dead-letter", str(tmp_path / "scored-dead")]) == 0
    scores = {r["id"]: r for r in read_output(str(tmp_path / "scored")).to_pylist()}
    expected = [(r["id"], scores[r["id"]]["prediction"], scores[r["id"]]["checkpoint_id"])
                if r["key"] != "new" else (r["id"], 0.0, None) for r in records[:-1]]
    serve = Serve(model_dir=str(first / "models"), id_column="id", model_key_column="key")
    with pipeline("fnapi") as p:
        served = p | beam.Create(records) | serve
        assert_that(served | Rows() | beam.Map(lambda r: (r["id"], r["prediction"],
                                                          r["checkpoint_id"])),
                    equal_to(expected))
        assert_that(serve.dead_letters | "Dead rows" >> Rows()
                    | "Reasons" >> beam.Map(lambda d: (b'"bad"' in d["raw"],
                                                      "finite" in d["reason"])),
                    equal_to([(True, True)]), label="dead")



def learning_step(tmp_path, **options):
    """A streaming run's learning step (``LearnBlocks``) serving apart, and a model group."""
    cfg = configure(None, model_dir=str(tmp_path / "models"), predictions=None,
                    dead_letter=None, id_column="id", model_key_column="key", serve_apart=True,
                    **options)
    step = LearnBlocks(cfg, streaming=True)
    step.setup()
    return cfg, step, ModelGroup()


def block_of(cfg, first, n, labeled):
    """``n`` examples of model "k" at positions first.., read whole (a span), those without a
    label served apart (score 0), the others not."""
    items = [(first + i, {"id": f"e{first + i}", "key": "k", "a": float(i),
                          **({"label": 1} if labeled else {})}) for i in range(n)]
    block, _ = parse_records(cfg.spec, "src", items)
    block.span = (first - 1 if first else -1, first + n - 1)
    return replace(block, served_scores=np.full((n, 1), np.nan if labeled else 0.0))


def test_serving_apart_keeps_the_checkpoint_cadence(tmp_path):
    """Found by review. A model whose examples are all served apart is checkpointed every
    --checkpoint-seconds (its positions move); a quiet key's idle timer, due at
    --publish-seconds, publishes at once but checkpoints only what --checkpoint-seconds makes
    due, and asks to be called again then."""
    cfg, step, group = learning_step(tmp_path / "served", checkpoint_seconds=0.2)
    for first in (0, 10, 20):
        list(step.learn(group, block_of(cfg, first, 10, labeled=False)))
        time.sleep(0.25)
    model = group.models["k"]
    assert model.positions == {"src": 29} and model.served == 30
    assert model.checkpoint_served >= 20  # (not -1: checkpoints came as it served)

    cfg, step, group = learning_step(tmp_path / "quiet", checkpoint_seconds=60)
    assert step.idle_seconds == 1.0  # (--publish-seconds)
    list(step.learn(group, block_of(cfg, 0, 10, labeled=True)))
    model = group.models["k"]
    took, again = step.idle("k", group)
    assert not took and not step.delivery.pending and 59 < again <= 60
    assert model.published_examples == 10  # (published at once, quiet)
    model.checkpoint_time -= 61
    took, again = step.idle("k", group)
    assert took and len(step.delivery.pending) == 1 and again is None


def test_serving_looks_for_checkpoints_only_until_a_published_state_catches_up(tmp_path):
    """Found by review. Each checkpoint the learning step takes is published too, however
    recently it published; serving reads a key's checkpoints while they are newer than its
    publications (a resumed run, whose published states were removed at its start, before its
    first), and not once a publication has caught up."""
    cfg, step, group = learning_step(tmp_path, checkpoint_seconds=60, publish_seconds=3600)

    def learn_and_checkpoint(first):
        list(step.learn(group, block_of(cfg, first, 10, labeled=True)))
        step._catch_up(group)
        step.delivery.write_checkpoints()

    learn_and_checkpoint(0)  # (published at once: its first)
    learn_and_checkpoint(10)  # (not due for publication, but checkpointed)
    served = PublishedModels(cfg.model_dir, None, poll=0, capacity=10)
    assert served.published.get("k").state.examples_seen == 20
    assert served.get("k")[0].examples_seen == 20
    assert "k" in served.overtaken and "k" not in served.checkpoints.models  # (no longer read)
    shutil.rmtree(published_dir(cfg.model_dir))  # (as a resumed run's start does)
    resumed = PublishedModels(cfg.model_dir, None, poll=0, capacity=10)
    assert resumed.get("k")[0].examples_seen == 20 and "k" not in resumed.overtaken
