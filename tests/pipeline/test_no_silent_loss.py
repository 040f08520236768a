"""No silent loss: ``Learn`` holds each key of its stateful step in one bundle at a time on
every runner whatever options the user passed, and a run whose examples do not add up (read =
learned + refused + replayed) fails with one line, in the command and in a user's pipeline."""
import itertools
import re
import time

import apache_beam as beam
import numpy as np
import pytest

from unitless.beam import Learn
from unitless.cli.main import main
from unitless.connectors.files import read_file, read_output
from unitless.parse.records import ExampleBlock
from unitless.pipelines import accounting, learn, train
from unitless.runtime import bundles
from unitless.pipelines.accounting import Tally
from unitless.pipelines.config import configure
from unitless.models import model_group

from tests.helpers.ordered import write_random_key_examples
from tests.helpers.runners import pipeline, prism_args, runner_args

OPTIONS = dict(id_column="id", model_key_column="key", chunk_size=64)


def reversed_blocks(tmp_path):
    """Two files' 3,000 examples as blocks, last first (each waits in state for the end)."""
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for seed, path in enumerate(paths):
        write_random_key_examples(path, 1500, seed)
    cfg = configure([str(p) for p in paths], **OPTIONS)
    blocks = [b for p in cfg.inputs for b, _ in read_file(p, "csv", cfg.spec, 64)]
    for b in blocks:
        b.raw = None
    return blocks[::-1]


def slow_elements(monkeypatch, seconds=0.5):
    """Every eighth element of the learning step takes ``seconds`` longer (this process runs
    the SDK worker: Prism's default environment is LOOPBACK). Prism splits a bundle that shows
    no progress between two of its 100 ms progress ticks."""
    calls = itertools.count()
    enter_source = train.LearnBlocks.enter_source

    def slow(self, *args):
        if next(calls) % 8 == 0:
            time.sleep(seconds)
        return enter_source(self, *args)
    monkeypatch.setattr(train.LearnBlocks, "enter_source", slow)


def learn_on_prism(tmp_path, blocks):
    learn = Learn(model_dir=str(tmp_path / "models"), predictions=str(tmp_path / "p"),
                  dead_letter=None, model_groups=2, **OPTIONS)
    p = pipeline("prism")  # (the user's options: nothing for Prism's splitting)
    _ = p | beam.Create(blocks).with_output_types(ExampleBlock) | learn
    p.run().wait_until_finish()
    return read_output(str(tmp_path / "p")).to_pylist()


def test_slow_bundles_on_prism_are_learned_once(tmp_path, monkeypatch):
    """Prism would split the slow bundles of the learning step; Learn set what keeps their
    split-off elements from running as a second bundle of the same keys at once: every example
    predicted once. (Before Learn set it, the same run gave 4,327 predictions of these 3,000
    when only the first element was slow.)"""
    slow_elements(monkeypatch)
    rows = learn_on_prism(tmp_path, reversed_blocks(tmp_path))
    assert len(rows) == 3000
    assert len({(r["model_key"], r["examples_seen"]) for r in rows}) == 3000


@pytest.mark.prism
def test_a_second_bundle_of_a_key_at_once_fails_the_command_with_one_line(tmp_path, monkeypatch,
                                                                          capsys):
    slow_elements(monkeypatch)
    monkeypatch.setattr(learn, "hold_each_key_in_one_bundle", lambda options: None)
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for seed, path in enumerate(paths):
        write_random_key_examples(path, 1500, seed)
    code = main(["train", "--input", *map(str, paths), "--id-column", "id", "--model-key-column",
                 "key", "--chunk-size", "64", "--model-groups", "2", "--model-dir",
                 str(tmp_path / "models"), "--predictions", str(tmp_path / "p"), *prism_args()])
    assert code == 1
    assert error_line(capsys).startswith("unitless: error: the runner gave key ")


@pytest.mark.prism
def test_a_second_bundle_of_a_key_at_once_is_refused(tmp_path, monkeypatch):
    """The cause, shown: without Prism's ``prism_disable_sdf_split`` the same slow bundles are
    split and their split-off elements run at once, in this worker, as a second bundle of keys
    the first still holds; the learning step refuses it, failing the run."""
    slow_elements(monkeypatch)
    monkeypatch.setattr(learn, "hold_each_key_in_one_bundle", lambda options: None)
    with pytest.raises(Exception, match="to two bundles at once"):
        learn_on_prism(tmp_path, reversed_blocks(tmp_path))


@pytest.mark.prism
def test_what_a_second_bundle_at_once_does_fails_the_run(tmp_path, monkeypatch):
    """And what it does when not refused (a runner running them in different processes): the
    second bundle learns on the state as it was before the first, and examples are lost or
    learned twice (1,346 to 4,327 predictions of 3,000 in seven runs); the run's accounting
    fails it."""
    slow_elements(monkeypatch)
    monkeypatch.setattr(learn, "hold_each_key_in_one_bundle", lambda options: None)
    monkeypatch.setattr(bundles.KeyGuard, "hold", lambda self, key: None)
    # (Prism splits on its own clock: on a loaded machine a run may see no split. Such a run
    # must then be right; one of three runs must meet the split and fail)
    for attempt in range(3):
        try:
            rows = learn_on_prism(tmp_path / str(attempt), reversed_blocks(tmp_path))
        except Exception as err:
            assert re.search(r"3,000 (examples )?given to Learn", str(err)), err
            return
        assert len({(r["model_key"], r["examples_seen"]) for r in rows}) == len(rows) == 3000
    pytest.fail("three runs and no second bundle of a key at once: nothing was shown")


def error_line(capsys):
    """The command's one line: its last on stderr, and the only one of its own. (Beam's SDK
    worker, in this process on Prism, prints a failing bundle's traceback before it.)"""
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if line.startswith("unitless:")]) == 1, err
    return err[-1]


def drop_model_key(monkeypatch, dropped):
    """The learning step loses every example of one model key (a bug made on purpose)."""
    learn_all = train.LearnBlocks.learn

    def lossy(self, group, block, at=None):
        kept = block.take(np.flatnonzero(np.asarray(block.keys.to_pylist()) != dropped))
        kept.span = block.span
        return learn_all(self, group, kept, at)
    monkeypatch.setattr(train.LearnBlocks, "learn", lossy)


@pytest.mark.parametrize("runner", ["fnapi", "prism"])
def test_examples_lost_fail_the_command_with_one_line(tmp_path, monkeypatch, capsys, runner):
    path = tmp_path / "a.csv"
    write_random_key_examples(path, 1500, 0)
    drop_model_key(monkeypatch, "k3")
    code = main(["train", "--input", str(path), "--id-column", "id", "--model-key-column",
                 "key", "--model-dir", str(tmp_path / "models"), "--predictions",
                 str(tmp_path / "p"), "--dead-letter", str(tmp_path / "d"),
                 *runner_args(runner)])
    lost = sum(1 for line in path.read_text().splitlines()[1:] if line.split(",")[1] == "k3")
    assert code == 1
    assert error_line(capsys).startswith(
        f"unitless: error: {lost:,} of 1,500 examples given to Learn were neither learned, "
        "served, refused nor replayed (lost)")


@pytest.mark.parametrize("runner", ["fnapi", "prism"])
def test_examples_lost_fail_a_users_pipeline(tmp_path, monkeypatch, runner):
    drop_model_key(monkeypatch, "k1")
    blocks = reversed_blocks(tmp_path)
    lost = sum(int((b.keys.to_numpy(zero_copy_only=False) == "k1").sum()) for b in blocks)
    learn = Learn(model_dir=str(tmp_path / "models"), predictions=None, dead_letter=None,
                  **OPTIONS)
    with pytest.raises(Exception, match=f"{lost:,} of 3,000 examples given to Learn were "
                                        r"neither learned, served, refused nor replayed \(lost\)"):
        with pipeline(runner) as p:
            _ = p | beam.Create(blocks).with_output_types(ExampleBlock) | learn


def test_the_identity():
    assert Tally(read=10, learned=7, refused=2, replayed=1, in_models=7).problem(True) is None
    assert Tally(read=3) + Tally(learned=2) + Tally(refused=1) == Tally(3, 2, 1, 0, 0)
    assert "1 of 10 examples" in Tally(read=10, learned=9, in_models=9).problem(False)
    assert "2 more examples" in Tally(read=10, learned=12, in_models=12).problem(False)
    assert "by their own count" in Tally(read=10, learned=10, in_models=8).problem(False)
    assert Tally(read=10, learned=10).problem(False, models_counted=False) is None
    # --labels: 4 features records served, 3 labels records joined, 1 example expired and
    # learned with --expired-label (a prediction without a record of its own)
    joined = Tally(read=7, learned=4, served=4, in_models=4, expired=1, expired_learned=1)
    assert joined.problem(False) is None
    assert "1 more examples" in joined._replace(expired_learned=0).problem(False)
    assert "1 served examples still wait for their labels" in joined._replace(
        waiting=1, read=8, served=5).problem(False)


def restart_models_midway(monkeypatch):
    """The learning step loses its models' state once, midway (a bug made on purpose): its
    models leave state, reported as at the end of their input, and start again from nothing,
    reported again at the end (what a runner firing a key's end of input twice did). Counted,
    the examples add up."""
    learn_all = train.LearnBlocks.learn
    calls = itertools.count()

    def losing(self, group, block, at=None):
        if next(calls) == 10:  # (model_groups=1: every model key's step key is one)
            step_key = train.group_key(next(iter(group.models)), 1)
            yield from accounting.models_left(step_key, [m.learned_range()
                                                         for m in group.every_model()])
            group.models.clear()
        yield from learn_all(self, group, block, at)
    monkeypatch.setattr(train.LearnBlocks, "learn", losing)


@pytest.mark.parametrize("runner", ["fnapi", "prism"])
def test_a_model_started_again_midway_fails_the_run(tmp_path, monkeypatch, runner):
    restart_models_midway(monkeypatch)
    learn = Learn(model_dir=str(tmp_path / "models"), predictions=None, dead_letter=None,
                  model_groups=1, **OPTIONS)
    with pytest.raises(Exception, match=r"models learned [\d,]+ of the 3,000 examples given to "
                                        r"Learn at examples_seen counts they had passed"):
        with pipeline(runner) as p:
            _ = p | beam.Create(reversed_blocks(tmp_path)).with_output_types(ExampleBlock) | learn


def test_predictions_that_are_not_the_models_steps_fail_the_run(tmp_path, monkeypatch):
    """A prediction carrying another examples_seen than the model's step that made it: the
    counts add up, the fingerprints do not."""
    table = model_group.prediction_table

    def shifted(keys, state, ids, labels, result, seen, *args, **kwargs):
        return table(keys, state, ids, labels, result,
                     seen + (np.asarray(keys.to_pylist()) == "k2"), *args, **kwargs)
    monkeypatch.setattr(model_group, "prediction_table", shifted)
    learn = Learn(model_dir=str(tmp_path / "models"), predictions=None, dead_letter=None,
                  **OPTIONS)
    with pytest.raises(Exception, match="the 3,000 predictions learned are not the examples "
                                        "the models counted"):
        with pipeline("fnapi") as p:
            _ = p | beam.Create(reversed_blocks(tmp_path)).with_output_types(ExampleBlock) | learn


def test_overlapping_ranges_and_fingerprints():
    assert accounting.covered_twice([("a", 0, 5), ("a", 5, 9), ("b", 0, 5)]) == 0
    assert accounting.covered_twice([("a", 0, 5), ("a", 0, 3), ("a", 2, 7)]) == 3 + 3
    assert accounting.covered_twice([("a", 4, 4), ("a", 0, 4)]) == 0  # (an empty range)
    h = accounting.key_hashes(["a", "b"])
    pairs = accounting.fingerprint(h[[0, 0, 1]], [1, 2, 1])
    assert pairs == accounting.fingerprint(h[[1, 0, 0]], [1, 2, 1])
    assert pairs != accounting.fingerprint(h[[0, 0, 1]], [1, 1, 2])
    assert pairs != accounting.fingerprint(h[[0, 0, 0]], [1, 2, 1])
    reported = accounting.models_left("0/1", [("a", 0, 2), ("b", 3, 3), ("b", 0, 1)])
    assert reported[0].value == Tally(in_models=3, in_models_print=pairs)
    assert reported[1].value == ("0/1", (("a", 0, 2), ("b", 3, 3), ("b", 0, 1)))
    assert "not the examples the models counted" in Tally(
        read=2, learned=2, in_models=2, learned_print=1, in_models_print=2).problem(False)
    assert Tally(read=2, learned=2, in_models=2, learned_print=5,
                 in_models_print=5 + (1 << 64)).problem(False) is None


def test_a_worker_output_stream_sends_whole_elements_only_when_its_timer_fires():
    """With ``data_buffer_time_limit_ms`` (sharded runs on a job server's runner), the SDK
    worker's output stream is flushed on a timer; a flush in the middle of an element failed a
    Flink job (the runner could not decode the part it got). ``bundles`` makes it wait for the
    element's end (``beam_patches.flush_whole_elements_only``)."""
    from apache_beam.runners.worker import data_plane
    assert bundles.flush_whole_elements_only  # (applied when bundles is imported)
    sent = []
    stream = data_plane.TimeBasedBufferingClosableOutputStream(
        close_callback=sent.append, flush_callback=sent.append, time_flush_threshold_ms=1)
    stream.write(b"half of an ")  # an element being written as the timer fires
    time.sleep(0.05)
    assert sent == []
    stream.write(b"element")
    stream.maybe_flush()  # (the worker's call after each whole element)
    assert sent == [b"half of an element"]
    stream.write(b"next")
    stream.close()
    assert sent == [b"half of an element", b"next"]
