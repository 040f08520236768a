"""The shard sequencer of one model over feature shards (``--shards``): ``InOrder``'s handler
that takes a model's examples in ``Learn``'s order and cuts them into rounds of
``max_delay + 1`` for every shard (``CutRounds``), and what it sends (``Round``, ``End``).
The shards themselves: sharded.py."""
import pickle
import time
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, NamedTuple, Optional,
                    Sequence)

import apache_beam as beam
import numpy as np
import pyarrow as pa

from ..learner import read_metadata
from ..learner.examples import Batch
from ..learner.names import FeatureNames, merged_names
from ..learner.sharded import shard_of, split_batch
from ..parse.records import ExampleBlock, own_rows
from ..store.resume import Cut, sharded_cuts
from ..store.shards import shard_counts
from ..store.starts import starts_dir, write_starts
from .accounting import ACCOUNTS, Tally
from .config import TrainConfig, check_resume

if TYPE_CHECKING:
    from .ordering import Stored

MODELS = "models"  # output tag: the model keys the sequencer saw


class Round(NamedTuple):
    """Round ``round`` of a model as one shard gets it: every example, the shard's features."""
    round: int
    batch: Batch
    names: dict         # feature index -> name, of this shard's features (where known)
    checkpoint: bool    # the shards checkpoint once they have applied it
    meta: object        # shard 0: RoundMeta, to write predictions; others None
    positions: dict     # source -> the last position learned once this round is


class RoundMeta(NamedTuple):
    ids: pa.Array
    sources: pa.Array   # string, one per example
    positions: np.ndarray
    event_times: np.ndarray


class End(NamedTuple):
    rounds: int  # the model's rounds, all of them (its bounded input has ended)


def resume_cuts(cfg: TrainConfig) -> Dict[str, Cut]:
    """{model key: Cut} of the sharded models in cfg.model_dir, every shard file of a cut
    checked (valid, of the learner this configuration trains); ValueError when the directory
    holds models over another number of shards."""
    counts = shard_counts(cfg.model_dir)
    if counts and cfg.shards not in counts:
        raise ValueError(f"--resume: {cfg.model_dir} holds models over {counts[-1]} shards, "
                         f"not {cfg.shards}: resume with --shards {counts[-1]}")
    return sharded_cuts(cfg.model_dir, cfg.shards,
                        check=lambda table, path: check_resume(cfg, read_metadata(table), path))


@dataclass
class _Rounds:
    """The sequencer's state of a model: rounds cut so far, where in each source, and the
    blocks of this release (not stored)."""
    next_round: int = 0
    examples: int = 0
    checkpoint_examples: int = 0
    checkpoint_time: float = field(default_factory=time.time)
    positions: dict = field(default_factory=dict)  # source -> last position sent to the shards
    starts: dict = field(default_factory=dict)     # source -> start recorded, nothing learned
    pending: list = field(default_factory=list)

    def to_bytes(self):
        return pickle.dumps((self.next_round, self.examples, self.checkpoint_examples,
                             self.checkpoint_time, self.positions, self.starts))

    @classmethod
    def from_bytes(cls, data):
        return cls(*pickle.loads(data))


class CutRounds:
    """``InOrder``'s handler in the shard sequencer: (model key, ExampleBlock) -> ((model key,
    shard), Round) for every shard, the model's examples in ``Learn``'s order, cut into
    rounds of ``max_delay + 1`` (a release's last round may be shorter), and at the end of a
    bounded input ((model key, shard), End); the model key to ``MODELS`` then.

    Resumed (``cuts``), a model continues from its cut: examples at or before the positions
    it learned are skipped (a source read again). A Kafka partition it has learned nothing
    from gets a start record before any of its examples go on (``write_starts``), as ``Learn``
    checkpoints one: a restarted partition then starts no later than that."""

    learns_on_arrival = False  # rounds are cut in the waiting order only

    def __init__(self, cfg: TrainConfig, cuts: Optional[Dict[str, Cut]] = None) -> None:
        self.cfg, self.cuts = cfg, cuts or {}

    def enter_source(self, key: str, block: ExampleBlock, stored: "Stored") -> None:
        if not (block.restarts_midway and len(block)):
            return
        rounds = self.state(key, stored)
        start = int(block.positions.min()) - 1
        if block.source in rounds.positions or rounds.starts.get(block.source, start + 1) <= start:
            return
        write_starts(starts_dir(self.cfg.model_dir, sharded=True), [(key, block.source, start)])
        rounds.starts[block.source] = start
        self.store(key, rounds, stored)

    def state(self, key: str, stored: "Stored") -> _Rounds:
        data = stored.read()
        if data is not None:
            return _Rounds.from_bytes(data)
        cut = self.cuts.get(key, Cut())
        return _Rounds(cut.rounds, cut.examples, cut.examples, positions=dict(cut.positions),
                       starts=dict(cut.starts))

    def store(self, key: str, rounds: _Rounds, stored: "Stored") -> None:
        stored.write(rounds.to_bytes())

    def learn(self, rounds: _Rounds, block: ExampleBlock, at: Optional[int] = None
              ) -> Iterable[Any]:
        rounds.pending.append(block)
        return ()

    def watermark_passed(self, rounds: _Rounds, past: List[tuple], at: List[tuple]
                         ) -> List[tuple]:
        return []  # (rounds are cut in the waiting order only: a restart follows the cuts)

    def released(self, key: str, rounds: _Rounds) -> Iterator[Any]:
        return self._cut(key, rounds)

    def input_ended(self, key: str, rounds: Optional[_Rounds], stored: "Stored"
                    ) -> Iterator[Any]:
        rounds = rounds or self.state(key, stored)
        yield from self._cut(key, rounds)
        self.store(key, rounds, stored)
        for s in range(self.cfg.shards):
            yield (key, s), End(rounds.next_round)
        yield beam.pvalue.TaggedOutput(MODELS, key)

    def _cut(self, key, rounds):
        """The released blocks ``rounds.pending`` as rounds, to every shard (without the
        examples at or before the positions already learned)."""
        blocks, pending, rounds.pending = [], rounds.pending, []
        for b in pending:
            if b.source is None:  # (the user's own records: no positions, learned whole)
                blocks.append(b)
                continue
            fresh = np.flatnonzero(b.positions > rounds.positions.get(b.source, -1))
            if len(fresh):
                blocks.append(b if len(fresh) == len(b) else b.take(fresh))
            if len(fresh) < len(b):
                yield beam.pvalue.TaggedOutput(ACCOUNTS, Tally(replayed=len(b) - len(fresh)))
        if not blocks:
            return
        batch = concat_batches([b.batch() for b in blocks])
        ids = pa.concat_arrays([b.ids for b in blocks])
        sources = pa.concat_arrays([pa.repeat(pa.scalar(b.source, pa.string()), len(b))
                                    for b in blocks])
        positions = np.concatenate([b.positions for b in blocks])
        ends = np.cumsum([len(b) for b in blocks])
        times = [b.event_times for b in blocks]
        event_times = None if any(t is None for t in times) else np.concatenate(times)
        shard_names = self._names_by_shard(blocks)
        size = self.cfg.max_delay + 1
        for a in range(0, len(batch), size):
            b = min(a + size, len(batch))
            rounds.examples += b - a
            for block, end in zip(blocks, ends):  # the sources this round reads
                lo, hi = max(a, end - len(block)), min(b, end)
                if lo < hi:
                    rounds.positions[block.source] = max(rounds.positions.get(block.source, -1),
                                                         int(positions[lo:hi].max()))
                    rounds.starts.pop(block.source, None)
            meta = RoundMeta(own_rows(ids.slice(a, b - a)), own_rows(sources.slice(a, b - a)),
                             positions[a:b], None if event_times is None else event_times[a:b])
            checkpoint = self._checkpoint_due(rounds)
            for s, part in enumerate(split_batch(batch.slice(a, b), self.cfg.shards)):
                names = shard_names[s] if a == 0 else FeatureNames()
                yield (key, s), Round(rounds.next_round, part, names, checkpoint,
                                      meta if s == 0 else None, dict(rounds.positions))
            rounds.next_round += 1

    def _names_by_shard(self, blocks):
        """The blocks' feature names (index -> name), split by the shard holding each."""
        names = merged_names(b.names for b in blocks)
        where = shard_of(names.indices, self.cfg.shards)
        return [FeatureNames(names.indices[where == s], names.names.filter(pa.array(where == s)))
                for s in range(self.cfg.shards)]

    def _checkpoint_due(self, rounds):
        every, seconds = self.cfg.checkpoint_every, self.cfg.checkpoint_seconds
        due = ((every and rounds.examples // every > rounds.checkpoint_examples // every)
               or (seconds and time.time() - rounds.checkpoint_time >= seconds))
        if due:
            rounds.checkpoint_examples, rounds.checkpoint_time = rounds.examples, time.time()
        return bool(due)


def concat_batches(batches: Sequence[Batch]) -> Batch:
    """One Batch of the examples of ``batches``, in order."""
    if len(batches) == 1:
        return batches[0]
    lengths = np.concatenate([np.diff(b.indptr) for b in batches])
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return Batch(indptr, np.concatenate([b.indices for b in batches]),
                 np.concatenate([b.values for b in batches]),
                 np.concatenate([b.labels for b in batches]),
                 np.concatenate([b.weights for b in batches]))

