"""Files written whole or not at all: the one way unitless writes a file it may be killed during.

``atomic_write`` writes to a temporary name in the same directory, fsyncs it, renames it over
the final name and fsyncs the directory, so a reader sees the old file or the new one, never
part of one, and the new one survives a machine crash once the call returns. A process killed
mid-write can leave a temporary file behind (nothing can remove it at SIGKILL);
``remove_leftovers`` deletes those when the next run starts.
"""
import logging
import os
import uuid

log = logging.getLogger("unitless")
TEMP_MARK = ".tmp-"


def atomic_write(path, data):
    """Write ``data`` (bytes) to ``path`` atomically and durably."""
    directory, name = os.path.split(path)
    temp = os.path.join(directory, f".{name}{TEMP_MARK}{uuid.uuid4().hex}")  # unique: bundles
    try:                                                                     # run in parallel
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.remove(temp)
        except FileNotFoundError:
            pass
        raise
    sync_directory(directory)


def sync_directory(directory):
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_temporary(name):
    return name.startswith(".") and TEMP_MARK in name


def remove_leftovers(directory, depth=1):
    """Remove the temporary files that killed runs left in ``directory`` and, to ``depth``
    levels, its subdirectories. Only call this when no other run writes there."""
    if not os.path.isdir(directory):
        return
    for entry in os.scandir(directory):
        if entry.is_file(follow_symlinks=False) and is_temporary(entry.name):
            log.info("removing %s, left by an interrupted run", entry.path)
            os.remove(entry.path)
        elif depth > 0 and entry.is_dir(follow_symlinks=False):
            remove_leftovers(entry.path, depth - 1)
