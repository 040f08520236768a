"""One model key's learner plus its bookkeeping: input positions, checkpoints, outputs.

Free of Beam: the stateful DoFn holds a ModelGroup per key of its step, a KeyedModel per model
key in it, their learners rows of the group's one ``ManyStates``, and learns a block of the
group's examples with ``ModelGroup.learn``, in one call.
"""
import pickle
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..connectors.storage import unique_token
from ..learner import (example_losses, from_arrow, mistakes, new_state, predicted_class,
                       probability, read_metadata, to_arrow)
from ..learner.many import ManyStates, RowState, learner_state
from ..learner.losses import CLASSIFICATION_LOSSES
from ..schemas import PREDICTION_SCHEMA



def served_count(table):
    """How many rows of a prediction table were served (predicted without a label)."""
    return pc.sum(table.column("served")).as_py() or 0


def outcome_columns(state, scores, labels):
    """(prediction, probability, error) columns for scores [n, K] made by ``state``: the score
    (binary, regression) or the predicted class (one-against-all); P(y = +1) for a logistic
    binary model, else null; 1/0 for a wrong/right predicted class (classification), null for
    regression or where there is no label (scoring)."""
    n = len(labels)
    single = state.n_classes == 1
    prediction = pa.array(scores[:, 0] if single else predicted_class(scores))
    prob = (pa.array(probability(scores[:, 0])) if single and state.loss == "logistic"
            else pa.nulls(n, pa.float64()))
    if state.loss not in CLASSIFICATION_LOSSES:
        return prediction, prob, pa.nulls(n, pa.float64())
    error = mistakes(state, scores, labels)
    return prediction, prob, pa.array(error, mask=np.isnan(labels))


def prediction_table(keys, state, ids, labels, result, examples_seen, sources, positions,
                     checkpoint_ids=None, event_times=None, served_losses=None, ages=None,
                     stale=None):
    """The predictions (PREDICTION_SCHEMA) of examples predicted by models of learner settings
    ``state``: ``keys`` their model keys (a string array, or one key for all), ``result`` their
    BatchResult, ``examples_seen`` each one's model's count after it (``seen_after``),
    ``sources`` a string array (or one source for all), ``checkpoint_ids`` each one's
    model's last checkpoint (an array, or one for all). An example without a label (NaN) was
    served, not learned: its label, loss and error are null, and its ``examples_seen`` is the
    model's count when it served it; a learned example's is the count with it (so a served
    example and its labeled twin right after it share one). ``ages`` and ``stale``: of rows
    served apart from learning (``pipelines/serve.py``; NaN age: a model not published yet),
    else null."""
    n = len(labels)
    served = np.isnan(labels)
    prediction, prob, error = outcome_columns(state, result.scores, labels)
    return pa.table([
        ids, _column(keys, n), prediction, prob,
        pa.array(labels, mask=served), pa.array(result.losses, mask=served), error,
        pa.array(examples_seen, pa.int64()), _column(sources, n),
        pa.array(positions), _column(checkpoint_ids, n),
        pa.array(event_times, pa.float64()) if event_times is not None
        else pa.nulls(n, pa.float64()), pa.array(served),
        # (NaN: served before a resume, with a prediction no longer known)
        pa.array(served_losses, pa.float64(), mask=np.isnan(served_losses))
        if served_losses is not None
        else pa.nulls(n, pa.float64()),
        pa.array(ages, pa.float64(), mask=np.isnan(ages)) if ages is not None
        else pa.nulls(n, pa.float64()),
        pa.array(stale, pa.bool_()) if stale is not None else pa.nulls(n, pa.bool_()),
    ], schema=PREDICTION_SCHEMA)


def seen_after(start, labels):
    """Each example's model's examples_seen after it, for examples of one model that had
    learned ``start`` before the first (one served, without a label, is not counted)."""
    return start + np.cumsum(~np.isnan(labels), dtype=np.int64)


def _column(value, n):
    """A string column of n rows: ``value`` itself if it is an array, else n times it."""
    if value is None or isinstance(value, str):
        return pa.repeat(pa.scalar(value, pa.string()), n)
    return value


def in_span_order(block):
    """True when the block holds examples read whole over a span (``ExampleBlock.span``), in
    strictly increasing positions (so each model's are in its order)."""
    return (block.span is not None and len(block) > 0
            and bool(np.all(np.diff(block.positions) > 0)))


@dataclass
class KeyedModel:
    key: str
    state: object                                  # LearnerState
    positions: dict = field(default_factory=dict)  # source -> last position learned (or refused)
    checkpoint_examples: int = -1                  # examples_seen at the last checkpoint
    checkpoint_time: float = field(default_factory=time.time)
    checkpoint_id: str = None
    errors: float = 0.0  # classification: examples whose predicted class was wrong (weighted 1)
    unlearned: dict = field(default_factory=dict)  # source -> start position, nothing learned yet
    # source -> the position through which every example of this key there is learned (its
    # last example's position, or a block's span's end)
    through: dict = field(default_factory=dict)
    # Kafka partition -> the position a resumed run may restart it after, as far as this model
    # knows: its start there, then what it learned once the watermark passed it. Not what it
    # learned on arrival (``continues``): another key's first examples in the same block may
    # not have their start recorded yet, and a restart past them would lose them
    restart: dict = field(default_factory=dict)
    checkpoint_restart: dict = None  # ``restart`` at the last checkpoint this process took
    # partitions where ``restart`` has moved with the watermark (``passed``): there it covers
    # every example of its own before it (on any runner: a key's blocks all reach one worker),
    # so the reading stage's start records of it there are superseded (``starts``,
    # ``write_starts``); persisted as ``watermark_passed``
    passed_partitions: set = field(default_factory=set)
    checkpoint_passed: set = None  # ``passed_partitions`` at the last checkpoint taken or read
    run_start: int = 0  # examples_seen when this run made or resumed the model
    served: int = 0  # examples without a label it predicted (over every run, with --resume)
    checkpoint_served: int = 0  # ``served`` at the last checkpoint
    # when it last learned (µs on the input's clock, the watermark's: a source's block's stamp,
    # or when the watermark released it); None: not since it was made or read back
    last_seen: int = None
    # --labels: what its checkpoint kept of its group's join (``LabelJoin.resume_state``), as
    # read back, until the join has it again (``LabelJoin.restore``)
    saved_join: dict = None
    # serving apart from learning: examples_seen and when (epoch s) it was last published
    published_examples: int = -1
    published_time: float = 0.0

    def learned_range(self):
        """(key, examples_seen when this run made or read it, examples_seen now)."""
        return self.key, self.run_start, self.state.examples_seen

    def to_table(self, label_join=None):
        """The model as a checkpoint's Arrow table (``to_arrow`` with its bookkeeping)."""
        return to_arrow(self.state, self.checkpoint_metadata(label_join))

    def checkpoint_metadata(self, label_join=None):
        """Its bookkeeping, which its checkpoint's table holds beside the learner's
        (``ModelGroup.tables``; with --labels, ``label_join``: what it keeps of its group's
        join). Copies, not the model's own dicts: a checkpoint is written after it is taken
        (``LearnBlocks._checkpoint``), when the model may have learned on."""
        return {
            "model_key": self.key, "input_positions": dict(self.positions),
            "checkpoint_examples": self.checkpoint_examples, "checkpoint_id": self.checkpoint_id,
            "examples_served": self.served,
            "time": time.time(), "errors": self.errors,
            "unlearned_sources": dict(self.unlearned), "learned_through": dict(self.through),
            "restart_positions": self._restart(label_join),
            "watermark_passed": sorted(self.passed_partitions),
            **({"label_join": label_join} if label_join is not None else {})}

    def _restart(self, label_join):
        """Where a resumed run may restart each partition: --labels, no later than before the
        oldest example still waiting for its label there (read again, to wait again)."""
        rejoin = (label_join or {}).get("rejoin", {})
        return {s: min(p, rejoin.get(s, p)) for s, p in self.restart.items()}

    @classmethod
    def from_table(cls, table, state=None):
        """The model of a checkpoint's table (``state``: its learner, if decoded already)."""
        meta = read_metadata(table)
        positions = {k: int(v) for k, v in (meta.get("input_positions") or {}).items()}
        # (a checkpoint from before learning on arrival: its positions are where to restart)
        restart = meta.get("restart_positions", positions)
        passed = set(meta.get("watermark_passed") or ())
        return cls(meta.get("model_key", ""), from_arrow(table) if state is None else state,
                   positions, int(meta.get("checkpoint_examples", -1)), time.time(),
                   meta.get("checkpoint_id"), float(meta.get("errors", 0.0)),
                   {k: int(v) for k, v in (meta.get("unlearned_sources") or {}).items()},
                   {k: int(v) for k, v in (meta.get("learned_through") or {}).items()},
                   {k: int(v) for k, v in restart.items()}, passed_partitions=passed,
                   checkpoint_passed=set(passed), served=int(meta.get("examples_served", 0)),
                   checkpoint_served=int(meta.get("examples_served", 0)),
                   saved_join=meta.get("label_join"))

    def enter_source(self, block, first=None):
        """True when the block tells where this model starts in a source, which the caller
        then checkpoints before anything is learned (so a restarted source never starts after
        an example this model still needs): a source the model has no position for, or one it
        has learned nothing from yet when this block starts earlier (blocks may arrive out of
        order). The position is the one just before the model's first example in the block
        (``first``; None: the block's first, all of its examples this model's). Only sources a
        resumed run restarts midway (Kafka partitions, ``restarts_midway``) need it: a file is
        read again from its start, and a model without a checkpoint learns it all again. A
        block without a source (the user's own records, ``source`` None) has no positions."""
        if block.source is None or not block.restarts_midway or not len(block):
            return False
        start = (int(block.positions.min()) if first is None else first) - 1
        if block.source in self.positions and not (block.source in self.unlearned
                                                   and start < self.positions[block.source]):
            return False
        self.positions[block.source] = self.unlearned[block.source] = start
        self.restart[block.source] = start
        return True

    def passed(self, source, last):
        """The watermark passed a block of ``source`` up to position ``last`` that this model
        learned (or its group did, see ``ModelGroup``): every key's start there up to it is
        recorded (see ``restart``). The restart position moves no further than the model has
        learned there: a group's block may end past the model's own examples; and not at all
        while it has learned nothing there (a group's other models may have: its start there,
        from a block that came early, must stay uncovered by the watermark until it learns)."""
        if source in self.restart and source not in self.unlearned:
            self.restart[source] = max(self.restart[source],
                                       min(last, self.positions.get(source, last)))
            self.passed_partitions.add(source)

    def continues(self, block):
        """True when the block (of this model's examples) holds its next examples of its
        source, all of them from right after those it has learned there, in order
        (``in_span_order``, ``learned_before``): nothing it must learn before them can be
        elsewhere."""
        return in_span_order(block) and self.learned_before(block)

    def learned_before(self, block):
        """True when this model has learned all of its examples of the block's source before
        the block's span (``through``; nothing yet, for a file read from its start, and for a
        Kafka partition it has learned nothing from, where only a block whose span starts at
        -1, the first read there in this run, follows that)."""
        done = self.through.get(block.source, self.positions.get(block.source))
        if block.source in self.unlearned or (done is None and block.restarts_midway):
            done = -2  # (not known: only a span from -1 goes on from it)
        elif done is None:
            done = -1
        return block.span[0] <= done + 1

    def learn_block(self, block, served=None, served_scores=None, tracked=True):
        """This model's block learned as ``ModelGroup.learn`` learns a group's:
        (predictions, dead letters, skipped)."""
        group = ModelGroup({self.key: self})
        return group.learn(block, lambda _: self, served, served_scores, tracked)[:3]

    def learns_to(self, source, last, span):
        """It learns its examples of ``source`` (a block's, of span ``span``) through position
        ``last``, those after the position it had learned there (``ModelGroup.learn``): in
        position order, so nothing of its own before ``last`` is still to come (``through``)."""
        self.positions[source] = last
        self.unlearned.pop(source, None)
        self.through[source] = max(last, span[1] if span else last, self.through.get(source, -1))

    def progressive_loss(self):
        return self.state.cumulative_loss / max(self.state.examples_seen, 1)

    def checkpoint_due(self, every_examples, every_seconds):
        """Due every N examples, or T seconds when the last checkpoint is behind (so also when
        only restart positions moved: a model learning only replays records that too); and at
        the end of input, by the caller."""
        if not self.checkpoint_behind():
            return False
        if every_examples and (self.state.examples_seen // every_examples
                               > max(self.checkpoint_examples, 0) // every_examples):
            return True
        return bool(every_seconds) and time.time() - self.checkpoint_time >= every_seconds

    def checkpoint_behind(self):
        """True when the last checkpoint misses examples learned or served since, or (as far as
        this process knows) restart positions or partitions the watermark has passed since."""
        return (self.checkpoint_examples != self.state.examples_seen
                or self.checkpoint_served != self.served
                or self.checkpoint_restart not in (None, self.restart)
                or self.passed_partitions != (self.checkpoint_passed or set()))

    def publish_due(self, every_seconds, now):
        """It learned since it was last published, ``every_seconds`` ago or more."""
        return (self.state.examples_seen != self.published_examples
                and now - self.published_time >= every_seconds)

    def published_metadata(self, now):
        """What a published state says beside the learner's (figures of
        ``checkpoint_metadata``, but no join's share: a serving step needs none of it), named
        by its version; marks it published."""
        self.published_examples, self.published_time = self.state.examples_seen, now
        return {"model_key": self.key, "time": now, "examples_served": self.served,
                "errors": self.errors,
                "checkpoint_id": f"{self.key}@{self.state.examples_seen}"}

    def mark_checkpoint(self):
        self.checkpoint_restart = dict(self.restart)
        self.checkpoint_passed = set(self.passed_partitions)
        self.checkpoint_examples = self.state.examples_seen
        self.checkpoint_served = self.served
        self.checkpoint_time = time.time()
        self.checkpoint_id = f"{self.key}@{self.state.examples_seen}"


class ModelGroup:
    """The models of the model keys that share one key of the keyed step (``KeyByModel``'s
    groups), as Beam state holds them together; and the model keys that left it, idle
    (``evict``), each with the examples learned and served its newest checkpoint holds."""

    def __init__(self, models=None, evicted=None, join=None):
        self.models = {}  # model key -> KeyedModel, whose learner is a row of ``many``
        self.many = None  # ManyStates: the learners of them all, once there is one
        for model in (models or {}).values():
            self._adopt(model)
            self.models[model.key] = model
        self.evicted = evicted if evicted is not None else {}  # model key -> (examples, served)
        # the served examples waiting for labels (``--labels``: ``LabelJoin``), kept in its own
        # log beside the group's state (``LabelJoin.log_entries``), not in ``to_bytes``
        self.join = join
        self.token = None

    def _adopt(self, model):
        """The model's learner becomes a row of the group's ``many`` (a LearnerState is moved
        in; earlier versions kept one per model)."""
        if isinstance(model.state, RowState) and model.state.many is (self.many or
                                                                      model.state.many):
            self.many = model.state.many
            return
        state = learner_state(model.state)
        if self.many is None:
            self.many = ManyStates(new_state(state.algorithm, state.dim, state.loss,
                                             state.n_classes, state.bias_index,
                                             **state.hyperparameters))
        elif not self.many.same_settings(state):
            raise ValueError(f"model {model.key!r}: a learner of other settings than its "
                             "group's")
        model.state = self.many.adopt(model.key, state)

    def model(self, key, new):
        """The model of ``key``: the group's, or ``new(key, evicted)`` if it holds none
        (``evicted``: what ``evict`` recorded of it, or None)."""
        model = self.models.get(key)
        if model is None:
            model = new(key, self.evicted.get(key))
            self._adopt(model)
            self.models[key] = model
            self.evicted.pop(key, None)  # (only once it is back: ``new`` may fail)
        return model

    def evict(self, model):
        """The model leaves the group (its newest checkpoint, durable now, holds it). Returns
        its ``learned_range`` as it left: its learner is a row of the group's, cleared here, so
        the model reads as a fresh one afterwards."""
        left = model.learned_range()
        del self.models[model.key]
        self.evicted[model.key] = (model.state.examples_seen, model.served)
        self.many.clear_row(model.state.row)
        return left

    def learn(self, block, model_of, served=None, served_scores=None, tracked=True):
        """Learn the block's new examples, each by its model key's model (``model_of(key)``),
        in the block's order, all in one call (``ManyStates.learn``): (predictions table,
        dead letters, skipped, the models of the block's keys). With a list ``served``, append
        to it (the examples served, their scores [n, K]); with ``served_scores`` (the block's
        examples were served before, with those scores [n, K]: ``--labels``), report the loss
        of each at its label (``served_loss``).

        Examples at or before the position their model already learned from their source are
        skipped (a replay after a restart; ``KeyedModel.learns_to`` records the rest); examples
        the learner refuses (``learn_or_refuse``) become dead letters and never touch the model;
        examples without a label are served in their place in the order, not learned. A block
        without a source, or not ``tracked`` (served examples learned with ``--expired-label``,
        whose positions were passed when they were served), is learned whole."""
        if not len(block):
            return None, [], 0, []
        encoded = block.keys.dictionary_encode()
        models = [model_of(k) for k in encoded.dictionary.to_pylist()]
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        skipped = 0
        if block.source is not None and tracked:
            source, span = block.source, block.span
            done = np.array([m.positions.get(source, -1) for m in models], dtype=np.int64)
            fresh = block.positions > done[codes]
            last = np.full(len(models), -1, dtype=np.int64)
            np.maximum.at(last, codes[fresh], block.positions[fresh])
            for c in np.flatnonzero(last > done):
                models[c].learns_to(source, int(last[c]), span)
            skipped = len(block) - int(fresh.sum())
            if skipped:
                if not skipped < len(block):
                    return None, [], skipped, models
                keep = np.flatnonzero(fresh)
                block, codes = block.take(keep), codes[keep]
                served_scores = None if served_scores is None else served_scores[keep]
        rows = np.array([m.state.row for m in models], dtype=np.int64)[codes]
        kept, result, refused, seen = self.many.learn(rows, block.batch(), block.served)
        # refused: what a resumed model's settings refuse beyond the source's checks, and
        # examples whose prediction, loss or resulting state would not be finite
        block, dead = block.screen(refused)
        codes = codes[kept]
        for model in models:
            model.state.name_features(block.names)
        is_served = block.served
        if served is not None and is_served.any():
            at = np.flatnonzero(is_served)  # (the result holds the rows kept, in order)
            served.append((block.take(at), result.scores[at]))
        state = models[0].state
        served_losses = None
        if served_scores is not None:  # (weighted, as the kernel's ``loss`` is)
            served_losses = block.weights * example_losses(state, served_scores[kept],
                                                           block.labels)
        table = prediction_table(
            pa.array([m.key for m in models], pa.string()).take(codes), state, block.ids,
            block.labels, result, seen, block.source, block.positions,
            pa.array([m.checkpoint_id for m in models], pa.string()).take(codes),
            block.event_times, served_losses)
        # (null where there is nothing to count: regression, and examples served)
        error = table.column("error").to_numpy(zero_copy_only=False)
        errors = np.bincount(codes, np.nan_to_num(error), minlength=len(models))
        served_by = np.bincount(codes, is_served, minlength=len(models))
        for c, model in enumerate(models):
            model.errors += float(errors[c])
            model.served += int(served_by[c])
        return table, dead, skipped, models

    def checkpoints(self, models, metadata):
        """[(TableRows, metadata)]: the checkpoints of these models of the group, each with its
        ``metadata`` (``KeyedModel.checkpoint_metadata``) beside its rows of one table made for
        them together (``ManyStates.checkpoints``)."""
        return self.many.checkpoints([m.state.row for m in models],
                                     [m.state.feature_names for m in models], metadata)

    def idle_since(self, before, now, held):
        """The models last seen at or before ``before`` (µs), but those of the model keys
        ``held`` (examples of theirs still wait), which count as seen ``now``."""
        idle = []
        for model in self.every_model():
            if model.last_seen is not None and model.last_seen <= before:
                if model.key in held:
                    model.last_seen = now
                else:
                    idle.append(model)
        return idle

    def least_recently_seen(self):
        """When its least recently seen model was last seen (µs), None if none was."""
        return min((m.last_seen for m in self.models.values() if m.last_seen is not None),
                   default=None)

    def learned(self, block):
        """The group learned ``block``: where the block's source was read whole over its span
        (``ExampleBlock.span``), it held every example of every model key of the group there,
        so each model that had learned all of its own up to the span's start has learned all
        of them through its end, whether the block held any of them or not."""
        if block.span is None or block.source is None:
            return
        first, last = block.span
        for model in self.models.values():
            done = model.through.get(block.source)
            if done is not None and done >= first - 1:
                model.through[block.source] = max(done, last)

    def every_model(self):
        """Every model the group holds, in model key order."""
        return [self.models[key] for key in sorted(self.models)]

    @property
    def nbytes(self):
        """Bytes of its models' learner state, and of the examples waiting for labels."""
        return ((self.many.nbytes if self.many is not None else 0)
                + (self.join.state_bytes if self.join is not None else 0))

    def to_bytes(self):
        """The form kept in Beam state: a new token (32 ASCII bytes), then the models (and the
        evicted keys) pickled, arrays as they are (Beam state is this pipeline's own, read back
        by the same code; a checkpoint, read by people and later versions, is the Arrow table).
        Pickled, a model over 50 examples' features encodes in a fifth and decodes in a tenth
        of the Arrow file's time, which 10,000 keys pay per element."""
        self.token = unique_token()
        return self.token.encode() + pickle.dumps((self.models, self.evicted, None),
                                                  protocol=pickle.HIGHEST_PROTOCOL)

    def holds(self, data):
        """True when ``data`` is what this object last wrote (so decoding can be skipped)."""
        return self.token is not None and data[:32] == self.token.encode()

    @classmethod
    def from_bytes(cls, data):
        found = pickle.loads(memoryview(data)[32:])
        # (earlier versions kept the models alone: state a runner's savepoint or an updated
        # job carries over)
        return cls(found) if isinstance(found, dict) else cls(*found)
