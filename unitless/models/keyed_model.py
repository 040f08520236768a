"""One model key's learner plus its bookkeeping: input positions, checkpoints, outputs.

Free of Beam: the stateful DoFn holds a ModelGroup (model_group.py) per key of its step, a
KeyedModel per model key in it, their learners rows of the group's one ``ManyStates``, and
learns a block of the group's examples with ``ModelGroup.learn``, in one call; the rows it
writes: predictions.py.
"""
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from ..learner import from_arrow, read_metadata, to_arrow
from ..parse.records import DeadLetter, ExampleBlock
from .model_group import ModelGroup


def in_span_order(block: ExampleBlock) -> bool:
    """True when the block holds examples read whole over a span (``ExampleBlock.span``), in
    strictly increasing positions (so each model's are in its order)."""
    return (block.span is not None and len(block) > 0
            and bool(np.all(np.diff(block.positions) > 0)))


@dataclass
class KeyedModel:
    key: str
    state: Any                                     # LearnerState
    positions: dict = field(default_factory=dict)  # source -> last position learned (or refused)
    checkpoint_examples: int = -1                  # examples_seen at the last checkpoint
    checkpoint_time: float = field(default_factory=time.time)
    checkpoint_id: Optional[str] = None
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
    # ``restart`` at the last checkpoint this process took
    checkpoint_restart: Optional[dict] = None
    # partitions where ``restart`` has moved with the watermark (``passed``): there it covers
    # every example of its own before it (on any runner: a key's blocks all reach one worker),
    # so the reading stage's start records of it there are superseded (``starts``,
    # ``write_starts``); persisted as ``watermark_passed``
    passed_partitions: set = field(default_factory=set)
    # ``passed_partitions`` at the last checkpoint taken or read
    checkpoint_passed: Optional[set] = None
    run_start: int = 0  # examples_seen when this run made or resumed the model
    served: int = 0  # examples without a label it predicted (over every run, with --resume)
    checkpoint_served: int = 0  # ``served`` at the last checkpoint
    # when it last learned (µs on the input's clock, the watermark's: a source's block's stamp,
    # or when the watermark released it); None: not since it was made or read back
    last_seen: Optional[int] = None
    # --labels: what its checkpoint kept of its group's join (``LabelJoin.resume_state``), as
    # read back, until the join has it again (``LabelJoin.restore``)
    saved_join: Optional[dict] = None
    # serving apart from learning: examples_seen and when (epoch s) it was last published
    published_examples: int = -1
    published_time: float = 0.0

    def learned_range(self) -> tuple[str, int, int]:
        """(key, examples_seen when this run made or read it, examples_seen now)."""
        return self.key, self.run_start, self.state.examples_seen

    def to_table(self, label_join: Optional[dict[str, Any]] = None) -> pa.Table:
        """The model as a checkpoint's Arrow table (``to_arrow`` with its bookkeeping)."""
        return to_arrow(self.state, self.checkpoint_metadata(label_join))

    def checkpoint_metadata(self, label_join: Optional[dict[str, Any]] = None) -> dict[str, Any]:
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
    def from_table(cls, table: pa.Table, state: Any = None) -> "KeyedModel":
        """The model of a checkpoint's table (``state``: its learner, if decoded already)."""
        return cls.from_metadata(read_metadata(table), from_arrow(table) if state is None
                                 else state)

    @classmethod
    def from_metadata(cls, meta: dict[str, Any], state: Any) -> "KeyedModel":
        """The model of a checkpoint's metadata and learner ``state`` (None: what it learned
        only, its learner not decoded: ``ModelGroup.dormant``)."""
        positions = {k: int(v) for k, v in (meta.get("input_positions") or {}).items()}
        # (a checkpoint from before learning on arrival: its positions are where to restart)
        restart = meta.get("restart_positions", positions)
        passed = set(meta.get("watermark_passed") or ())
        return cls(meta.get("model_key", ""), state,
                   positions, int(meta.get("checkpoint_examples", -1)), time.time(),
                   meta.get("checkpoint_id"), float(meta.get("errors", 0.0)),
                   {k: int(v) for k, v in (meta.get("unlearned_sources") or {}).items()},
                   {k: int(v) for k, v in (meta.get("learned_through") or {}).items()},
                   {k: int(v) for k, v in restart.items()}, passed_partitions=passed,
                   checkpoint_passed=set(passed), served=int(meta.get("examples_served", 0)),
                   checkpoint_served=int(meta.get("examples_served", 0)),
                   saved_join=meta.get("label_join"))

    def enter_source(self, block: ExampleBlock, first: Optional[int] = None) -> bool:
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

    def learned_positions(self) -> dict[str, int]:
        """{source: the position through which it learned or served its examples there}: its
        positions but where it has learned nothing yet (``unlearned``), whose position is where
        it starts, which a later block that came first may have put past examples of its own
        still to come (``enter_source`` moves it back when they do)."""
        return {s: p for s, p in self.positions.items() if s not in self.unlearned}

    def passed(self, source: str, last: int) -> None:
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

    def continues(self, block: ExampleBlock) -> bool:
        """True when the block (of this model's examples) holds its next examples of its
        source, all of them from right after those it has learned there, in order
        (``in_span_order``, ``learned_before``): nothing it must learn before them can be
        elsewhere."""
        return in_span_order(block) and self.learned_before(block)

    def learned_before(self, block: ExampleBlock) -> bool:
        """True when this model has learned all of its examples of the block's source before
        the block's span (``through``; nothing yet, for a file read from its start, and for a
        Kafka partition it has learned nothing from, where only a block whose span starts at
        -1, the first read there in this run, follows that)."""
        done = self.through.get(block.source, self.positions.get(block.source))
        if block.source in self.unlearned or (done is None and block.restarts_midway):
            done = -2  # (not known: only a span from -1 goes on from it)
        elif done is None:
            done = -1
        assert block.span is not None
        return block.span[0] <= done + 1

    def learn_block(self, block: ExampleBlock, served: Optional[list] = None,
                    served_scores: Optional[np.ndarray] = None, tracked: bool = True
                    ) -> tuple[Optional[pa.Table], list[DeadLetter], int]:
        """This model's block learned as ``ModelGroup.learn`` learns a group's:
        (predictions, dead letters, skipped)."""
        group = ModelGroup({self.key: self})
        return group.learn(block, lambda _: self, served, served_scores, tracked)[:3]

    def learns_to(self, source: str, last: int, span: Optional[tuple]) -> None:
        """It learns its examples of ``source`` (a block's, of span ``span``) through position
        ``last``, those after the position it had learned there (``ModelGroup.learn``): in
        position order, so nothing of its own before ``last`` is still to come (``through``)."""
        self.positions[source] = last
        self.unlearned.pop(source, None)
        self.through[source] = max(last, span[1] if span else last, self.through.get(source, -1))

    def progressive_loss(self) -> float:
        return self.state.cumulative_loss / max(self.state.examples_seen, 1)

    def checkpoint_due(self, every_examples: int, every_seconds: float) -> bool:
        """Due every N examples, or T seconds when the last checkpoint is behind (so also when
        only restart positions moved: a model learning only replays records that too); and at
        the end of input, by the caller."""
        if not self.checkpoint_behind():
            return False
        if every_examples and (self.state.examples_seen // every_examples
                               > max(self.checkpoint_examples, 0) // every_examples):
            return True
        return bool(every_seconds) and time.time() - self.checkpoint_time >= every_seconds

    def checkpoint_behind(self) -> bool:
        """True when the last checkpoint misses examples learned or served since, or (as far as
        this process knows) restart positions or partitions the watermark has passed since."""
        return (self.checkpoint_examples != self.state.examples_seen
                or self.checkpoint_served != self.served
                or self.checkpoint_restart not in (None, self.restart)
                or self.passed_partitions != (self.checkpoint_passed or set()))

    def publish_due(self, every_seconds: float, now: float) -> bool:
        """It learned since it was last published, ``every_seconds`` ago or more."""
        return (self.state.examples_seen != self.published_examples
                and now - self.published_time >= every_seconds)

    def published_metadata(self, now: float) -> dict[str, Any]:
        """What a published state says beside the learner's (figures of
        ``checkpoint_metadata``, but no join's share: a serving step needs none of it), named
        by its version; marks it published."""
        self.published_examples, self.published_time = self.state.examples_seen, now
        return {"model_key": self.key, "time": now, "examples_served": self.served,
                "errors": self.errors,
                "checkpoint_id": f"{self.key}@{self.state.examples_seen}"}

    def mark_checkpoint(self) -> None:
        self.checkpoint_restart = dict(self.restart)
        self.checkpoint_passed = set(self.passed_partitions)
        self.checkpoint_examples = self.state.examples_seen
        self.checkpoint_served = self.served
        self.checkpoint_time = time.time()
        self.checkpoint_id = f"{self.key}@{self.state.examples_seen}"
