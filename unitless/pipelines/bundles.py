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


def hold_each_key_in_one_bundle(options):
    """Set on a pipeline's options what runners need to keep each key in one bundle at a time
    (runners read the options at ``run()``, so ``Learn`` sets them when it is applied).

    Prism, which Beam's default DirectRunner hands most pipelines to, splits a bundle that
    shows no progress between two of its 100 ms progress ticks, and schedules the split-off
    elements at once with their keys released while the bundle still holds the same keys:
    its experiment ``prism_disable_sdf_split`` turns that off. Other runners ignore it."""
    from apache_beam.options.pipeline_options import DebugOptions
    options.view_as(DebugOptions).add_experiment("prism_disable_sdf_split")


class TwoBundlesAtOnce(RuntimeError):
    """A runner gave one key of a stateful step to two bundles at once."""


def new_step():
    """A token naming one stateful step of one pipeline, the same in every copy of its DoFn."""
    return uuid.uuid4().hex


_lock = threading.Lock()
_holders = {}  # (step, key) -> the KeyGuard whose bundle holds it, in this process


class KeyGuard:
    """One DoFn instance's keys in its current bundle: ``hold`` each before touching its state,
    ``release`` them all once the bundle ends (or fails: the SDK tears a failed bundle's DoFn
    down). The SDK runs concurrent bundles of a step on separate DoFn instances, so another
    guard of the same step holding a key means a second bundle of that key at once."""

    def __init__(self, step):
        self.step, self.held = step, set()

    def hold(self, key):
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

    def release(self):
        with _lock:
            for entry in self.held:
                if _holders.get(entry) is self:
                    del _holders[entry]
        self.held = set()
