"""Start records: where a model starts in a Kafka partition, written before it learns anything
there (a file per model group per write, never replaced), so that a restarted partition starts
no later than that even when other models have checkpointed far past it (``resume``)."""
import json
import logging
from typing import Callable, Container, Dict, Iterable, List, Optional, Tuple

from ..connectors.storage import (atomic_write_many, join, list_dir, makedirs, read_bytes, remove,
                                  unique_token)
from .checkpoint_file import one_line
from .per_key import key_dir_name
from .shards import SHARDS

log = logging.getLogger("unitless")

STARTS = "starts"


def starts_dir(model_dir: str, sharded: bool = False) -> str:
    """Where the start records of model_dir's models are (``write_starts``): STARTS, or for
    models over feature shards SHARDS/STARTS."""
    return join(model_dir, SHARDS, STARTS) if sharded else join(model_dir, STARTS)


FORMAT = "unitless start records 1"


def write_starts(root: str, records: Iterable[Tuple[str, str, int]],
                 group_of: Optional[Callable[[str], str]] = None) -> None:
    """Record, durably and together, that each model key starts in a source after a position,
    [(key, source, position)]: a file per model group (``group_of(key)``; None: a group per
    key), ROOT/<group directory>/starts-<token>.json, never replaced (a source's earliest
    record for a key is the one that counts); the group's owner removes it once every record
    in it is covered (``prune_starts``)."""
    groups: Dict[str, List[list]] = {}
    for key, source, position in records:
        group = key if group_of is None else group_of(key)
        groups.setdefault(group, []).append([key, source, int(position)])
    items = []
    for group, found in groups.items():
        directory = join(root, key_dir_name(group))
        makedirs(directory)
        items.append((join(directory, f"starts-{unique_token()}.json"),
                      json.dumps({"format": FORMAT, "records": found}).encode()))
    atomic_write_many(items)


def _records(path):
    """[(key, source, position)] of a start record file (also of earlier versions: a record
    each); ValueError unless it reads as one."""
    found = json.loads(read_bytes(path))
    records = (found["records"] if found.get("format") == FORMAT else
               [[found["model_key"], found["source"], found["position"]]])
    if not all(isinstance(k, str) and isinstance(s, str) and isinstance(p, int)
               and not isinstance(p, bool) for k, s, p in records):
        raise ValueError("not a start record")
    return [tuple(r) for r in records]


def _files(root, directory):
    """[(path, records)] of a directory's start record files, each unreadable one skipped with
    a warning."""
    found = []
    for name in list_dir(join(root, directory))[0]:
        path = join(root, directory, name)
        try:
            found.append((path, _records(path)))
        except FileNotFoundError:  # (pruned since it was listed)
            continue
        except (ValueError, KeyError, TypeError, AttributeError, OSError) as err:
            log.warning("ignoring start record %s: %s", path, one_line(err))
    return found


def read_starts(root: str) -> Dict[str, Dict[str, int]]:
    """{model key: {source: its earliest start position}} of the start records under ``root``
    (``write_starts``; also those of earlier versions, one file per key and source)."""
    starts: Dict[str, Dict[str, int]] = {}
    for directory in list_dir(root)[1]:
        for _, records in _files(root, directory):
            for key, source, position in records:
                known = starts.setdefault(key, {})
                known[source] = min(known.get(source, position), position)
    return starts


def prune_starts(root: str, group: str, covered: Container[Tuple[str, str]]) -> None:
    """Remove the group's start record files whose every record is covered: ``covered`` holds
    (key, source) where a durable checkpoint of the key's model records where it may restart
    there (``KeyedModel.passed_partitions``)."""
    for path, records in _files(root, key_dir_name(group)):
        if all((key, source) in covered for key, source, _ in records):
            remove(path)
