"""Keying: the examples read -> (model key or group of keys, block) for the learning and
scoring steps, a key's examples of one source gathered into blocks in position order, and each
Kafka partition's start recorded before a key's first example there."""
import typing
from functools import partial

import apache_beam as beam
from apache_beam.utils.windowed_value import WindowedValue
import numpy as np

from ..parse.records import ExampleBlock
from ..store.groups import group_key, group_keys, group_numbers
from ..store.starts import write_starts


class KeyByModel(beam.DoFn):
    """ExampleBlock -> (model key, block): a key's examples of one source, gathered over the
    bundle's blocks into blocks of up to ``size`` examples, in position order.

    Why blocks are gathered, and model keys grouped: docs/design.md, "Keying and gathering".
    """

    def __init__(self, size, gather_bytes=256 << 20, starts=None, covered=(), model_groups=0):
        self.size, self.gather_bytes, self.starts = size, gather_bytes, starts
        self.covered = frozenset((source, key) for key, source in covered)
        self.model_groups = model_groups

    def setup(self):
        # (source, key): start records this worker wrote, or needs none (``covered``)
        self.started = set(self.covered)

    @property
    def _grouping(self):
        """What ``ExampleBlock.by_key`` splits by besides model keys: their groups, or none."""
        return partial(group_keys, groups=self.model_groups) if self.model_groups else None

    def start_bundle(self):
        self.groups = {}  # (source, timestamp, window) -> [blocks, examples, keys handed on]
        self.held = 0     # bytes of the blocks held

    def process(self, block, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam):
        if block.source is None:  # the user's own records: no positions to order by
            for key, piece in block.split_by_key(self._grouping):
                yield key, piece
            return
        if self.starts is not None and block.restarts_midway and len(block):
            self._record_starts(block)
        group = (block.source, timestamp, window)
        entry = self.groups.setdefault(group, [[], 0, set()])
        entry[1] += len(block)
        entry[2].update(np.unique(group_numbers(block.keys, self.model_groups)).tolist()
                        if self.model_groups else block.keys.unique().to_pylist())
        block = block.compact()  # (held: the features every example has, once; see by_key)
        entry[0].append(block)
        self.held += block.nbytes
        if self.held >= self.gather_bytes:
            yield from self.finish_bundle()
        elif entry[1] >= self.size * len(entry[2]):
            yield from self._split(group, self.groups.pop(group)[0])

    def _record_starts(self, block):
        """Before any of a key's examples of a Kafka partition go on, a durable record of where
        it starts there (just before its first in the block; ``store.starts.write_starts``),
        once per key and partition in this worker, unless the key's model has a checkpoint
        whose restart position there moved with the watermark (``covered``): a resumed run
        restarts the partition no later than that until the key's model has such a
        checkpoint, however far other keys' models have learned (``resume_positions``).
        Written here, before the shuffle, not by the key's model: another key's model may move
        its restart position past this block as soon as the watermark has passed it, which
        tells that every stage before the shuffle has processed the block (and so written
        this), but not that the key's own model has, on a runner whose workers each keep a
        watermark (Flink)."""
        keys, first = block.first_positions()
        new = [(key, block.source, int(first[k]) - 1) for k, key in enumerate(keys)
               if (block.source, key) not in self.started]
        if new:
            write_starts(self.starts, new, partial(group_key, groups=self.model_groups)
                         if self.model_groups else None)
            self.started.update((block.source, key) for key, _, _ in new)

    def finish_bundle(self):
        while self.groups:
            group = next(iter(self.groups))
            yield from self._split(group, self.groups.pop(group)[0])
        self.held = 0

    def _split(self, group, blocks):
        """The group's examples, handed on by key (``ExampleBlock.by_key``, which empties
        ``blocks`` as it copies them)."""
        _, timestamp, window = group
        self.held -= sum(b.nbytes for b in blocks)
        pieces = ExampleBlock.by_key(blocks, self._grouping)
        for key, piece in pieces:
            for part in piece.parts(self.size):
                yield WindowedValue((key, part), timestamp, [window])


def key_by_model(size: int, **options: typing.Any) -> beam.PTransform:
    """ExampleBlock -> (model key or group, block), see ``KeyByModel`` (``starts``: the directory of
    the start records it writes, None for none; ``covered``: the (model key, partition) pairs
    that need none, ``store.resume.covered_partitions``; ``model_groups``: (group, block)
    instead); str keys (a deterministic coder)."""
    return beam.ParDo(KeyByModel(size, **options)).with_output_types(
        typing.Tuple[str, typing.Any])
