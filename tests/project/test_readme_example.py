"""The README's "In your own Beam pipeline" example, run as written (in a scratch
directory, since it writes to out/)."""
import json
import os

import pytest

from unitless.store.catalog import load_latest

from tests.helpers.readme import README, blocks
from tests.helpers.runners import pipeline


def readme_example(runner="default"):
    """The example's code, its pipeline on ``runner`` ("default": as written)."""
    code = blocks("python", "In your own Beam pipeline")[0]
    if runner != "default":
        assert "with beam.Pipeline() as p:" in code
        code = code.replace("with beam.Pipeline() as p:", f"with pipeline({runner!r}) as p:")
    return code


@pytest.mark.default_runner  # (as a user runs it; whichever runner it lands on)
@pytest.mark.parametrize("runner", ["fnapi", "prism", "default"])
def test_the_readme_beam_example_runs_and_its_assertion_holds(tmp_path, monkeypatch, runner):
    monkeypatch.chdir(tmp_path)
    # Beam's runners share one Prism job server per process (``PrismRunner.shared_handle``),
    # made with the options of the first run that asks: the default runner's has no
    # --prism_location (it would download Prism), so it is kept from later tests' runs
    from apache_beam.runners.portability import prism_runner
    from apache_beam.utils import shared
    monkeypatch.setattr(prism_runner.PrismRunner, "shared_handle", shared.Shared())
    code = readme_example(runner)
    assert "assert_that" in code and "Learn(" in code
    exec(compile(code, str(README), "exec"), {"__name__": "readme_example",
                                              "pipeline": pipeline})
    for key, n in (("eu", 50), ("us", 50)):
        meta = json.loads(load_latest(str(tmp_path / "out" / "models"), key)[1].schema.metadata[
            b"unitless"])
        assert meta["examples_seen"] == n
    assert not os.listdir(tmp_path / "out" / "dead_letter")


def test_a_wrong_assertion_in_the_example_would_fail(tmp_path, monkeypatch):
    # the example's check can fail: with one example removed the pipeline raises
    monkeypatch.chdir(tmp_path)
    code = readme_example("fnapi").replace("for i in range(100)]", "for i in range(99)]")
    try:
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example",
                                                  "pipeline": pipeline})
    except Exception as err:  # Beam wraps the AssertionError
        assert "AssertionError" in repr(err) or isinstance(err, AssertionError)
    else:
        raise AssertionError("the README example's assertion did not fail on 99 examples")
