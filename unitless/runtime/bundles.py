"""What Learn needs of a runner's bundles: each key of its stateful steps processed by one
bundle at a time. A second bundle of a key that runs while the first has not committed reads
the key's state as it was before the first, and whichever commits last overwrites the other's
changes: examples lost or learned twice. Beam state has no compare-and-set, and a state version
checked when read cannot tell that bundle from a retry of a failed one, so the rule is held two
ways: the runners' options that keep them from doing it, and a check in each worker process
that refuses it when it happens anyway. The check sees the bundles of its own process, from a
bundle's first touch of a key to the end of its DoFn's ``finish_bundle``; a second bundle in
another process, or in the moment between a bundle's end and its commit, is left to the run's
accounting (``accounting``), which fails the run at the end of its input.
"""
import threading
import uuid
from typing import TYPE_CHECKING, Hashable

from .beam_patches import flush_whole_elements_only

if TYPE_CHECKING:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions


def hold_each_key_in_one_bundle(options: "PipelineOptions") -> None:
    """Set on a pipeline's options what runners need to keep each key in one bundle at a time
    (runners read the options at ``run()``, so ``Learn`` sets them when it is applied).

    Prism, which Beam's default DirectRunner hands most pipelines to, splits a bundle that
    shows no progress between two of its 100 ms progress ticks, and schedules the split-off
    elements at once with their keys released while the bundle still holds the same keys:
    its experiment ``prism_disable_sdf_split`` turns that off. Other runners ignore it."""
    from apache_beam.options.pipeline_options import DebugOptions
    options.view_as(DebugOptions).add_experiment("prism_disable_sdf_split")


# the experiment (Beam's Java and Python SDK harnesses, the runner's side of Flink's too) that
# sends the elements buffered for the other side of the Fn API every this many ms, not only
# once the buffer is full or the bundle ends
DATA_BUFFER_TIME = "data_buffer_time_limit_ms="
SEND_WITHIN_MS = 5


def send_elements_within(pipeline: "beam.Pipeline", ms: int = SEND_WITHIN_MS) -> None:
    """On a job server's runner (Flink), have the runner hand each element on to the SDK
    worker within ``ms`` milliseconds, and the worker its outputs back, instead of at the end
    of the bundle, unless the options say otherwise (``--experiments
    data_buffer_time_limit_ms=N``). Each round of a sharded model waits for its parts: Flink
    streams a bundle's elements to the worker through a 1 MB buffer sent when full or when
    the bundle ends (by default after 1,000 elements or 1 s), so a part reached its shard up
    to a second after it was read. A bundle still commits its state
    and outputs as a whole when it ends; only when the worker sees its elements changes.
    Not on Prism, which gives a bundle all its elements at once (and failed a run with it:
    its worker's outputs sent in pieces were not decoded).
    And on the embedded Flink cluster Beam's FlinkRunner starts for this process, Flink's
    network buffers between stages go within ``ms`` too (``flink.embedded_buffer_timeout``);
    a job server of one's own is configured by whoever starts it (docs/operations.md)."""
    from apache_beam.options.pipeline_options import DebugOptions, FlinkRunnerOptions
    from apache_beam.runners.portability.flink_runner import FlinkRunner
    from apache_beam.runners.portability.portable_runner import PortableRunner
    from apache_beam.runners.portability.prism_runner import PrismRunner
    runner = pipeline.runner
    if not isinstance(runner, PortableRunner) or isinstance(runner, PrismRunner):
        return
    debug = pipeline.options.view_as(DebugOptions)
    if not any(e.startswith(DATA_BUFFER_TIME) for e in debug.experiments or []):
        debug.add_experiment(f"{DATA_BUFFER_TIME}{ms}")
    if (isinstance(runner, FlinkRunner)
            and pipeline.options.view_as(FlinkRunnerOptions).flink_master == "[local]"):
        from .flink import embedded_buffer_timeout
        embedded_buffer_timeout(ms)


flush_whole_elements_only()  # (in every worker that runs Learn's steps, before any bundle)


class TwoBundlesAtOnce(RuntimeError):
    """A runner gave one key of a stateful step to two bundles at once."""


def new_step() -> str:
    """A token naming one stateful step of one pipeline, the same in every copy of its DoFn."""
    return uuid.uuid4().hex


_lock = threading.Lock()
_holders: dict = {}  # (step, key) -> the KeyGuard whose bundle holds it, in this process


class KeyGuard:
    """One DoFn instance's keys in its current bundle: ``hold`` each before touching its state,
    ``release`` them all once the bundle ends (or fails: the SDK tears a failed bundle's DoFn
    down). The SDK runs concurrent bundles of a step on separate DoFn instances, so another
    guard of the same step holding a key means a second bundle of that key at once."""
    held: set[tuple[str, Hashable]]

    def __init__(self, step: str) -> None:
        self.step, self.held = step, set()

    def hold(self, key: Hashable) -> None:
        entry = (self.step, key)
        if entry in self.held:
            return
        with _lock:
            holder = _holders.setdefault(entry, self)
        if holder is not self:
            raise TwoBundlesAtOnce(
                f"the runner gave key {key!r} of a stateful step to two bundles at once: the "
                "second would learn on state the first has not committed, losing examples or "
                "learning them twice; refusing (Prism does this without its experiment "
                "prism_disable_sdf_split, which Learn sets)")
        self.held.add(entry)

    def release(self) -> None:
        with _lock:
            for entry in self.held:
                if _holders.get(entry) is self:
                    del _holders[entry]
        self.held = set()
