"""Where unitless reads and writes files: the one module that touches a file system.

Paths without a scheme are local files, handled with ``os``; a path with a scheme (gs://, s3://,
hdfs://, azfs://, ...) goes through Beam's ``FileSystems``. ``atomic_write`` writes a file whole
or not at all; how, on each kind of file system: docs/design.md, "Files and object stores".
"""
import ctypes
import gzip
import itertools
import logging
import os
import re
import uuid
from typing import Any, BinaryIO, Optional, Sequence, cast

log = logging.getLogger("unitless")
TEMP_MARK = ".tmp-"
OBJECT_STORES = frozenset({"gs", "s3", "azfs"})
_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*)://")
# this process's random prefix and a count (``unique_token``); itertools.count is safe across
# threads, and a forked child draws a prefix of its own
_TOKEN: list[Any] = [uuid.uuid4().hex[:16], itertools.count()]
os.register_at_fork(after_in_child=lambda: _TOKEN.__setitem__(0, uuid.uuid4().hex[:16]))


def unique_token() -> str:
    """32 hex digits unique to this call in any process, thread or fork (a random prefix per
    process, drawn again in a forked child, then a count), without a random draw per call
    (uuid4 is a system call and 1% of a run writing 10,000 models)."""
    return f"{_TOKEN[0]}{next(_TOKEN[1]):016x}"


def scheme(path: str) -> Optional[str]:
    """The path's scheme ("s3", "gs", ...), or None for a local path."""
    found = _SCHEME.match(path)
    return found.group(1).lower() if found else None


_file_systems: dict = {}  # (scheme, options) -> Beam FileSystem: each makes a (slow) client


def _fs(path):
    """Beam's FileSystem for the path's scheme, made once per scheme and pipeline options.
    Outside a pipeline (`unitless inspect`) with the default options and the environment's
    settings (credentials, endpoint)."""
    from apache_beam.io.filesystems import FileSystems
    if FileSystems._pipeline_options is None:
        from apache_beam.options.pipeline_options import PipelineOptions
        FileSystems.set_options(PipelineOptions([]))
    key = (scheme(path), id(FileSystems._pipeline_options))
    if key not in _file_systems:
        _file_systems[key] = FileSystems.get_filesystem(path)
    return _file_systems[key]


def join(directory: str, *names: str) -> str:
    if scheme(directory) is None:
        return os.path.join(directory, *names)
    return "/".join([directory.rstrip("/"), *names])


def resolve(path: str) -> str:
    """The canonical name of a path: a local one absolute with symlinks resolved, a URL as is."""
    return os.path.realpath(os.path.expanduser(path)) if scheme(path) is None else path


def where(path: str) -> str:
    """A local path made absolute (for messages), a URL as is."""
    return os.path.abspath(path) if scheme(path) is None else path


# --- reading -----------------------------------------------------------------------------------

def open_read(path: str) -> BinaryIO:
    """A binary, seekable file object of the file at path (FileNotFoundError if absent)."""
    if scheme(path) is None:
        return open(path, "rb")
    from apache_beam.io.filesystem import CompressionTypes
    if not _fs(path).exists(path):  # else Beam logs an error before it raises
        raise FileNotFoundError(f"no such file: {path}")
    return _fs(path).open(path, compression_type=CompressionTypes.UNCOMPRESSED)  # .gz as is


def open_input(path: str) -> BinaryIO | gzip.GzipFile:
    """open_read, decompressed when the name ends in .gz."""
    raw = open_read(path)
    if not path.endswith(".gz"):
        return raw
    unzipped = gzip.GzipFile(fileobj=raw, mode="rb")
    unzipped.myfileobj = cast(Any, raw)  # closed with it, as when GzipFile opens the file itself
    return unzipped


def read_bytes(path: str, limit: int = -1) -> bytes:
    with open_read(path) as f:
        return f.read(limit)


def read_start(path: str, limit: int) -> Optional[bytes]:
    """The first ``limit`` bytes of the file at path; None when nothing is there; ValueError
    when something other than a regular file is (a directory, a FIFO: never opened)."""
    if scheme(path) is None and os.path.lexists(path) and not os.path.isfile(path):
        raise ValueError("it is not a regular file")
    try:
        return read_bytes(path, limit)
    except FileNotFoundError:
        return None


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def match(pattern: str) -> list[str]:
    """The files a path or glob names, sorted (a directory is not a match)."""
    if scheme(pattern) is None:
        import glob
        pattern = os.path.expanduser(pattern)
        found = glob.glob(pattern) or ([pattern] if os.path.exists(pattern) else [])
        return sorted(p for p in found if os.path.isfile(p))
    results = _fs(pattern).match([pattern])
    return sorted(m.path for r in results for m in r.metadata_list
                  if not m.path.endswith("/"))


def list_dir(directory: str) -> tuple[list[str], list[str]]:
    """(file names, subdirectory names) directly in directory, each sorted; both empty when it
    does not exist."""
    if scheme(directory) is None:
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        return (sorted(e.name for e in entries if e.is_file()),  # a link to a file counts
                sorted(e.name for e in entries if e.is_dir(follow_symlinks=False)))
    prefix = directory.rstrip("/") + "/"
    files: set[str]
    dirs: set[str]
    files, dirs = set(), set()
    for path in match(prefix + "**"):
        head, slash, _ = path[len(prefix):].partition("/")
        (dirs if slash else files).add(head)
    return sorted(files), sorted(dirs)


def is_dir(path: str) -> bool:
    if scheme(path) is None:
        return os.path.isdir(path)
    return any(list_dir(path))


def modified(path: str) -> float:
    """The file's last modification, in seconds since the epoch."""
    return os.path.getmtime(path) if scheme(path) is None else _fs(path).last_updated(path)


# --- writing -----------------------------------------------------------------------------------

def makedirs(directory: str) -> bool:
    """Make the directory (and its parents) unless it exists; True when this call made it
    (an object store has no directories: False)."""
    if scheme(directory) is None:
        try:
            try:
                os.mkdir(directory)  # (its parent is there, mostly: one system call)
            except FileNotFoundError:
                os.makedirs(directory)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
            return False
        return True
    if scheme(directory) not in OBJECT_STORES and not _fs(directory).exists(directory):
        _fs(directory).mkdirs(directory)
        return True
    return False


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` (bytes) to ``path`` whole or not at all (see the module docstring)."""
    atomic_write_many([(path, data)])


def atomic_write_many(items: Sequence[tuple[str, bytes]]) -> None:
    """``atomic_write`` of each (path, data), in order; locally, the files' data and then
    their names are made durable together (``_make_durable``), not one file at a time."""
    local = [(path, data) for path, data in items if scheme(path) is None]
    for path, data in items:
        if scheme(path) in OBJECT_STORES:
            _upload(path, data)
        elif scheme(path) is not None:
            _replace_remote(path, data)
    if not local:
        return
    directories = sorted({os.path.dirname(path) or "." for path, _ in local})
    file_systems = _file_systems_of(directories) if len(local) > 1 else None
    temps = []  # (the files this call made: never another's, which a taken name would be)
    try:
        for path, data in local:
            directory, name = os.path.split(path)
            # (unique temporary names: bundles run in parallel)
            temp = os.path.join(directory, f".{name}{TEMP_MARK}{unique_token()}")
            _write_new(temp, data)
            temps.append(temp)
        _make_durable(temps, file_systems)
        for temp, (path, _) in zip(temps, local):
            os.replace(temp, path)
    except BaseException:
        for temp in temps:
            remove(temp)
        raise
    # (one directory: fsynced, which flushes less than its whole file system)
    _make_durable(directories, file_systems if len(directories) > 1 else None)


def _write_new(path, data):
    """A new file holding ``data`` (bytes-like), or none (it raises): three system calls where
    Python's ``open`` makes six."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        try:
            view = memoryview(data).cast("B")  # (os.write counts bytes)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except BaseException:
        remove(path)
        raise


def _replace_remote(path, data):
    """A file system with renames but no atomic replace (hdfs; see the module docstring)."""
    directory, name = path.rsplit("/", 1)
    temp = join(directory, f".{name}{TEMP_MARK}{unique_token()}")
    try:
        _upload(temp, data)
        if _fs(path).exists(path):
            _fs(path).delete([path])
        _fs(temp).rename([temp], [path])
    except BaseException:
        remove(temp)
        raise


def _make_durable(paths, file_systems=None):
    """Local files or directories on disk, surviving a machine crash, once this returns: each
    fsynced, or, given ``file_systems`` (``_file_systems_of`` the directories holding them),
    one ``syncfs`` per file system, which costs about one disk flush for them all, not one
    each. (syncfs reports write-back errors since Linux 5.8.)"""
    if file_systems is None:
        for path in paths:
            _fsync(path)
        return
    for path in file_systems:
        fd = os.open(path, os.O_RDONLY)
        try:
            if _syncfs(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs: {os.strerror(err)}", path)
        finally:
            os.close(fd)


def _file_systems_of(directories):
    """One directory on each file system holding ``directories`` (and so the files in them),
    or None where there is no ``syncfs`` (not Linux)."""
    if _syncfs is None:
        return None
    return list({os.stat(path).st_dev: path for path in directories}.values())


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _find_syncfs():
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):  # not Linux
        return None


_syncfs = _find_syncfs()


def _upload(path, data):
    from apache_beam.io.filesystem import CompressionTypes
    f = _fs(path).create(path, mime_type="application/octet-stream",
                         compression_type=CompressionTypes.UNCOMPRESSED)  # a .gz name too
    f.write(data)
    f.close()


def remove(path: str) -> None:
    """Remove a file; one already gone is fine."""
    if scheme(path) is None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        return
    from apache_beam.io.filesystem import BeamIOError
    try:
        _fs(path).delete([path])
    except BeamIOError as err:
        if not all(isinstance(e, FileNotFoundError) or "not found" in str(e).lower()
                   for e in err.exception_details.values()):
            raise


def remove_tree(directory: str) -> None:
    """Remove a directory and everything in it (on an object store, every object under the
    prefix); one already gone is fine."""
    if scheme(directory) is None:
        import shutil
        try:
            shutil.rmtree(directory)
        except FileNotFoundError:
            pass
        return
    for path in match(directory.rstrip("/") + "/**"):
        remove(path)


def is_temporary(name: str) -> bool:
    return name.startswith(".") and TEMP_MARK in name


def remove_leftovers(directory: str, depth: int = 1) -> None:
    """Remove the temporary files that killed runs left in ``directory`` and, to ``depth``
    levels, its subdirectories. Only call this when no other run writes there."""
    if scheme(directory) in OBJECT_STORES:
        return  # uploads leave nothing behind
    files, dirs = list_dir(directory)
    for name in files:
        if is_temporary(name):
            log.info("removing %s, left by an interrupted run", join(directory, name))
            remove(join(directory, name))
    for name in dirs if depth > 0 else []:
        remove_leftovers(join(directory, name), depth - 1)
