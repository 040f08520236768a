"""Where a resumed run continues: the input positions the models' latest valid checkpoints
record, their start records, and the consistent cuts of models over feature shards."""
from dataclasses import dataclass, field
from typing import Callable, Dict, Mapping, Optional, Set, Tuple

import pyarrow as pa

from ..learner import read_metadata
from .checkpoint_file import once_per_run
from .catalog import checkpoint_metadata, every_latest_metadata
from .shards import consistent_cut, load_shard, shard_counts, sharded_model_keys
from .starts import read_starts, starts_dir


def resume_positions(model_dir: str) -> Tuple[Dict[str, int], Dict[str, int]]:
    """({source: earliest position}, {source: furthest position}) over the input positions
    that the models' latest valid checkpoints record (models over feature shards: their cuts'
    positions, and their starts in sources they have learned nothing from), and the start
    records the reading stage wrote (``write_starts``), but those of a model in a partition
    where its checkpoint's restart position moved with the watermark (``watermark_passed``,
    ``KeyedModel.passed_partitions``): that covers them."""
    return _resume_positions(model_dir)[:2]


def covered_partitions(model_dir: str) -> Set[Tuple[str, str]]:
    """{(model key, partition)} where the model's latest valid checkpoint's restart position
    moved with the watermark: no start record is needed there (``KeyByModel``)."""
    return _resume_positions(model_dir)[2]


def _resume_positions(model_dir):
    """(earliest, furthest, covered): see ``resume_positions``, ``covered_partitions``.
    Earliest: where each may restart (``restart_positions``, which lag what a model learned on
    arrival). Sharded models' partitions with a cut position are covered too. Within
    ``read_once``, worked out once (not to be changed by callers)."""
    return once_per_run("resume positions", model_dir, lambda: _read_positions(model_dir))


def _read_positions(model_dir):
    recorded = []  # (positions learned, positions to restart after)
    passed = {}  # model key -> the partitions its restart positions cover (watermark_passed)
    for key, (_, meta) in every_latest_metadata(model_dir).items():
        positions = meta.get("input_positions") or {}
        recorded.append((positions, {**positions, **(meta.get("restart_positions") or {})}))
        passed[key] = set(meta.get("watermark_passed") or ())
    for key, starts in read_starts(starts_dir(model_dir)).items():  # (superseded: not pruned yet)
        recorded.append(({}, {s: p for s, p in starts.items() if s not in passed.get(key, ())}))
    covered = {(key, source) for key, sources in passed.items() for source in sources}
    for shards in shard_counts(model_dir):  # models over feature shards: their cuts
        for key, cut in sharded_cuts(model_dir, shards).items():
            recorded.append(({**cut.starts, **cut.positions},) * 2)
            covered |= {(key, source) for source in cut.positions}
    earliest, furthest = {}, {}
    for positions, restart in recorded:
        for source, position in restart.items():
            earliest[source] = min(earliest.get(source, position), position)
        for source, position in positions.items():
            furthest[source] = max(furthest.get(source, position), position)
    return earliest, furthest, covered


def resume_offsets(model_dir: str, topic: str) -> Dict[int, int]:
    """{partition: offset} where a restarted Kafka source must resume so that no model misses
    an example: one past the earliest position any model's latest valid checkpoint recorded
    (a model records where it starts in a source before it learns from it)."""
    return partition_starts(resume_positions(model_dir)[0], topic)


def partition_starts(earliest: Mapping[str, int], topic: str) -> Dict[int, int]:
    """{partition: offset} of the topic's sources in ``earliest`` ({source: position}): one
    past the position."""
    starts = {}
    for source, position in earliest.items():
        name, _, partition = source.rpartition("/")
        if name == topic and partition.isdigit():
            starts[int(partition)] = position + 1
    return starts


@dataclass(frozen=True)
class Cut:
    """Where a sharded model continues: the examples and rounds its shards' newest common
    checkpoint (``consistent_cut``) holds, the last input position learned per source (the
    lowest any shard's file records), and its start records of sources it has learned nothing
    from (Kafka partitions, ``write_starts``)."""
    examples: int = 0
    rounds: int = 0
    positions: dict = field(default_factory=dict)
    starts: dict = field(default_factory=dict)


def sharded_cuts(model_dir: str, shards: int,
                 check: Optional[Callable[[pa.Table, str], None]] = None) -> Dict[str, Cut]:
    """{model key: Cut} of the models over ``shards`` shards under model_dir (and of those
    with start records only); ``check(table, path)`` is called on every shard file of a cut."""
    starts = read_starts(starts_dir(model_dir, sharded=True))
    cuts = {}
    for key in sorted(set(sharded_model_keys(model_dir, shards)) | set(starts)):
        examples = consistent_cut(model_dir, key, shards)
        rounds = 0
        positions: Dict[str, int] = {}
        for s in range(shards if examples is not None else 0):
            assert examples is not None
            path, table = load_shard(model_dir, key, s, shards, examples)
            if check is not None:
                check(table, path)
            meta = read_metadata(table)
            rounds = int(meta["rounds"])
            for source, position in (meta.get("input_positions") or {}).items():
                positions[source] = min(positions.get(source, position), position)
        cuts[key] = Cut(examples or 0, rounds, positions,
                        {source: position for source, position in starts.get(key, {}).items()
                         if source not in positions})
    return cuts


def served_positions(model_dir: str) -> Dict[Tuple[str, str], int]:
    """{(model key, source): position} through which each model's latest valid checkpoint says
    it learned or served its examples of each source: a resumed run's serving step does not
    serve again what is at or before it (``pipelines/serve.py``). Not where it has learned
    nothing yet: there its position is only where it starts (``KeyedModel.learned_positions``)."""
    return {(key, source): int(position) for key, _, meta in checkpoint_metadata(model_dir)
            for source, position in (meta.get("input_positions") or {}).items()
            if source not in (meta.get("unlearned_sources") or {})}
