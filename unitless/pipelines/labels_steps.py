"""The learning step's work with ``--labels`` (docs/delayed-outcomes.md): a features block's
examples served and left waiting for their labels, a labels block joined, and what the join
hands back learned in label order (``LabelJoin``, labels/).

``LabelsSteps`` is a part of ``LearnBlocks`` (train.py), which it extends: it calls the step's
``_of`` (a group's model), ``_take_served`` and ``_learn_parts`` (learning), ``_dead`` (dead
letters out) and ``_checkpoint_due``, and counts with the step's metrics."""
import time

import apache_beam as beam
import numpy as np

from ..labels.join import LabelJoin
from ..parse.records import ExampleBlock
from .accounting import ACCOUNTS, Tally
from .saved_models import saved_keyed_model


def in_position_order(block: ExampleBlock) -> ExampleBlock:
    """The block with its records in position order (a source's blocks handed on together keep
    the order of their parts)."""
    if bool(np.all(np.diff(block.positions) > 0)):
        return block
    return block.take(np.argsort(block.positions, kind="stable"))


class LabelsSteps:
    def _join_of(self, group):
        if group.join is None:
            cfg = self.cfg
            group.join = LabelJoin(cfg.label_wait, cfg.expired_label, cfg.max_time_skew,
                                   self.in_time_order, keyed=cfg.spec.model_key is not None)
        return group.join

    def _resume_labeled(self, group, keys):
        """--resume: the models with checkpoints of a labels block's model keys, read before
        their labels reach the join (which must know the labels they learned)."""
        for k in keys:
            if k not in group.models and k not in self.unsaved:
                model = saved_keyed_model(self.cfg, k, self.group_files)
                if model is None:
                    self.unsaved.add(k)
                else:
                    self._of(group, k, model)

    def _join(self, group, block):
        """``--labels``: a labels block's examples learned with the features they were served
        with, in label order, as their features come (``LabelJoin``); a features block's
        examples served, then waiting for their labels (those that carry one learned, as in
        any run)."""
        join, now = self._join_of(group), time.time()
        if self.cfg.is_labels(block.source):
            if self.cfg.resume:
                self._resume_labeled(group, block.keys.unique().to_pylist())
            joined, dead = join.labels(block, now)
        else:
            served, dead, ahead = yield from self._serve(group, join, block, now)
            timed = self._without(block, ahead)
            joined, lost = join.features(block.source, timed.positions, timed.keys.to_pylist(),
                                         timed.event_times, served)
            dead += lost
        yield from self._dead(dead)
        yield from self._learn_joined(group, joined)
        self._checkpoint_due(group.every_model(), group)

    def _serve(self, group, join, block, now, firsts=None):
        """A features block's examples served by their models (those that carry their label
        learned, as in any run), but those refused (``LabelJoin.refuse_ahead``, ``screen``
        with ``firsts``) and those a resumed run served before (they wait
        again, unserved). Returns ([(model key, block, scores)] served, dead letters, the
        positions refused as dated ahead of the reader's clock ``now``)."""
        served, dead, ahead = [], [], []
        for k, piece in block.split_by_key():
            model = self._of(group, k)
            piece, early = join.refuse_ahead(join.replayed(k, piece), now)
            ahead += [d.position for d in early]
            piece, again = join.screen(k, piece, firsts)
            dead += early + again
            join.labeled(k, piece)
            piece, before = join.served_before(k, piece)
            rows = []
            if len(piece):
                yield from self._take_served(group, piece, rows)
            if before is not None:  # (what they were served with is gone)
                rows.append((before, np.full((len(before), model.state.n_classes), np.nan)))
            served += [(k, b, scores) for b, scores in rows]
        return served, dead, ahead

    @staticmethod
    def _without(block, positions):
        """The block without the records at ``positions`` (a clock must not move by them)."""
        if not positions:
            return block
        return block.take(np.flatnonzero(~np.isin(block.positions, positions)))

    def _join_in_time_order(self, group, by_source):
        """``--labels`` files with ``--label-wait``: a bounded input's blocks by source, all
        handed on at once at its end, joined whole in record-time order (``LabelJoin.
        joined_in_time_order``), whatever the order of the records in their files: each
        features file's examples served first, in file order. The joined examples are learned
        in that order, so their labels' positions are not tracked by the models (the join's
        checkpointed state says what it judged), and the models' checkpoints wait for the
        end of the input (``input_ended``), when nothing waits any more."""
        join, now = self._join_of(group), time.time()
        features, labels, dead, blocks = [], [], [], []
        for source in list(by_source):
            parts = by_source.pop(source)  # (each file's blocks go once concatenated)
            block = in_position_order(ExampleBlock.concat(
                sorted(parts, key=lambda b: int(b.positions.min()))))
            del parts
            if not self.cfg.is_labels(source):
                blocks.append(block)
                continue
            if self.cfg.resume:
                self._resume_labeled(group, block.keys.unique().to_pylist())
            labels.append(block)
        # (an id's second features record is its later one in time, whichever file holds it)
        firsts = join.firsts_in_time_order(blocks, now)
        while blocks:
            block = blocks.pop(0)
            served, refused, ahead = yield from self._serve(group, join, block, now, firsts)
            dead += refused
            timed = self._without(block, ahead)
            features.append((block.source, timed.positions, timed.keys.to_pylist(),
                             timed.event_times, served))
        block = timed = None  # (what waits is the join's: it holds the served examples once)
        joined, lost = join.joined_in_time_order(features, labels, now)
        yield from self._dead(dead + lost)
        yield from self._learn_joined(group, joined)

    def _learn_joined(self, group, joined):
        """Learn the join's ``[(model key, block, the scores its examples were served with,
        expired)]``, in order (expired examples outside their source's positions: their
        features record's were served already; ``in_time_order``, all of them: their labels
        come in time order, not in position order); then count what the join did."""
        for key, rows, scores, expired in joined:
            yield from self._learn_parts(group, rows, served_scores=scores,
                                         tracked=not (expired or self.in_time_order))
        self.last_join = group.join
        for delay in group.join.take_delays():
            self.label_delay.update(int(delay * 1000))
        counts = group.join.take_counts()
        if any(counts.values()):
            self.waiting.inc(counts["waiting"])
            self.expired.inc(counts["expired"])
            self.expired_learned.inc(counts["expired_learned"])
            self.replayed.inc(counts["replayed"])
            yield beam.pvalue.TaggedOutput(ACCOUNTS, Tally(**counts))

    def _labels_ended(self, group):
        """``--labels``, at the end of the input: what still waits expires."""
        for key in sorted(group.join.models if group.join else ()):
            joined, dead = group.join.end(key)
            yield from self._dead(dead)
            yield from self._learn_joined(group, joined)
