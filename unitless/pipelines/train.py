"""The learning step (``LearnBlocks``, ``InOrder``'s handler in ``learn.Learn``): each model
group's models in Beam state, predict-then-update on each block, with --labels the join
(labels_steps.py), predictions and dead letters to their sinks, checkpoints and publications
(delivery.py)."""
import logging
import time
from functools import partial
from typing import (TYPE_CHECKING, Any, Dict, Generator, Iterable, Iterator, List, Optional, Set,
                    Tuple)

import apache_beam as beam
from apache_beam.metrics import Metrics
import numpy as np

from ..connectors.kafka import is_kafka
from ..labels.join import LabelJoin
from ..labels.reasons import LATE_LABEL
from ..models.keyed_model import KeyedModel, in_span_order
from ..models.model_group import ModelGroup
from ..models.predictions import served_count
from ..parse.records import ExampleBlock, dead_letter_table
from ..store.by_group import examples_of
from ..store.groups import group_key
from .accounting import ACCOUNTS, Tally, models_left
from .config import TrainConfig, new_learner
from .decoded import DecodedModels
from .delivery import Delivery
from .io.dead_letters import DEAD
from .labels_steps import LabelsSteps
from .saved_models import known_model, new_keyed_model

if TYPE_CHECKING:
    from .ordering import Stored

log = logging.getLogger("unitless")


class LearnBlocks(LabelsSteps):
    """``InOrder``'s handler in the learning step: (model key or group, ExampleBlock) ->
    predictions and dead letters, written to their sinks and also output as PCollections.

    The key may be a group of model keys (``KeyByModel``'s ``model_groups``): the key's state
    then holds the models of all of them together (``ModelGroup``), its blocks hold all of
    their examples, waiting and released (``InOrder``) as a whole, and each model key's
    examples are learned by its own model. What is said below of a model holds for each model
    of a group; a block is learned on arrival only when it continues every model it holds
    examples of.

    When it flushes its sinks and takes and writes checkpoints, and why that loses no
    prediction: docs/design.md, "Delivery and checkpoints".
    """
    learns_on_arrival = True  # a block that continues its models (see ``InOrder``)
    unsaved: Set[str]

    def __init__(self, cfg: TrainConfig, streaming: bool = False) -> None:
        self.cfg = cfg
        # (--labels, resumed: the records read again move the join's clocks, so every block
        # waits to be handed on in order; one that continues where the models had learned
        # would come before those read again, which a model that learned on arrival skips)
        self.learns_on_arrival = not (cfg.labels and cfg.resume)
        # (--labels files with --label-wait: their blocks all wait for the end of the input,
        # which hands them on at once; the join takes them in record-time order,
        # ``learn_released``)
        self.in_time_order = bool(cfg.labels) and cfg.label_wait is not None and not is_kafka(
            str(cfg.labels[0]))
        # a stream that goes quiet still gets its --checkpoint-seconds checkpoint (``idle``);
        # a bounded input's end takes the last one
        self.idle_seconds = (cfg.idle_seconds or None) if streaming else None
        self.ttl_seconds = cfg.model_ttl or None
        self.examples = Metrics.counter("unitless", "examples")
        self.served = Metrics.counter("unitless", "served_examples")
        self.bad = Metrics.counter("unitless", "bad_records")
        self.replayed = Metrics.counter("unitless", "replayed_examples_skipped")
        # (its sinks, checkpoints and publications)
        self.delivery = Delivery(cfg)
        self.decoded = Metrics.counter("unitless", "models_decoded")
        self.evicted = Metrics.counter("unitless", "models_evicted")
        self.returned = Metrics.counter("unitless", "models_returned")
        self.waiting = Metrics.counter("unitless", "examples_waiting_for_labels")
        self.expired = Metrics.counter("unitless", "examples_expired_without_label")
        self.expired_learned = Metrics.counter("unitless", "examples_expired_learned")
        self.label_delay = Metrics.distribution("unitless", "label_delay_ms")
        self.late = Metrics.counter("unitless", "late_labels")

    def setup(self) -> None:
        # key -> ModelGroup last written to state (skips decoding)
        self.models = DecodedModels(self.cfg.models_in_memory, self.cfg.model_memory_mib)
        self.fresh = new_learner(self.cfg)  # (each new model's, copied in: never changed)
        self.started = self.last_log = time.time()
        self.seen = 0
        self.last_join = None  # (``--labels``: its waiting state is logged)
        self.unsaved = set()  # (--resume, --labels: model keys without a checkpoint)
        self.delivery.open()
        self.group_files = self.delivery.group_files  # (where models are read back from)

    def teardown(self) -> None:
        self.delivery.close()

    def start_bundle(self) -> None:
        self.delivery.discard()

    def finish_bundle(self) -> None:
        self.delivery.finish_bundle()

    def state(self, key: str, stored: "Stored") -> ModelGroup:
        """The ``ModelGroup`` of the keyed step's ``key``, as last stored."""
        data = stored.read()
        cached = self.models.get(key)
        if data is None:
            group = ModelGroup()
        elif cached is not None and cached.holds(data):
            group = cached
        else:
            group = ModelGroup.from_bytes(data)
            self.decoded.inc(len(group.models))
            if self.cfg.labels:
                group.join = LabelJoin.rebuild(stored.log.read())
                log.debug("the label join of %r rebuilt from its log", key)
        self.models.keep(key, group, group.nbytes, len(group.models))
        return group

    def _of(self, group, model_key, saved=None):
        """The group's model of ``model_key`` (if it has none: ``saved``, or a new one,
        ``new_keyed_model``; one resumed from a checkpoint that kept its join's state gives it
        back to the join)."""
        fresh = model_key not in group.models
        model = group.model(model_key, self._new_model if saved is None else lambda *_: saved)
        if fresh and model.saved_join is not None:
            self._join_of(group).restore(model_key, model.saved_join, model.learned_positions())
            model.saved_join = None
        return model

    def _known(self, group, model_key):
        """The group's model of ``model_key`` for what it learned (``known_model``)."""
        return known_model(self.cfg, group, model_key, self.group_files, self.fresh,
                           partial(self._of, group))

    def _new_model(self, model_key, evicted=None):
        if evicted is None:
            return new_keyed_model(self.cfg, model_key, self.group_files, self.fresh)
        return self._returning(model_key, *evicted)

    def _returning(self, model_key, examples, served):
        """The model of a key that left state idle (``expire``) and returned: read back from its
        group's newest checkpoint, which must hold it as it left (``examples`` learned and
        ``served``; an older state would silently lose what it learned since: the run fails
        instead). Listed again once if what this worker last listed holds an older state."""
        group = group_key(model_key, self.cfg.model_groups)
        for listed in (self.group_files.group(group), self.group_files.listed(group)):
            found = listed.load(model_key)
            if found is not None:
                model = KeyedModel.from_table(found[1], found[2])
                if (model.state.examples_seen, model.served) == (examples, served):
                    model.run_start = examples  # (what it learned before, ``expire`` counted)
                    self.returned.inc()
                    log.debug("model %r returns from %s", model_key, found[0])
                    return model
        raise RuntimeError(
            f"model {model_key!r} left state idle (--model-ttl) at {examples} examples learned "
            f"and {served} served, but its group's checkpoints in {self.cfg.model_dir} hold "
            f"{'no state of it' if found is None else 'another state'}: it cannot return")

    def store(self, key: str, group: ModelGroup, stored: "Stored") -> None:
        stored.write(group.to_bytes())
        if group.join is not None:
            clear, entries = group.join.log_entries()
            if clear:
                stored.log.clear()
            for entry in entries:
                stored.append(entry)
        self.models.keep(key, group, group.nbytes, len(group.models))

    def continues(self, group: ModelGroup, block: ExampleBlock) -> bool:
        """Each model the block holds examples of has learned all of its own before them
        (``KeyedModel.continues``: the block in position order, each model past its start)."""
        return in_span_order(block) and all(self._known(group, k).learned_before(block)
                                            for k in block.keys.unique().to_pylist())

    def enter_source(self, key: str, block: ExampleBlock, stored: "Stored") -> None:
        """A Kafka partition's block: record where each of its models starts there, before
        learning."""
        if block.restarts_midway and len(block):
            group = self.state(key, stored)
            keys, firsts = block.first_positions()
            entered = [model for model, first in zip(map(partial(self._of, group), keys),
                                                     firsts.tolist())
                       if model.enter_source(block, first)]
            if entered:
                self._checkpoint(entered, group)
                self.store(key, group, stored)

    def idle(self, key: str, group: ModelGroup) -> Tuple[bool, Optional[float]]:
        """No element of the key for ``idle_seconds`` (of the watermark, which a quiet Kafka
        partition moves with the reader's clock): serving apart, the publication of each of
        its models that learned since its last; and the checkpoint of each that is behind and
        whose last is --checkpoint-seconds old, which that would have taken had anything
        arrived (written when the bundle ends, as those at a source's start or the end of
        input). Returns (whether it took any checkpoint, seconds until the next of the others
        behind is due: ``InOrder`` calls again then; None: none is behind)."""
        self.delivery.publish(group, at_once=True)
        seconds = self.cfg.checkpoint_seconds
        if not seconds:
            return False, None
        now = time.time()
        due = [m for m in group.every_model() if m.checkpoint_due(0, seconds)]
        self._checkpoint(due, group)
        later = [m.checkpoint_time + seconds - now for m in group.every_model()
                 if m.checkpoint_behind() and m not in due]
        return bool(due), (max(min(later), 0.001) if later else None)

    def expire(self, key: str, group: ModelGroup, now: int, held: Set[str]
               ) -> Generator[Any, None, Optional[int]]:
        """--model-ttl: the group's models not seen for ``ttl_seconds`` by ``now`` (µs on the
        watermark's clock) leave Beam state and this worker's memory, but those of model keys
        ``held`` (with examples still waiting), which count as seen now. Each is checkpointed
        first if it is behind, written at once (its key may return in this bundle); the
        examples it learned in this run are counted as it leaves, as at the end of the input
        (``Tally``), and a key that returns starts counting again (``_returning``). Yields those
        counts; returns when the next of the models left will have been idle that long (None:
        none has been seen)."""
        assert self.ttl_seconds is not None
        ttl = int(self.ttl_seconds * 1e6)
        idle = group.idle_since(now - ttl, now, held)
        if idle:
            self._checkpoint([m for m in idle if m.checkpoint_behind()], group)
            written = self.delivery.write_checkpoints()
            # only those whose state the group's newest checkpoint holds (a failed bundle's
            # may hold more: this state learns up to it again, and leaves later): as the write
            # just listed it, where it wrote the group's part, else listed now
            stored = (self.group_files.group(key) if any(m.key in written for m in idle)
                      else self.group_files.listed(key)).newest()
            leaving = {m.key for m in idle if m.key in stored
                       and examples_of(stored[m.key]) == m.state.examples_seen}
            for model in idle:
                if model.key not in leaving:
                    model.last_seen = now
            idle = [m for m in idle if m.key in leaving]
        if idle:
            # (counted as they leave: a model evicted reads as a fresh one, ``evict``)
            left = [group.evict(model) for model in idle]
            self.evicted.inc(len(idle))
            log.info("%d model%s idle for %s s left state (%s)", len(idle),
                     "s" * (len(idle) > 1), f"{self.ttl_seconds:g}", key)
            yield from models_left(key, left)
        seen = group.least_recently_seen()
        return None if seen is None else seen + ttl

    def _catch_up(self, group):
        behind = [model for model in group.every_model() if model.checkpoint_behind()]
        self._checkpoint(behind, group)
        return bool(behind)

    def released(self, key: str, group: ModelGroup) -> Iterable[Any]:
        """What follows a release's learning, before the model is stored (outputs)."""
        return ()

    def input_ended(self, key: str, learned: Optional[ModelGroup], stored: "Stored"
                    ) -> Iterator[Any]:
        """The end of the input, once everything waiting is learned (``learned``: the group,
        when it learned): each of its models' last checkpoint, then they leave Beam state and
        this worker's memory (nothing of this key comes after the end; a run drained and
        restored from a runner's savepoint resumes them from those checkpoints, with
        ``--resume``), which frees both as keys finish. Outputs: the examples its models
        learned in this run, by their own count (``accounting``)."""
        group = learned or self.state(key, stored)
        yield from self._labels_ended(group)
        self._catch_up(group)
        # (a run serving from this directory later: the last)
        self.delivery.publish(group, at_once=True)
        stored.clear()
        self.models.pop(key)
        yield from models_left(key, [model.learned_range() for model in group.every_model()])

    def learn(self, group: ModelGroup, block: ExampleBlock, at: Optional[int] = None
              ) -> Iterator[Any]:
        """Learn a block of the group's model keys, handed on at ``at`` (µs; see ``InOrder``):
        each key's examples by its own model, in parts of up to ``chunk_size``."""
        if self.cfg.labels:
            yield from self._join(group, block)
        else:
            yield from self._take_served(group, block)
        if block.source is not None:  # (after: a model read back that learned nothing is not)
            self._seen_at(group, block, at)
        group.learned(block)
        self.delivery.publish(group, block.keys.unique().to_pylist())

    def _learn_parts(self, group, block, served=None, served_scores=None, tracked=True):
        """The block's examples learned by their models (``ModelGroup.learn``), in parts of up
        to ``chunk_size``."""
        at = 0
        for part in block.parts(self.cfg.chunk_size):
            scores = None if served_scores is None else served_scores[at:at + len(part)]
            at += len(part)
            yield from self._learn(group, part, served, scores, tracked)

    def _take_served(self, group, block, served=None):
        """The block learned (``_learn_parts``, ``served`` as there), but for the examples that
        the serving step served apart from learning (``served_scores``, pipelines/serve.py):
        each is recorded by its model as served in its place (its position passed, counted in
        its ``served``), not predicted again, with the scores it was served with appended to
        ``served``; counted served here (``Learn`` counts the learning step's outputs, not the
        serving step's). One the model passed before is counted replayed."""
        scores = block.served_scores
        apart = (block.served & ~np.isnan(scores[:, 0])) if scores is not None else None
        if apart is None or not apart.any():
            yield from self._learn_parts(group, block, served)
            return
        source, marks, replayed = block.source, [], 0
        for key, piece in block.take(np.flatnonzero(apart)).split_by_key():
            model = self._of(group, key)
            if source is not None:  # (what it passed before it learns the rest of the block)
                fresh = piece.positions > model.positions.get(source, -1)
                replayed += len(piece) - int(fresh.sum())
                piece = piece.take(np.flatnonzero(fresh))
            if len(piece):
                marks.append((model, piece))
        rest = block.take(np.flatnonzero(~apart))
        if len(rest):
            rest.span = block.span
            yield from self._learn_parts(group, rest, served)
        for model, piece in marks:
            model.served += len(piece)
            if source is not None:
                model.learns_to(source, max(int(piece.positions.max()),
                                            model.positions.get(source, -1)), block.span)
            if served is not None:
                served.append((piece, piece.served_scores))
        taken = sum(len(piece) for _, piece in marks)
        if taken or replayed:
            self.replayed.inc(replayed)
            yield beam.pvalue.TaggedOutput(ACCOUNTS, Tally(served=taken, replayed=replayed))
        if not self.cfg.labels:  # (with labels, once the join's call is learned whole: _join)
            self._checkpoint_due([model for model, _ in marks], group)

    def learn_released(self, group: ModelGroup, blocks: Iterable[ExampleBlock],
                       at: Optional[int] = None) -> Iterator[Any]:
        """The blocks the watermark released, in order (``InOrder``), each learned (``learn``);
        with ``in_time_order`` all of them joined at once (``_join_in_time_order``)."""
        if not self.in_time_order:
            for block in blocks:
                yield from self.learn(group, block, at)
            return
        by_source: Dict[str, List[ExampleBlock]]
        by_source, spanned = {}, []
        for block in blocks:  # (no list of them all: each file's blocks are concatenated next)
            self._seen_at(group, block, at)
            by_source.setdefault(block.source, []).append(block)
            if block.span is not None:
                spanned.append(block)
        yield from self._join_in_time_order(group, by_source)
        for block in spanned:
            group.learned(block)

    def _seen_at(self, group, block, at):
        """The block's models were last seen at ``at`` (µs on the watermark's clock; None: the
        end of the input, which moves no model's clock), for --model-ttl."""
        if at is not None:
            for k in [k for k in block.keys.unique().to_pylist() if k not in group.dormant]:
                model = self._of(group, k)
                model.last_seen = max(at, model.last_seen or at)

    def watermark_passed(self, group: ModelGroup, past: List[tuple], at: List[tuple]
                         ) -> List[tuple]:
        """The watermark is past the waiting entries ``past`` (blocks just learned, and marks
        of blocks learned on arrival): the group's models may restart their sources after
        them (``KeyedModel.restart``): every example of theirs up to there is in the blocks
        the watermark has passed, all learned by now, whichever of its models a block held.
        Returns those of the blocks learned at the watermark's own time, ``at``, that need a
        mark to do so once it is past them."""
        sources = {h[1] for h in past + at if h[1]}
        if not sources:
            return []
        models = [m for m in group.every_model() if sources & m.restart.keys()]
        for _, source, _, last, *_ in past:
            for model in models:
                model.passed(source, last)
        return [h for h in at if any(h[1] in model.restart for model in models)]

    def _dead(self, dead):
        if dead:
            self.bad.inc(len(dead))
            self.late.inc(sum(d.reason == LATE_LABEL for d in dead))
            dead = dead_letter_table(dead)
            self.delivery.write_dead_letters(dead)
            yield beam.pvalue.TaggedOutput(DEAD, dead)

    def _learn(self, group, block, served=None, served_scores=None, tracked=True):
        predictions, dead, skipped, models = group.learn(
            block, partial(self._of, group), served, served_scores, tracked,
            partial(self._known, group))
        if skipped:
            self.replayed.inc(skipped)
            yield beam.pvalue.TaggedOutput(ACCOUNTS, Tally(replayed=skipped))
        yield from self._dead(dead)
        if predictions is not None:
            served = served_count(predictions)
            self.examples.inc(predictions.num_rows - served)
            self.served.inc(served)
            self.delivery.write_predictions(predictions)
            self._log(models[-1], predictions.num_rows)
            yield predictions
        # (--labels: once the join's call is learned whole, ``_join``: a checkpoint keeps the
        # join's state with the model's, and they agree only then)
        checkpointed = not self.cfg.labels and self._checkpoint_due(models, group)
        if not checkpointed:
            self.delivery.flush_if_full()

    def _checkpoint_due(self, models, group):
        """Checkpoint those of the group's ``models`` that are due (--checkpoint-every,
        --checkpoint-seconds), written now: not when the bundle ends, however long it is.
        Returns whether any was."""
        due = [m for m in models
               if m.checkpoint_due(self.cfg.checkpoint_every, self.cfg.checkpoint_seconds)]
        if due:
            self._checkpoint(due, group)
            self.delivery.write_checkpoints()
        return bool(due)

    def _checkpoint(self, models, group):
        """Take the checkpoints of these models of ``group`` now (with --labels each keeps its
        share of the group's join), their tables made together (``ModelGroup.tables``); they
        are written with the others of the bundle before the bundle ends
        (``Delivery.write_checkpoints``), or sooner when they grow large or the caller writes
        them.
        Serving apart, each is published too: no checkpoint is newer than a model's newest
        publication, which the serving step relies on (``serve.PublishedModels``)."""
        if not models:
            return
        self.delivery.publish(group, [model.key for model in models], at_once=True)
        news, metadata = [], []
        join = self._join_of(group) if self.cfg.labels else None
        for model in models:
            news.append(sorted(model.passed_partitions - (model.checkpoint_passed or set())))
            model.mark_checkpoint()
            metadata.append(model.checkpoint_metadata(join.resume_state(
                model.key, {s: p for s, p in model.learned_positions().items()
                            if not self.cfg.is_labels(s)}) if join is not None else None))
        self.delivery.take(group, models, metadata, news)

    def _log(self, model, n):
        self.seen += n
        now = time.time()
        if now - self.last_log >= self.cfg.log_every_seconds:
            log.info("%d examples, %.0f examples/s; model %r progressive loss %.6f", self.seen,
                     self.seen / (now - self.started), model.key, model.progressive_loss())
            if self.last_join is not None:
                log.info("waiting for labels in the group last joined: %d examples, %.1f MiB",
                         self.last_join.waiting_examples, self.last_join.nbytes / (1 << 20))
            self.last_log = now
