"""Every change unitless makes to Beam's own code, in one place. Each replaces one function of
Beam's Python SDK (its worker's, or its job client's), written for the Beam release
pyproject.toml pins (``WRITTEN_FOR``), and is applied only on it, once per process, and only
where it finds what it replaces: on another Beam nothing is changed, and a warning says so.
They change how the SDK does something, never what a pipeline computes."""
import logging
import sys
from typing import Any

log = logging.getLogger("unitless")

WRITTEN_FOR = "2.77."  # the apache-beam release these patches were read against


def _on_the_beam_written_for(patch):
    """Whether ``patch`` may change this process's Beam (its release is ``WRITTEN_FOR``)."""
    import apache_beam
    if apache_beam.__version__.startswith(WRITTEN_FOR):
        return True
    log.warning("apache-beam %s is not the release unitless patches (%sx): %s not applied",
                apache_beam.__version__, WRITTEN_FOR, patch)
    return False


def flush_whole_elements_only() -> None:
    """Make the Python SDK worker's time-limited output streams (``data_buffer_time_limit_ms``)
    send only whole elements. Beam's flushes its buffer from a timer thread at any moment, also
    in the middle of an element being written, and the runner then cannot decode the part it
    got: a Flink job failed with an EOFException in its coder, and Prism's outputs were not
    decoded. Here the timer only marks a flush due, and the stream sends it after the next
    whole element (``maybe_flush``, which the worker calls after each one) or at the end of the
    bundle. Applied when this module is imported: in every worker that runs ``Learn``'s steps,
    before any of their bundles."""
    from apache_beam.runners.worker import data_plane
    stream: Any = data_plane.TimeBasedBufferingClosableOutputStream
    if getattr(stream, "whole_elements_only", False) or not _on_the_beam_written_for(
            "flush_whole_elements_only"):
        return

    def _schedule_periodic_flush(self):
        def mark_due():
            self._flush_due = True
        self._flush_due = False
        self._periodic_flusher = data_plane.PeriodicThread(
            self._time_flush_threshold_ms / 1000.0, mark_due)
        self._periodic_flusher.daemon = True
        self._periodic_flusher.start()

    def maybe_flush(self):
        if self._flush_due or self.size() > self._size_flush_threshold:
            self._flush_due = False
            self.flush()

    stream._schedule_periodic_flush = _schedule_periodic_flush
    stream.maybe_flush = maybe_flush
    stream.whole_elements_only = True


def weigh_state_without_scanning_modules() -> None:
    """Make the worker's Beam state cache weigh values without listing every module's globals.

    The Python SDK weighs each value it caches (every state read that misses, every write)
    with objsize, which first collects the ids of all globals of all loaded modules so as not
    to count them, on every call: several calls per model key for a key's first block, so a
    large share of a run over many keys (profiled). The values this DoFn keeps are bytes, ints
    and lists of them, which reach no module globals, so the scan changes nothing for them;
    for other state in the same worker, a value reaching a module's globals is now counted
    heavier, which makes the cache evict sooner, never hold more. Lists of bytes and ints,
    which is what the cache is handed here, are weighed directly (each item's size, a repeated
    item counted again), without objsize's walk. Applied once per worker process; without the
    function it replaces (another Beam), nothing changes.
    """
    from apache_beam.runners.worker import statecache
    original = getattr(statecache, "get_deep_size", None)
    if original is None or getattr(original, "unitless", False) or not _on_the_beam_written_for(
            "weigh_state_without_scanning_modules"):
        return
    import objsize

    def get_deep_size(*objs):
        if all(type(o) is list and all(type(v) in (bytes, int) for v in o) for o in objs):
            return sum(sys.getsizeof(o) + sum(map(sys.getsizeof, o)) for o in objs)
        return objsize.get_deep_size(*objs, get_size_func=statecache._size_func,
                                     get_referents_func=statecache._get_referents_func,
                                     filter_func=statecache._filter_func,
                                     exclude_modules_globals=False)
    get_deep_size.unitless = True  # type: ignore[attr-defined]  # (marks it patched)
    statecache.get_deep_size = get_deep_size


def watch_jobs_without_a_deadline() -> None:
    """Make the Python SDK's job client follow a job's state and messages for as long as the
    job runs. Beam's opens both streams with the job service's request timeout
    (``--job_server_timeout``, 300 s by default) where the job service knows the job by its
    preparation id, as Prism's does: the streams then end after five minutes, and
    ``wait_until_finish`` fails a job that is still running (gRPC DEADLINE_EXCEEDED; a run
    over 100,000 model keys on Prism failed so). Here Beam's own ``run``, which uses the
    timeout for those two streams alone, runs without it; every other request keeps it.
    Applied in the process that submits a job (``unitless``'s commands, ``Learn`` in your
    own pipeline), once."""
    from apache_beam.runners.portability import portable_runner
    handle: Any = portable_runner.JobServiceHandle
    if getattr(handle.run, "unitless", False) or not _on_the_beam_written_for(
            "watch_jobs_without_a_deadline"):
        return
    beams_run = handle.run

    def run(self, preparation_id):
        timeout, self.timeout = self.timeout, None
        try:
            return beams_run(self, preparation_id)
        finally:
            self.timeout = timeout
    run.unitless = True  # type: ignore[attr-defined]  # (marks it patched)
    handle.run = run
