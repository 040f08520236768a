"""The models of one key of the learning step (``ModelGroup``): a group of model keys whose
learners are rows of one ``ManyStates``, learned a block at a time and stored together."""
import pickle
from typing import TYPE_CHECKING, Any, Callable, Collection, Optional

import numpy as np
import pyarrow as pa

from .. import pickles
from ..connectors.storage import unique_token
from ..learner import example_losses, new_state
from ..learner.arrow_form import TableRows
from ..learner.many import ManyStates, RowState, learner_state
from ..parse.records import DeadLetter, ExampleBlock
from .predictions import prediction_table

if TYPE_CHECKING:
    from ..labels.join import LabelJoin
    from .keyed_model import KeyedModel


class ModelGroup:
    """The models of the model keys that share one key of the keyed step (``KeyByModel``'s
    groups), as Beam state holds them together; and the model keys that left it, idle
    (``evict``), each with the examples learned and served its newest checkpoint holds."""
    many: Optional[ManyStates]

    def __init__(self, models: Optional[dict[str, "KeyedModel"]] = None,
                 evicted: Optional[dict[str, tuple[int, int]]] = None,
                 join: Optional["LabelJoin"] = None) -> None:
        self.models = {}  # model key -> KeyedModel, whose learner is a row of ``many``
        self.many = None  # ManyStates: the learners of them all, once there is one
        for model in (models or {}).values():
            self._adopt(model)
            self.models[model.key] = model
        self.evicted = evicted if evicted is not None else {}  # model key -> (examples, served)
        # the served examples waiting for labels (``--labels``: ``LabelJoin``), kept in its own
        # log beside the group's state (``LabelJoin.log_entries``), not in ``to_bytes``
        self.join = join
        self.token: Optional[str] = None
        # model keys -> their models as their checkpoints left them, learners not decoded: read
        # back by a resumed run for what they learned, until they learn (``model``); not in
        # ``to_bytes``, read back again if lost (``saved_models.known_model``)
        self.dormant: dict[str, "KeyedModel"] = {}

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

    def model(self, key: str, new: Callable[[str, Optional[tuple[int, int]]], "KeyedModel"]
              ) -> "KeyedModel":
        """The model of ``key``: the group's, or ``new(key, evicted)`` if it holds none
        (``evicted``: what ``evict`` recorded of it, or None)."""
        model = self.models.get(key)
        if model is None:
            model = new(key, self.evicted.get(key))
            dormant = self.dormant.pop(key, None)
            if dormant is not None:
                if (dormant.checkpoint_id, dormant.positions) != (model.checkpoint_id,
                                                                 model.positions):
                    # (what it skipped as learned was skipped by the checkpoint read first)
                    raise RuntimeError(
                        f"model {key!r} read back from its checkpoint is not the one read "
                        f"before ({model.checkpoint_id!r}, not {dormant.checkpoint_id!r}): its "
                        "newest checkpoint could not be decoded, or its checkpoints changed")
                model.through = dormant.through  # (moved on by the blocks it skipped)
            self._adopt(model)
            self.models[key] = model
            self.evicted.pop(key, None)  # (only once it is back: ``new`` may fail)
        return model

    def evict(self, model: "KeyedModel") -> tuple[str, int, int]:
        """The model leaves the group (its newest checkpoint, durable now, holds it). Returns
        its ``learned_range`` as it left: its learner is a row of the group's, cleared here, so
        the model reads as a fresh one afterwards."""
        left = model.learned_range()
        del self.models[model.key]
        self.evicted[model.key] = (model.state.examples_seen, model.served)
        assert self.many is not None
        self.many.clear_row(model.state.row)
        return left

    def learn(self, block: ExampleBlock, model_of: Callable[[str], "KeyedModel"],
              served: Optional[list] = None, served_scores: Optional[np.ndarray] = None,
              tracked: bool = True, known_of: Optional[Callable[[str], "KeyedModel"]] = None
              ) -> tuple[Optional[pa.Table], list[DeadLetter], int, list["KeyedModel"]]:
        """Learn the block's new examples, each by its model key's model (``model_of(key)``),
        in the block's order, all in one call (``ManyStates.learn``): (predictions table,
        dead letters, skipped, the models of the block's keys but ``dormant``). With a list
        ``served``, append to it (the examples served, their scores [n, K]); with
        ``served_scores`` (the block's examples were served before, with those scores [n, K]:
        ``--labels``), report the loss of each at its label (``served_loss``).

        Examples at or before the position their model learned from their source are skipped
        (a replay after a restart; of a model with nothing new only ``known_of(key)``, what it
        learned, is asked: ``saved_models.known_model``); examples the learner refuses become
        dead letters and never touch the model; examples without a label are served in their
        place in the order, not learned. A block without a source, or not ``tracked`` (served
        examples learned with ``--expired-label``, passed when served), is learned whole."""
        if not len(block):
            return None, [], 0, []
        encoded = block.keys.dictionary_encode()
        keys = encoded.dictionary.to_pylist()
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        if block.source is None or not tracked:
            models, skipped = [model_of(k) for k in keys], 0
        else:
            keep, models, codes = self._fresh(block, keys, codes, model_of, known_of or model_of)
            skipped = len(block) - len(keep)
            if skipped == len(block):
                return None, [], skipped, models
            block = block.take(keep) if skipped else block
            served_scores = None if served_scores is None else served_scores[keep]
        rows = np.array([m.state.row for m in models], dtype=np.int64)[codes]
        assert self.many is not None
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
        served_losses = None if served_scores is None else (  # (weighted, as the kernel's loss)
            block.weights * example_losses(state, served_scores[kept], block.labels))
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

    def _fresh(self, block, keys, codes, model_of, known_of):
        """(the rows of the block's examples after the position each one's model learned
        from the block's source, as ``known_of(key)`` says; the models of the keys,
        ``model_of``'s, but those ``dormant`` with nothing new, each that learns recording
        where it learns to, ``KeyedModel.learns_to``; the kept rows' model numbers among
        them)."""
        done = np.array([known_of(k).positions.get(block.source, -1) for k in keys], np.int64)
        fresh = block.positions > done[codes]
        last = np.full(len(keys), -1, dtype=np.int64)
        np.maximum.at(last, codes[fresh], block.positions[fresh])
        awake = np.array([k not in self.dormant for k in keys], bool)
        wanted = np.flatnonzero((last >= 0) | awake)
        models = [model_of(keys[c]) for c in wanted.tolist()]
        for model, through in zip(models, last[wanted].tolist()):
            if through >= 0:
                model.learns_to(block.source, through, block.span)
        renumbered = np.full(len(keys), -1, dtype=np.int64)
        renumbered[wanted] = np.arange(len(wanted))
        keep = np.flatnonzero(fresh)
        return keep, models, renumbered[codes[keep]]

    def checkpoints(self, models: list["KeyedModel"], metadata: list[dict[str, Any]]
                    ) -> list[tuple[TableRows, dict[str, Any]]]:
        """[(TableRows, metadata)]: the checkpoints of these models of the group, each with its
        ``metadata`` (``KeyedModel.checkpoint_metadata``) beside its rows of one table made for
        them together (``ManyStates.checkpoints``)."""
        assert self.many is not None
        return self.many.checkpoints([m.state.row for m in models],
                                     [m.state.feature_names for m in models], metadata)

    def idle_since(self, before: int, now: int, held: Collection[str]) -> list["KeyedModel"]:
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

    def least_recently_seen(self) -> Optional[int]:
        """When its least recently seen model was last seen (µs), None if none was."""
        return min((m.last_seen for m in self.models.values() if m.last_seen is not None),
                   default=None)

    def learned(self, block: ExampleBlock) -> None:
        """The group learned ``block``: where the block's source was read whole over its span
        (``ExampleBlock.span``), it held every example of every model key of the group there,
        so each model that had learned all of its own up to the span's start has learned all
        of them through its end, whether the block held any of them or not (a ``dormant``
        model too: it had nothing new there, or it would have been decoded to learn it)."""
        if block.span is None or block.source is None:
            return
        first, last = block.span
        for model in [*self.models.values(), *self.dormant.values()]:
            done = model.through.get(block.source)
            if done is not None and done >= first - 1:
                model.through[block.source] = max(done, last)

    def every_model(self) -> list["KeyedModel"]:
        """Every model the group holds, in model key order."""
        return [self.models[key] for key in sorted(self.models)]

    @property
    def nbytes(self) -> int:
        """Bytes of its models' learner state, and of the examples waiting for labels."""
        return ((self.many.nbytes if self.many is not None else 0)
                + (self.join.state_bytes if self.join is not None else 0))

    def to_bytes(self) -> bytes:
        """The form kept in Beam state: a new token (32 ASCII bytes), then the models (and the
        evicted keys) pickled, arrays as they are (Beam state is this pipeline's own, read back
        by the same code; a checkpoint, read by people and later versions, is the Arrow table).
        Pickled, a model encodes and decodes several times faster than as an Arrow file, which
        a group of many keys pays per element."""
        self.token = unique_token()
        return self.token.encode() + pickle.dumps((self.models, self.evicted, None),
                                                  protocol=pickle.HIGHEST_PROTOCOL)

    def holds(self, data: bytes) -> bool:
        """True when ``data`` is what this object last wrote (so decoding can be skipped)."""
        return self.token is not None and data[:32] == self.token.encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "ModelGroup":
        found = pickles.loads(memoryview(data)[32:])
        # (earlier versions kept the models alone: state a runner's savepoint or an updated
        # job carries over)
        return cls(found) if isinstance(found, dict) else cls(*found)
