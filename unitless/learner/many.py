"""Many models of one learner in shared columnar arrays, learned in one compiled call.

The models of a run share algorithm, loss, dimension, classes and hyperparameters. ``ManyStates``
holds many of them together: one arena of slots ``V [vectors, K, capacity]`` for every model's
features, a feature → slot table per model row, all in one array (``slots.assign_rows``), and
per model row its scalars ``S [row, K, scalars]``, examples seen and cumulative loss. A model
costs its features' slots and a few dozen bytes, not arrays and objects of its own.

``learn`` takes a block of examples of many models and learns it in one ``kernel.run_many``
call: each example by its own model, each model's examples in the block's order, with the very
float64 operations ``learn_or_refuse`` does learning each model's examples alone (step
functions touch only the example's slots and the model's scalars, whatever the slots' numbers).
A model whose step goes non-finite in the call is put back as it was and learns its examples
the per-model way, which refuses exactly what it would alone. Learners with matrices, or whose
step reads every feature's state (``Algorithm.shared`` false), keep a ``LearnerState`` per row
and always learn that way.
"""
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import pyarrow as pa
from numba import njit

from . import slots as slot_table
from .arrow_form import TableRows, model_table, state_table, with_metadata
from .examples import Batch
from .kernel import run_many
from .losses import LOSS_CODES
from .names import FeatureNames
from .online import BatchResult, check_examples, learn_or_refuse, learner_labels
from .registry import Algorithm
from .state import LearnerState, model_metadata

_LOW = np.int64(0xFFFFFFFF)


@njit(cache=True)
def unique_first(values: np.ndarray, mark: np.ndarray) -> np.ndarray:
    """The distinct values (non-negative, below len(mark)) in order of first appearance;
    ``mark`` is all zero before and after."""
    out = np.empty(values.shape[0], dtype=values.dtype)
    n = 0
    for v in values:
        if not mark[v]:
            mark[v] = 1
            out[n] = v
            n += 1
    for j in range(n):
        mark[out[j]] = 0
    return out[:n]


class ManyStates:
    """The models of many keys learned alike (one fresh ``template`` state gives their
    settings), a row each (``row``), in shared arrays (see the module docstring)."""
    keys: list[str]
    row_of: dict[str, int]

    def __init__(self, template: LearnerState, rows: int = 16, capacity: int = 64) -> None:
        if template.examples_seen or template.n_slots:
            raise ValueError("ManyStates starts from a fresh learner's state")
        self.template = template
        self.shared = template.spec.shared
        self.initial = template.initial()
        self.hp = template.hp_array()
        self.tau = template.hyperparameters.get("quantile_tau", 0.5)
        K = template.n_classes
        self.keys, self.row_of = [], {}  # row -> model key; model key -> row
        self.S = np.zeros((rows, K, template.S.shape[1]))
        self.examples_seen = np.zeros(rows, dtype=np.int64)
        self.cumulative_loss = np.zeros(rows)
        self.solo: list[LearnerState] = []  # (not ``shared``) row -> its own LearnerState
        self.V = np.empty((len(self.spec.vectors), K, capacity))
        self.V[...] = self.initial[:, None, None]
        self.M = np.zeros((0, K, 0, 0))
        self.n_slots = 0
        # each row's feature -> slot table in one array (``slots.assign_rows``)
        self.table = np.full(2 * capacity, slot_table.EMPTY, dtype=np.int64)
        self.used = self.dead = 0  # entries of ``table`` taken; of those, left by moved tables
        self.base = np.zeros(rows, dtype=np.int64)    # row -> where its table starts
        self.shift = np.zeros(rows, dtype=np.int64)   # row -> its table's hash shift (0: none)
        self.n_features = np.zeros(rows, dtype=np.int64)
        self._marks = np.zeros(0, dtype=np.uint8)

    def __len__(self):
        return len(self.keys)

    @property
    def spec(self) -> Algorithm:
        # (not an attribute: it holds compiled functions, which do not pickle)
        return self.template.spec

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (the per-row learners' too)."""
        return (sum(a.nbytes for a in (self.V, self.S, self.examples_seen, self.cumulative_loss,
                                       self.table, self.base, self.shift, self.n_features))
                + sum(s.nbytes for s in self.solo))

    def row(self, key: str) -> int:
        """The row of model ``key``, a new model's if it has none."""
        r = self.row_of.get(key)
        return int(self.rows([key])[0]) if r is None else r

    def rows(self, keys: Sequence[str]) -> np.ndarray:
        """The rows of these model keys (int64 array), new models' for keys without one."""
        found = [self.row_of.get(k, -1) for k in keys]
        new = list(dict.fromkeys(k for k, r in zip(keys, found) if r < 0))
        if new:
            first = len(self.keys)
            self.row_of.update(zip(new, range(first, first + len(new))))
            self.keys += new
            if len(self.keys) > len(self.S):
                self._grow_rows(max(2 * len(self.S), len(self.keys)))
            if not self.shared:
                self.solo += [self.template.copy() for _ in new]
            found = [self.row_of[k] for k in keys]
        return np.array(found, dtype=np.int64)

    # --- one model as a LearnerState ----------------------------------------------------------

    def features_of(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """(feature indices, slots) of row r's features, by index."""
        size = 1 << (64 - int(self.shift[r])) if self.shift[r] else 0
        entries = self.table[self.base[r]:self.base[r] + size]
        entries = np.sort(entries[entries != slot_table.EMPTY])
        return entries >> 32, entries & _LOW

    def state_of(self, r: int) -> LearnerState:
        """Row r's model as a LearnerState of its own (a copy, but for a per-row learner's)."""
        if not self.shared:
            return self.solo[r]
        state = self.template.copy()
        features, at = self.features_of(r)
        own = state.map_features(features)  # (may grow state.V)
        state.V[:, :, own] = self.V[:, :, at]
        state.S[...] = self.S[r]
        state.examples_seen = int(self.examples_seen[r])
        state.cumulative_loss = float(self.cumulative_loss[r])
        return state

    def tables(self, rows: Union[Sequence[int], np.ndarray], names: Sequence[FeatureNames],
               extras: Sequence[Optional[dict[str, Any]]]) -> list[pa.Table]:
        """The Arrow tables ``to_arrow`` makes of these rows' models alone, each with its
        FeatureNames of ``names`` and its extra metadata of ``extras``."""
        return [with_metadata(own.slice(), meta)
                for own, meta in self.checkpoints(rows, names, extras)]

    def checkpoints(self, rows: Union[Sequence[int], np.ndarray], names: Sequence[FeatureNames],
                    extras: Sequence[Optional[dict[str, Any]]]
                    ) -> list[tuple[TableRows, dict[str, Any]]]:
        """[(TableRows, metadata)]: ``tables``, each model's rows of one table built for them
        all (in one pass over the arena's), each metadata a dict beside them (the table's
        schema holds none)."""
        if not self.shared:
            states = list(map(self._named, rows, names))
            return list(zip(_one_table([state_table(s) for s in states]),
                            [{**s.metadata(), **(e or {})} for s, e in zip(states, extras)]))
        rows = np.asarray(rows, dtype=np.int64)
        entries = slot_table.row_entries(self.table, self.base, self.shift, rows)
        features, at = entries >> 32, entries & _LOW  # each row's by feature index
        V = self.V[:, :, at]
        changed = (V != self.initial[:, None, None]).any(axis=0)  # [K, entries]
        cls, j = np.nonzero(changed)
        owner = np.repeat(np.arange(len(rows)), self.n_features[rows])[j]
        order = np.argsort(owner * changed.shape[0] + cls, kind="stable")  # by row, then class
        cls, j, owner = cls[order], j[order], owner[order]
        bounds = np.searchsorted(owner, np.arange(len(rows) + 1))
        idx = features[j]
        table = model_table(self.spec, cls, idx, _names(names, idx, bounds),
                            [V[v][cls, j] for v in range(V.shape[0])])
        t = self.template
        return [(TableRows(table, first, end - first),
                 {**model_metadata(t, self.S[r], int(self.examples_seen[r]),
                                   float(self.cumulative_loss[r])), **(extra or {})})
                for first, end, r, extra in zip(bounds[:-1].tolist(), bounds[1:].tolist(),
                                                rows, extras)]

    def _named(self, r, names):
        state = self.state_of(r)
        state.feature_names = names
        return state

    def put_state(self, r: int, state: LearnerState) -> None:
        """Row r's model becomes ``state`` (one of this learner's settings)."""
        if not self.shared:
            self.solo[r] = state
            return
        if state.n_slots:
            assert state.slot_index is not None
            features = state.slot_index[:state.n_slots]
            at = self._assign(np.full(len(features), r, dtype=np.int64), features)
            self.V[:, :, at] = state.V[:, :, :state.n_slots]
        self.S[r] = state.S
        self.examples_seen[r] = state.examples_seen
        self.cumulative_loss[r] = state.cumulative_loss

    def adopt(self, key: str, state: LearnerState) -> "RowState":
        """Model ``key`` (a LearnerState of this learner's settings, copied in: the caller's
        is never changed) joins, in its row (a returning key's old one, cleared first): its
        ``RowState``."""
        returning = key in self.row_of
        r = self.row(key)
        if returning:
            self.clear_row(r)
        self.put_state(r, state if self.shared else state.copy())
        return RowState(self, r, state.feature_names)

    def clear_row(self, r: int) -> None:
        """Row r's model back to a fresh one's (its slots stay taken, at the initial values)."""
        if not self.shared:
            self.solo[r] = self.template.copy()
            return
        _, at = self.features_of(r)
        self.V[:, :, at] = self.initial[:, None, None]
        if self.shift[r]:
            self.dead += 1 << (64 - int(self.shift[r]))
            self.table[self.base[r]:self.base[r] + (1 << (64 - int(self.shift[r])))] = \
                slot_table.EMPTY
        self.shift[r] = self.n_features[r] = 0
        self.S[r] = 0.0
        self.examples_seen[r], self.cumulative_loss[r] = 0, 0.0

    def same_settings(self, state: LearnerState) -> bool:
        """True when ``state`` is a learner of these models' settings."""
        t = self.template
        return ((state.algorithm, state.loss, state.dim, state.n_classes, state.bias_index,
                 state.hyperparameters) == (t.algorithm, t.loss, t.dim, t.n_classes,
                                            t.bias_index, t.hyperparameters))

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_marks"] = np.zeros(0, dtype=np.uint8)  # (scratch)
        return state

    def counts(self, r: int) -> tuple[int, float]:
        """(examples_seen, cumulative_loss) of row r."""
        if not self.shared:
            return self.solo[r].examples_seen, self.solo[r].cumulative_loss
        return int(self.examples_seen[r]), float(self.cumulative_loss[r])

    # --- learning -----------------------------------------------------------------------------

    def learn(self, rows: np.ndarray, batch: Batch,
              served: Optional[np.ndarray] = None
              ) -> tuple[np.ndarray, BatchResult, list[tuple[int, str]], np.ndarray]:
        """Learn example n of the batch by the model of row rows[n], each model its examples in
        batch order, as ``learn_or_refuse`` would learn each model's examples alone (same
        refusals, predictions, losses, state and counters, bit for bit). Returns (positions
        kept, their BatchResult, refused [(position, reason)], their models' examples_seen after
        each). ``served`` marks examples predicted, not learned (``learn_or_refuse``)."""
        n = len(batch)
        rows = np.asarray(rows, dtype=np.int64)
        served = np.zeros(n, dtype=np.bool_) if served is None else np.asarray(served, np.bool_)
        t = self.template
        refused = check_examples(batch, t.dim, t.n_classes, t.loss, served)
        positions = np.arange(n)
        if refused:
            positions = np.setdiff1d(positions, [p for p, _ in refused])
            batch, rows, served = batch.take(positions), rows[positions], served[positions]
        scores = np.empty((len(batch), t.n_classes))
        losses = np.full(len(batch), np.nan)
        seen = np.zeros(len(batch), dtype=np.int64)
        kept = np.ones(len(batch), dtype=np.bool_)
        if self.shared:
            alone = self._learn_shared(rows, batch, served, scores, losses, seen)
        else:
            alone = unique_first(rows, self._mark(len(self)))
        for r in alone:
            self._learn_alone(r, rows, batch, served, scores, losses, seen, kept, positions,
                              refused)
        return (positions[kept], BatchResult(scores[kept], losses[kept]), sorted(refused),
                seen[kept])

    def _learn_shared(self, rows, batch, served, scores, losses, seen):
        """One ``run_many`` call; returns the rows put back for ``_learn_alone``."""
        at = self._assign(np.repeat(rows, np.diff(batch.indptr)), batch.indices)
        touched = unique_first(at, self._mark(self.n_slots))
        in_block = unique_first(rows, self._mark(len(self)))
        before = (self.V[:, :, touched], self.S[in_block], self.examples_seen[in_block],
                  self.cumulative_loss[in_block])
        unsafe = self._mark(len(self))  # (zero: ``unique_first`` leaves it so; zeroed again)
        t = self.template
        run_many(self.spec.code, self.V, self.M, self.S, self.hp, LOSS_CODES[t.loss], self.tau,
                 rows, batch.indptr, at, batch.values,
                 learner_labels(t, np.where(served, 1.0, batch.labels)), batch.weights, served,
                 scores, losses, seen, self.examples_seen, self.cumulative_loss, unsafe)
        alone = np.flatnonzero(unsafe[:len(self)])
        unsafe[alone] = 0
        for r in alone:  # as it was before the call
            mine = np.flatnonzero(np.repeat(rows == r, np.diff(batch.indptr)))
            where = _positions_in(touched, at[mine])
            self.V[:, :, at[mine]] = before[0][:, :, where]
            j = _positions_in(in_block, np.array([r]))[0]
            self.S[r], self.examples_seen[r], self.cumulative_loss[r] = (
                before[1][j], before[2][j], before[3][j])
        return alone

    def _learn_alone(self, r, rows, batch, served, scores, losses, seen, kept, positions,
                     refused):
        """Row r's examples of the batch by ``learn_or_refuse`` on its model alone."""
        mine = np.flatnonzero(rows == r)
        state = self.state_of(r)
        start = state.examples_seen
        got, result, dropped = learn_or_refuse(state, batch.take(mine), served[mine])
        self.put_state(r, state)
        kept[mine] = False
        kept[mine[got]] = True
        scores[mine[got]], losses[mine[got]] = result.scores, result.losses
        seen[mine[got]] = start + np.cumsum(~served[mine[got]])
        refused += [(int(positions[mine[p]]), reason) for p, reason in dropped]

    # --- the arena ----------------------------------------------------------------------------

    def _assign(self, entry_rows, features):
        """The slots of (row, feature) pairs, giving new pairs slots (growing as needed)."""
        features = np.asarray(features, dtype=np.int64)
        out = np.empty(len(features), dtype=np.int64)
        done = 0
        while True:
            mapped, self.n_slots, self.used, self.dead = slot_table.assign_rows(
                self.table, self.used, self.dead, self.base, self.shift, self.n_features,
                entry_rows[done:], features[done:], out[done:], self.n_slots, self.V.shape[2])
            done += mapped
            if done == len(features):
                return out
            if self.n_slots == self.V.shape[2]:
                self._grow_slots(2 * self.n_slots)
            else:  # (the tables' array: packed, twice larger when that frees too little)
                size = len(self.table)
                if not self.dead or 2 * (self.used - self.dead) > size:
                    size *= 2
                self.table, self.used = slot_table.move_tables(
                    self.table, self.base, self.shift, len(self), size)
                self.dead = 0

    def _grow_slots(self, capacity):
        V = np.empty(self.V.shape[:2] + (capacity,))
        V[:, :, :self.n_slots] = self.V[:, :, :self.n_slots]
        V[:, :, self.n_slots:] = self.initial[:, None, None]
        self.V = V

    def _grow_rows(self, rows):
        for name in ("S", "examples_seen", "cumulative_loss", "base", "shift", "n_features"):
            old = getattr(self, name)
            new = np.zeros((rows,) + old.shape[1:], dtype=old.dtype)
            new[:len(old)] = old
            setattr(self, name, new)

    def _mark(self, size):
        """A zeroed uint8 array of at least ``size`` (``unique_first``'s scratch)."""
        if len(self._marks) < size:
            self._marks = np.zeros(size + size // 2 + 16, dtype=np.uint8)
        return self._marks


def _one_table(tables):
    """[TableRows] of each table's rows in one table of them all (when they share a schema:
    then a checkpoint's columns are converted once for them all)."""
    if len(tables) < 2 or any(not t.schema.equals(tables[0].schema) for t in tables):
        return list(map(TableRows.whole, tables))
    whole = pa.concat_tables(tables).combine_chunks()
    ends = np.cumsum([t.num_rows for t in tables]).tolist()
    return [TableRows(whole, end - t.num_rows, t.num_rows) for end, t in zip(ends, tables)]


def _names(names, idx, bounds):
    """The name column of rows whose model n holds idx[bounds[n]:bounds[n + 1]] and is named
    by names[n] (one lookup per run of models sharing a FeatureNames, as merging lets many)."""
    pieces, start = [], 0
    for n in range(1, len(names) + 1):
        if n == len(names) or names[n] is not names[start]:
            pieces.append(names[start].lookup(idx[bounds[start]:bounds[n]]))
            start = n
    return pa.concat_arrays(pieces) if pieces else pa.array([], pa.string())


def _positions_in(values, wanted):
    """Where each of ``wanted`` is in ``values`` (all there, values distinct)."""
    order = np.argsort(values, kind="stable")
    return order[np.searchsorted(values[order], wanted)]


class RowState:
    """One model of a ``ManyStates``, where a LearnerState is expected: its counters and
    settings, its feature names, and ``alone()``: a LearnerState of its own (a checkpoint's)."""

    def __init__(self, many: ManyStates, row: int, feature_names: FeatureNames) -> None:
        self.many, self.row, self.feature_names = many, row, feature_names

    @property
    def examples_seen(self) -> int:
        return self.many.counts(self.row)[0]

    @property
    def cumulative_loss(self) -> float:
        return self.many.counts(self.row)[1]

    def __getattr__(self, name):  # (the settings every model shares)
        if name in ("algorithm", "loss", "dim", "n_classes", "bias_index", "hyperparameters",
                    "spec"):
            return getattr(self.many.template, name)
        raise AttributeError(name)

    @property
    def nbytes(self) -> int:
        """Bytes of its share of the arrays: its slots, table and row."""
        many = self.many
        if not many.shared:
            return many.solo[self.row].nbytes
        slots = int(many.n_features[self.row])
        return (slots * (many.V.shape[0] * many.V.shape[1] + 2) * 8
                + many.S[self.row].nbytes + 32)

    def name_features(self, names: Mapping[int, str]) -> None:
        """As ``LearnerState.name_features``."""
        self.feature_names = self.feature_names.merged(names)

    def alone(self) -> LearnerState:
        return self.many._named(self.row, self.feature_names)


def learner_state(state: Union[LearnerState, RowState]) -> LearnerState:
    """A LearnerState of its own for a model's ``state`` (a LearnerState, or a RowState)."""
    return state.alone() if isinstance(state, RowState) else state
