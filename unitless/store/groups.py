"""Which group a model key belongs to (``group_key``: the models that share one key of the
keyed step, checkpointed together) and where each group's files live in a model directory."""
import zlib
from typing import List

import numpy as np
import pyarrow as pa
from numba import njit

from ..connectors.storage import join, list_dir
from .per_key import key_dir_name

GROUPS = "groups"
# model states published to a serving step apart from learning: a model directory of its own
# in the group layout, inside the run's (``published_dir``)
PUBLISHED = "published"


def group_key(model_key: str, groups: int) -> str:
    """The keyed step's key of a model key's group, of ``groups`` groups ("<group>/<groups>",
    the same in every process and run: CRC-32 of its UTF-8); 0 groups: the model key itself."""
    if not groups:
        return model_key
    return f"{zlib.crc32(model_key.encode('utf-8', 'surrogatepass')) % groups}/{groups}"


def group_keys(model_keys: pa.Array, groups: int) -> List[str]:
    """``group_key`` of each model key of a string array (a list), computed together."""
    if not groups:
        return model_keys.to_pylist()
    return [f"{g}/{groups}" for g in group_numbers(model_keys, groups).tolist()]


def group_numbers(model_keys: pa.Array, groups: int) -> np.ndarray:
    """The number (0 to ``groups`` - 1) of each model key's group of a string array (int64):
    ``group_key``'s CRC-32 over each key's UTF-8, in one compiled pass over the array's
    buffers (a null key counts as the empty one)."""
    keys = model_keys.fill_null("")
    if not pa.types.is_string(keys.type):
        keys = keys.cast(pa.large_string())
    _, offsets, data = keys.buffers()
    offsets = np.frombuffer(offsets, dtype=np.int32 if pa.types.is_string(keys.type)
                            else np.int64)[keys.offset:keys.offset + len(keys) + 1]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return _crc32(offsets, data) % groups


def _crc_table():
    table = np.arange(256, dtype=np.int64)
    for _ in range(8):
        table = np.where(table & 1, 0xEDB88320 ^ (table >> 1), table >> 1)
    return table


_CRC_TABLE = _crc_table()


@njit(cache=True)
def _crc32(offsets, data):
    """zlib's CRC-32 of each string data[offsets[i]:offsets[i + 1]] (int64)."""
    out = np.empty(offsets.shape[0] - 1, dtype=np.int64)
    for i in range(out.shape[0]):
        c = 0xFFFFFFFF
        for p in range(offsets[i], offsets[i + 1]):
            c = _CRC_TABLE[(c ^ data[p]) & 0xFF] ^ (c >> 8)
        out[i] = c ^ 0xFFFFFFFF
    return out


def groups_dir(model_dir: str, groups: int) -> str:
    return join(model_dir, GROUPS, str(int(groups)))


def group_dir(model_dir: str, groups: int, key: str) -> str:
    """The directory of the group of the keyed step's ``key`` (a ``group_key``)."""
    return join(groups_dir(model_dir, groups), key_dir_name(key))


def published_dir(model_dir: str) -> str:
    """Where a run serving apart from learning publishes its models' states: checkpoints in
    the group layout (``GroupWriter``), without the bookkeeping a resumed run needs."""
    return join(model_dir, PUBLISHED)


def group_counts(model_dir: str) -> List[int]:
    """The numbers of model groups G that model_dir holds checkpoints in (sorted)."""
    return sorted(int(n) for n in list_dir(join(model_dir, GROUPS))[1] if n.isdigit())
