"""Start records: where a model starts in a Kafka partition, written before it learns anything
there (a file each, never replaced), so that a restarted partition starts no later than that
even when other models have checkpointed far past it (``resume``)."""
import json
import logging

from ..connectors.storage import atomic_write_many, join, list_dir, makedirs, read_bytes, remove
from .checkpoint_file import one_line
from .per_key import key_dir_name
from .shards import SHARDS

log = logging.getLogger("unitless")

STARTS = "starts"


def starts_dir(model_dir, sharded=False):
    """Where the start records of model_dir's models are (``write_starts``): STARTS, or for
    models over feature shards SHARDS/STARTS."""
    return join(model_dir, SHARDS, STARTS) if sharded else join(model_dir, STARTS)


def write_starts(root, records):
    """Record, durably and together, that each model key starts in a source after a position,
    [(key, source, position)]: a file each, ROOT/<key directory>/<hex of the source>-<the
    position>, never replaced (a source's earliest record for a key is the one that counts)."""
    items, made = [], set()
    for key, source, position in records:
        directory = join(root, key_dir_name(key))
        if directory not in made:
            makedirs(directory)
            made.add(directory)
        name = f"{source.encode('utf-8', 'surrogatepass').hex()}-{int(position)}"
        items.append((join(directory, name), json.dumps(
            {"model_key": key, "source": source, "position": int(position)}).encode()))
    atomic_write_many(items)


def read_starts(root):
    """{model key: {source: its earliest start position}} of the start records under ``root``
    (``write_starts``; also those of earlier versions, one file per key and source)."""
    starts = {}
    for directory in list_dir(root)[1]:
        for name in list_dir(join(root, directory))[0]:
            path = join(root, directory, name)
            try:
                record = json.loads(read_bytes(path))
                key, source, position = record["model_key"], record["source"], record["position"]
                if not (isinstance(key, str) and isinstance(source, str)
                        and isinstance(position, int)):
                    raise ValueError("not a start record")
            except (ValueError, KeyError, TypeError, OSError) as err:
                log.warning("ignoring start record %s: %s", path, one_line(err))
                continue
            known = starts.setdefault(key, {})
            known[source] = min(known.get(source, position), position)
    return starts


def prune_starts(root, key, sources):
    """Remove the key's start records of ``sources`` (a checkpoint of its model, durable now,
    records where it may restart there)."""
    directory = join(root, key_dir_name(key))
    hexes = {source.encode("utf-8", "surrogatepass").hex() for source in sources}
    for name in list_dir(directory)[0]:
        if name.split("-", 1)[0] in hexes:  # (hex has no '-'; a position may: -1)
            remove(join(directory, name))
