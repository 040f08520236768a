"""Who may write a model directory: one run at a time (``own``), and a run that does not
resume only into a directory without an earlier run's models (``refuse_earlier_models``), or
after removing them (``start_over``). Why and how: docs/guarantees.md, "Mix two runs' models".
"""
import atexit
import errno
import json
import logging
import os
import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

from ..connectors.files import output_parts
from ..connectors.storage import (atomic_write, join, list_dir, makedirs, read_bytes, remove,
                                  remove_tree, resolve, scheme, unique_token)
from .groups import GROUPS, PUBLISHED
from .per_key import checkpoint_files
from .shards import SHARDS
from .starts import STARTS

log = logging.getLogger("unitless")

OWNER = ".unitless-owner"  # the lock file (or object) in a model directory
# an object store's lease: its holder rewrites it every HEARTBEAT seconds; one not rewritten for
# STALE seconds was left by a run that died, and the next run takes it over
HEARTBEAT, STALE = 10.0, 60.0


class DirectoryInUse(ValueError):
    """Another run holds the model directory."""


# the directories of a model directory that runs write, and what each holds (for messages)
LAYOUTS = ((GROUPS, "model group checkpoints"), (SHARDS, "feature shards' checkpoints"),
           (STARTS, "Kafka start records"), (PUBLISHED, "model states published for serving"))


def _earlier_dirs(model_dir):
    """(path, what it holds) of each directory an earlier run wrote in ``model_dir``: the
    layouts' directories that hold anything, then per-key model directories."""
    _, dirs = list_dir(model_dir)
    for name, what in LAYOUTS:
        if name in dirs and any(list_dir(join(model_dir, name))):
            yield join(model_dir, name), what
    for name in dirs:
        if name not in dict(LAYOUTS) and checkpoint_files(join(model_dir, name)):
            yield join(model_dir, name), "checkpoints of a model key"


def earlier_models(model_dir: str) -> Optional[str]:
    """What an earlier run left in ``model_dir`` that a new run's checkpoints would be mixed
    with (a phrase for a message), or None."""
    for path, what in _earlier_dirs(model_dir):
        return f"{what} ({path})"
    return None


def refuse_earlier_models(model_dir: str) -> None:
    """ValueError, in one line, when a run that does not resume would write into a model
    directory holding an earlier run's models: its checkpoints would be mixed with theirs (a
    model's newest checkpoint is the one of most examples, whichever run wrote it)."""
    found = earlier_models(model_dir)
    if found is not None:
        raise ValueError(f"{model_dir} holds an earlier run's models ({found}): pass --resume "
                         "to continue them, --overwrite to remove them and start over, or "
                         "another --model-dir")


def start_over(model_dir: str, outputs: Sequence[str] = ()) -> None:
    """Remove what earlier runs wrote in ``model_dir`` (its checkpoints and start records) and
    the part files in the ``outputs`` directories (predictions, dead letters), so that a run
    holds only its own."""
    removed = 0
    for path, _ in list(_earlier_dirs(model_dir)):
        remove_tree(path)
        removed += 1
    for directory in outputs:
        for name in output_parts(directory):
            remove(join(directory, name))
            removed += 1
    if removed:
        log.info("--overwrite: removed earlier runs' models and outputs in %s", ", ".join(
            [model_dir, *outputs]))


# --- one writer at a time ----------------------------------------------------------------------

_held: dict = {}  # canonical model directory -> the lock this process holds (_FileLock or _Lease)
_held_lock = threading.Lock()


@contextmanager
def given_up_after(model_dir: str) -> Iterator[None]:
    """Give ``model_dir`` up when the block ends if the block took it (``own``: ``Learn`` takes
    it when it is applied, after checking the outputs)."""
    before = resolve(model_dir) in _held
    try:
        yield
    finally:
        if not before:
            release(model_dir)


def own(model_dir: str) -> None:
    """Hold ``model_dir`` as its one writer until ``release`` or this process ends (a process
    holding it already holds it still); DirectoryInUse, naming the holder, when another
    process holds it."""
    key = resolve(model_dir)
    with _held_lock:
        if key in _held:
            return
        lock = _Lease(model_dir) if scheme(model_dir) else _FileLock(model_dir)
        lock.take()
        _held[key] = lock


def release(model_dir: str) -> None:
    """Give ``model_dir`` up, if this process holds it."""
    with _held_lock:
        lock = _held.pop(resolve(model_dir), None)
    if lock is not None:
        lock.give_up()


@atexit.register
def _release_all():
    for key in list(_held):
        release(key)


def _holder():
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _in_use(model_dir, holder):
    who = (f"process {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}"
           if isinstance(holder, dict) else "another run")
    return DirectoryInUse(f"{model_dir} is in use by another run ({who}): one run writes a "
                          "model directory at a time; wait for it to end, or pass another "
                          "--model-dir")


class _FileLock:
    """A local directory's lock: an exclusive ``flock`` on its OWNER file, which the kernel
    gives up when the holding process ends however it ends (so no lock outlives its run), and
    the holder's host, pid and start written in it to name it to the next run."""

    def __init__(self, model_dir):
        self.model_dir, self.path, self.fd = model_dir, join(model_dir, OWNER), None

    def take(self):
        import fcntl
        makedirs(self.model_dir)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise OSError(err.errno, f"cannot write to {self.model_dir}: "
                                     f"{err.strerror or err}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                os.close(fd)
                raise
            held = os.read(fd, 4096)
            os.close(fd)
            raise _in_use(self.model_dir, _parse(held)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)
        self.fd = fd

    def give_up(self):
        if self.fd is not None:
            os.close(self.fd)  # (closing gives up the flock; the file stays for the next run)
            self.fd = None


class _Lease:
    """An object store's lock: an OWNER object naming its holder and when it last said it was
    alive (rewritten every HEARTBEAT seconds by a thread); a run finding one younger than STALE
    seconds refuses to start, an older one is taken over. Taking it is a write then a read
    back, so two runs starting within the same moment may both read their own; object stores
    offer no compare-and-set through Beam's file systems (docs/guarantees.md)."""

    def __init__(self, model_dir):
        self.model_dir, self.path = model_dir, join(model_dir, OWNER)
        self.token, self.stop = unique_token(), threading.Event()
        self.holder = {**_holder(), "token": self.token}

    def take(self):
        held = self._read()
        if held is not None and time.time() - _number(held.get("heartbeat")) < STALE:
            raise _in_use(self.model_dir, held)
        if held is not None:
            log.warning("taking over %s from a run that stopped renewing it (%s)", self.path,
                        held.get("host"))
        self._write()
        if (self._read() or {}).get("token") != self.token:
            raise _in_use(self.model_dir, self._read())
        threading.Thread(target=self._beat, daemon=True, name="unitless-lease").start()

    def _read(self):
        try:
            return _parse(read_bytes(self.path))
        except FileNotFoundError:
            return None

    def _write(self):
        atomic_write(self.path, json.dumps({**self.holder, "heartbeat": time.time()}).encode())

    def _beat(self):
        while not self.stop.wait(HEARTBEAT):
            try:
                held = self._read()
                if (held or {}).get("token") != self.token:  # (not renewed in time: taken)
                    log.error("%s was taken over by %s: this run no longer holds it", self.path,
                              (held or {}).get("host", "another run"))
                    return
                self._write()
            except OSError as err:  # (the next beat tries again; the run goes on)
                log.warning("could not renew %s: %s", self.path, err)

    def give_up(self):
        self.stop.set()
        if (self._read() or {}).get("token") == self.token:
            remove(self.path)


def _number(value):
    """A lease's time as a number (one that is not: long ago)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _parse(data):
    try:
        held = json.loads(data)
        return held if isinstance(held, dict) else {}
    except ValueError:
        return {}
