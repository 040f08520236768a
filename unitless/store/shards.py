"""One model over feature shards (``pipelines/sharded.py``): shard s of S keeps its checkpoints
as a model directory of its own (``per_key``), SHARDS/<s>-of-<S>, every shard's file of the same
examples named alike (every shard counts every example): the newest count all S hold is a
consistent cut. A model's start in a Kafka partition, before it learns anything there, is a
start record under SHARDS/STARTS (``starts``)."""
import logging
import re
from typing import Any, Dict, List, Optional, Tuple

import pyarrow as pa

from ..connectors.storage import join, list_dir
from ..learner import LearnerState, from_arrow, read_metadata
from .checkpoint_file import one_line, read_schema
from .per_key import (checkpoint_files, checkpoint_name, key_dir, key_dir_name,
                      load_checkpoint, model_keys)

log = logging.getLogger("unitless")

SHARDS = "shards"
SHARD_DIR = re.compile(r"([0-9]+)-of-([0-9]+)")


def shard_dir(model_dir: str, shard: int, shards: int) -> str:
    """The model directory of shard ``shard`` of ``shards``."""
    return join(model_dir, SHARDS, f"{shard}-of-{shards}")


def shard_counts(model_dir: str) -> List[int]:
    """The shard counts S that model_dir holds shard checkpoints of (sorted)."""
    found = {int(m.group(2)) for m in map(SHARD_DIR.fullmatch, list_dir(join(model_dir, SHARDS))[1])
             if m}
    return sorted(found)


def consistent_cut(model_dir: str, key: str, shards: int) -> Optional[int]:
    """The newest example count every shard of the model holds a checkpoint of, or None."""
    common = None
    for s in range(shards):
        names = set(checkpoint_files(key_dir(shard_dir(model_dir, s, shards), key)))
        common = names if common is None else common & names
    return int(max(common)[5:17]) if common else None


def load_shard(model_dir: str, key: str, shard: int, shards: int,
               examples: int) -> Tuple[str, pa.Table]:
    """(path, table) of shard ``shard``'s checkpoint of ``examples`` examples of the model;
    ValueError naming the file when it is not valid or not of that model, FileNotFoundError
    when it is not there."""
    path = join(key_dir(shard_dir(model_dir, shard, shards), key), checkpoint_name(examples))
    path, table = load_checkpoint(path)
    if read_metadata(table).get("model_key") != key:
        raise ValueError(f"invalid checkpoint {path}: not of model {key!r}")
    return path, table


def sharded_model_keys(model_dir: str, shards: int) -> List[str]:
    """The model keys shard 0 of ``shards`` holds checkpoints of."""
    return model_keys(shard_dir(model_dir, 0, shards))


def sharded_models(model_dir: str, verify: bool = True
                   ) -> List[Tuple[str, int, str, Dict[str, Any], Optional[LearnerState]]]:
    """[(model key, shards, checkpoint, shard 0's metadata, the model or None)], one per sharded
    model under model_dir, of its consistent cut; ``checkpoint`` names its files as a pattern
    (<model_dir>/shards/*-of-S/<key directory>/ckpt-N.arrow). ``verify``ing, every shard's
    file is read and checked (a model with one that is not valid is skipped, with a warning),
    and the model is the unsharded LearnerState they make up (``learner.sharded.merge``);
    else only shard 0's schema is read."""
    from ..learner.sharded import merge
    found = []
    for shards in shard_counts(model_dir):
        for key in sharded_model_keys(model_dir, shards):
            examples = consistent_cut(model_dir, key, shards)
            if examples is None:
                continue
            pattern = join(model_dir, SHARDS, f"*-of-{shards}", key_dir_name(key),
                           checkpoint_name(examples))
            try:
                if verify:
                    cut = [load_shard(model_dir, key, s, shards, examples)
                           for s in range(shards)]
                    meta = read_metadata(cut[0][1])
                    model = merge([from_arrow(table) for _, table in cut])
                else:
                    meta = read_metadata(read_schema(join(key_dir(shard_dir(model_dir, 0, shards),
                                                              key), checkpoint_name(examples))))
                    model = None
            except (OSError, ValueError, pa.ArrowException) as err:
                log.warning("ignoring sharded model %r (%s): %s", key, pattern, one_line(err))
                continue
            found.append((key, shards, pattern, meta, model))
    return found
