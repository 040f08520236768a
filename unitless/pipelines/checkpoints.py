"""Model checkpoints on disk: one Arrow IPC file per checkpoint, written atomically.

Layout: MODEL_DIR/<quoted model key>/ckpt-<examples seen, 12 digits>.arrow, the last K kept, and
MODEL_DIR/<quoted model key>/latest holding the name of the newest file. Files are written to a
temporary name, fsynced and renamed, so a crash never leaves a half-written checkpoint or pointer.
"""
import os
import urllib.parse
import uuid

import pyarrow as pa

LATEST = "latest"
DEFAULT_KEY_DIR = "_default"


def key_dir(model_dir, key):
    return os.path.join(model_dir, urllib.parse.quote(key, safe="") if key else DEFAULT_KEY_DIR)


def dir_key(name):
    return "" if name == DEFAULT_KEY_DIR else urllib.parse.unquote(name)


def _atomic_write(path, data):
    temp = f"{path}.tmp-{uuid.uuid4().hex}"  # unique: bundles may run in parallel threads
    with open(temp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


def table_to_bytes(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def table_from_bytes(data):
    return pa.ipc.open_file(pa.py_buffer(data)).read_all()


def _checkpoint_files(directory):
    return sorted(f for f in os.listdir(directory) if f.startswith("ckpt-") and f.endswith(".arrow"))


def write_checkpoint(model_dir, key, table, examples_seen, keep=3):
    """Write the table as one of this key's checkpoints; returns the checkpoint's path.

    `latest` never moves back to fewer examples (a runner may re-run a bundle that already
    wrote a checkpoint), and pruning never removes the file `latest` names.
    """
    directory = key_dir(model_dir, key)
    os.makedirs(directory, exist_ok=True)
    name = f"ckpt-{examples_seen:012d}.arrow"
    path = os.path.join(directory, name)
    _atomic_write(path, table_to_bytes(table))
    current = latest_checkpoint(model_dir, key)
    if current is None or os.path.basename(current) <= name:
        _atomic_write(os.path.join(directory, LATEST), name.encode())
        current = path
    for stale in _checkpoint_files(directory)[:-keep] if keep > 0 else []:
        if stale not in (name, os.path.basename(current)):
            try:
                os.remove(os.path.join(directory, stale))
            except FileNotFoundError:  # another writer pruned it first
                pass
    return path


def latest_checkpoint(model_dir, key):
    """Path of the key's newest checkpoint (by `latest`, else the newest file), or None."""
    directory = key_dir(model_dir, key)
    try:
        with open(os.path.join(directory, LATEST), encoding="utf-8") as f:
            path = os.path.join(directory, f.read().strip())
        if os.path.exists(path):
            return path
    except FileNotFoundError:
        pass
    files = _checkpoint_files(directory) if os.path.isdir(directory) else []
    return os.path.join(directory, files[-1]) if files else None


def read_checkpoint(path):
    """The Arrow table of a checkpoint file, or of a model directory's `latest` pointer."""
    if os.path.isdir(path):
        newest = latest_checkpoint(os.path.dirname(os.path.abspath(path)),
                                   dir_key(os.path.basename(os.path.abspath(path))))
        if newest is None:
            raise FileNotFoundError(f"{path} holds no checkpoint")
        path = newest
    with pa.memory_map(path) as source:
        return pa.ipc.open_file(source).read_all()


def model_keys(model_dir):
    """Model keys that have a checkpoint under model_dir."""
    if not os.path.isdir(model_dir):
        return []
    return sorted(dir_key(d) for d in os.listdir(model_dir)
                  if os.path.exists(os.path.join(model_dir, d, LATEST)))


def resume_offsets(model_dir, topic):
    """{partition: offset} where a restarted Kafka source must resume so that no model misses
    an example: one past the earliest position any model's latest checkpoint recorded."""
    from ..learner import read_metadata
    starts = {}
    for key in model_keys(model_dir):
        table = read_checkpoint(latest_checkpoint(model_dir, key))
        for source, position in (read_metadata(table).get("input_positions") or {}).items():
            name, _, partition = source.rpartition("/")
            if name == topic and partition.isdigit():
                p = int(partition)
                starts[p] = min(starts.get(p, position + 1), position + 1)
    return starts
