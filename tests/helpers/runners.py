"""The runners tests run pipelines on, each named: Beam's default runner hands a pipeline to
Prism, a Prism job server an earlier test of the process started, or, when none starts, quietly
another runner, so a test on it could pass on a runner it was not meant for (conftest.py
refuses it)."""
import os

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

PRISM = os.environ.get("UNITLESS_PRISM") or os.path.expanduser(
    "~/.cache/unitless/prism/2.77.0/prism")
RUNNERS = ("fnapi", "prism")


def prism_args(streaming=False):
    """The command line arguments of a run on Prism (the binary deploy/prism/build_prism.sh
    builds), with a job server of its own: Beam shares one per process, which an earlier
    pipeline of this process may have started otherwise."""
    if os.environ.get("UNITLESS_QUICK_TIER"):
        raise RuntimeError("a test of the quick tier (./test.sh --quick) runs on Prism: mark it "
                           "@pytest.mark.prism (tests/conftest.py's tiers)")
    if not os.access(PRISM, os.X_OK):
        raise RuntimeError(f"Prism runner binary missing at {PRISM}: run "
                           "deploy/prism/build_prism.sh")
    return ["--runner", "PrismRunner", "--prism_location", PRISM,
            "--experiments", "disable_prism_server_singleton",
            *(["--streaming"] if streaming else [])]


def runner_args(runner, streaming=False):
    """The command line arguments of a run on the named runner ("fnapi": none, the command's
    default)."""
    return prism_args(streaming) if runner == "prism" else []


def pipeline(runner, streaming=False):
    """A pipeline on the named runner: "fnapi" (Beam's FnApiRunner, in this process) or
    "prism"."""
    if runner == "fnapi":
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner
        return beam.Pipeline(runner=FnApiRunner())
    if runner == "prism":
        return beam.Pipeline(options=PipelineOptions(prism_args(streaming)))
    raise ValueError(f"unknown runner {runner!r}")
