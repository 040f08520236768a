"""Serving apart from learning: each example without a label answered at once, in the bundle that
reads it, by the newest state of its model that the learning step published (in the model
directory), never waiting for the join, learning, checkpoints or the watermark. The
example then goes on to the learning step carrying the scores it was served with
(``ExampleBlock.served_scores``), so the learning step never predicts on the serving step's
behalf: ``served_loss`` is the loss of the prediction actually served. Why published states
are read from the model directory: docs/design.md, "Serving apart from learning"."""
import time
from dataclasses import replace
from typing import Any, Dict, Optional, Set, Tuple, cast

import apache_beam as beam
from apache_beam.metrics import Metrics
import numpy as np

from ..connectors.kafka import is_kafka
from ..labels.reasons import AHEAD_OF_CLOCK, dated_ahead
from ..learner import BatchResult, LearnerState
from ..models.predictions import prediction_table
from ..parse.records import ExampleBlock, dead_letter_table
from ..store.groups import published_dir
from .config import TrainConfig, configure, learner_check, new_learner
from .delivery import Sinks
from .io.dead_letters import DEAD
from .io.sources import as_blocks
from .scoring_models import Scoring, ScoringModels, scored

SERVED = "served"  # the tag of the serving step's predictions


def poll_seconds(publish_seconds: float) -> float:
    """How often a serving worker looks for a newer published state of a model whose examples
    come: a quarter of the publication interval (at least 50 ms), so that the state it serves
    with was the newest about a quarter interval ago."""
    return max(0.05, publish_seconds / 4)


class PublishedModels:
    """Each model key's newest state (``ScoringModels``, read when the key's first example
    comes, looked for again every ``poll`` seconds while they come, at most ``capacity`` kept):
    the newer of what the learning step published (``store.groups.published_dir``) and its
    newest checkpoint (a resumed run's model before its first publication, or a directory
    trained without serving apart); the learner ``fresh`` for a key with neither. Once a key's
    published state is as new as its checkpoints, its checkpoints are no longer looked for:
    the learning step publishes each model it checkpoints (``LearnBlocks._checkpoint``), and
    a checkpoint with ``--labels`` holds the join's share (the ids it closed over two waits),
    costly to read again at each checkpoint (docs/delayed-outcomes.md, "CPU on a stream").
    The states are shared as they are: serving writes nothing to them."""
    overtaken: Set[str]

    def __init__(self, model_dir: str, fresh: LearnerState, poll: float, capacity: int) -> None:
        self.published = ScoringModels(published_dir(model_dir), poll, capacity)
        self.checkpoints = ScoringModels(model_dir, poll, capacity)
        self.fresh, self.capacity = fresh, capacity
        self.overtaken = set()  # keys whose published state has caught up with their checkpoints

    def get(self, key: str) -> Tuple[LearnerState, Optional[str], Optional[float]]:
        """(learner state, its checkpoint id or None, when it was published (epoch s) or
        None): a fresh model's ids and time are None."""
        published = self.published.get(key)
        found: Optional[Scoring]
        if key in self.overtaken and published is not None:
            found = published
        else:
            self.overtaken.discard(key)
            checkpoint = self.checkpoints.get(key)
            found = max((f for f in (published, checkpoint) if f),
                        key=lambda f: f.state.examples_seen, default=None)
            if published is not None and found is published:
                self._overtaken(key)
        if found is None:
            return self.fresh, None, None
        return found.state, found.checkpoint_id, found.written

    def _overtaken(self, key):
        if len(self.overtaken) >= 2 * self.capacity:  # (keys whose models left the cache)
            self.overtaken.intersection_update(self.published.models)
        self.overtaken.add(key)
        self.checkpoints.drop(key)  # (read again should its publications fail)


class ServeBlocks(beam.DoFn):
    """ExampleBlock -> the block (main output) without the records refused here, each example
    served here carrying its scores (``served_scores``; NaN for those not served: with a label,
    or served before a resume, ``through``), and the served examples' predictions (``SERVED``:
    prediction rows with ``model_age_seconds`` and ``stale``) and dead letters (``DEAD``).
    A labels block (``cfg.is_labels``) goes on as it is.

    With ``write``, the predictions and dead letters are also written to ``cfg.predictions``
    and ``cfg.dead_letter``, durable before the block is handed on, so no example reaches the
    learning step (whose checkpoints then cover it) before its prediction is delivered.

    Refused here, as the learning step would: what the model's learner refuses
    (``scoring_models.scored``), a prediction that is not finite, and (with a wait) a record
    dated past ``--max-time-skew`` after the worker's clock."""

    def __init__(self, cfg: TrainConfig, through: Optional[dict] = None, write: bool = True):
        self.cfg, self.through, self.write = cfg, through or {}, write
        self.served = Metrics.counter("unitless", "served_examples")
        self.stale = Metrics.counter("unitless", "stale_predictions")
        self.bad = Metrics.counter("unitless", "bad_records")
        self.age = Metrics.distribution("unitless", "model_age_ms")
        self.latency = Metrics.distribution("unitless", "served_latency_ms")
        # a record's time is its Kafka timestamp unless --time-column names a field of its own
        self.timed_by_broker = bool(cfg.inputs) and is_kafka(str(cast(list, cfg.inputs)[0])) and (
            cfg.spec.time is None)

    def setup(self):
        cfg = self.cfg
        self.models = PublishedModels(cfg.model_dir, new_learner(cfg),
                                      poll_seconds(cfg.publish_seconds), cfg.models_in_memory)
        self.sinks = Sinks(cfg) if self.write else None

    def start_bundle(self):
        if self.sinks:
            self.sinks.discard()  # (each block is flushed: ``process``)

    def teardown(self):
        if getattr(self, "sinks", None):
            self.sinks.close()

    def process(self, block):
        if block.source is not None and self.cfg.is_labels(block.source):
            yield block
            return
        now = time.time()
        scores = np.full((len(block), self.cfg.n_classes), np.nan)
        rows = self._to_serve(block)
        ahead = set(dated_ahead(block, now, self.cfg.max_time_skew)) & set(rows.tolist())
        problems = [(r, AHEAD_OF_CLOCK) for r in sorted(ahead)]
        rows = rows[~np.isin(rows, list(ahead))]
        tables = []
        for key, at in _by_key(block, rows):
            table, refused = self._serve(key, block, at, scores, now)
            problems += refused
            if table is not None:
                tables.append(table)
        kept, dead = block.screen(sorted(problems))
        kept = replace(kept, served_scores=np.delete(scores, [r for r, _ in problems], axis=0))
        if dead:
            self.bad.inc(len(dead))
            dead = dead_letter_table(dead)
        if self.sinks:
            # durable before the block goes on: a runner may hand it to the learning step,
            # whose checkpoint then covers it, before this bundle ends (Flink)
            for table in tables:
                self.sinks.predictions.write(table)
            if dead:
                self.sinks.dead_letters.write(dead)
            self.sinks.flush()
        yield kept
        if dead:
            yield beam.pvalue.TaggedOutput(DEAD, dead)
        for table in tables:
            yield beam.pvalue.TaggedOutput(SERVED, table)

    def _to_serve(self, block):
        """The rows of the block's examples without a label, but those its model's checkpoint
        says were served (or learned) before a resume (``through``)."""
        rows = np.flatnonzero(block.served)
        if not self.through or not len(rows):
            return rows
        keys = block.keys.take(rows).to_pylist()
        done = np.array([self.through.get((k, block.source), -1) for k in keys], dtype=np.int64)
        return rows[block.positions[rows] > done]

    def _serve(self, key, block, at, scores, now):
        """Serve the block's rows ``at`` (all of model ``key``) by its newest published state:
        their scores written into ``scores``; returns (prediction table or None, [(row,
        reason)] refused)."""
        state, checkpoint_id, published = self.models.get(key)
        piece, served, _, refused = scored(state, block.take(at))
        row_of = dict(zip(block.positions[at].tolist(), at.tolist())) if refused else {}
        problems = [(row_of[d.position], d.reason) for d in refused]
        if not len(piece):
            return None, problems
        n = len(piece)
        scores[at[np.isin(block.positions[at], piece.positions)]] = served  # (kept in order)
        age = np.full(n, np.nan if published is None else max(0.0, now - published))
        stale = age > self.cfg.max_staleness  # (NaN: not published yet, not stale)
        self.served.inc(n)
        self.stale.inc(int(stale.sum()))
        if published is not None:
            for _ in range(n):
                self.age.update(int(age[0] * 1000))
        if self.timed_by_broker and piece.event_times is not None:
            for waited in (time.time() - piece.event_times) * 1000:
                self.latency.update(max(0, int(waited)))
        return prediction_table(
            key, state, piece.ids, piece.labels, BatchResult(served, np.full(n, np.nan)),
            np.full(n, state.examples_seen), block.source, piece.positions, checkpoint_id,
            piece.event_times, None, age, stale), problems


def _by_key(block, rows):
    """(model key, the rows of ``rows`` holding its examples, in order) for each model key of
    the block's rows ``rows``."""
    if not len(rows):
        return []
    encoded = block.keys.take(rows).dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(encoded.dictionary) + 1))
    return [(key, rows[order[bounds[c]:bounds[c + 1]]])
            for c, key in enumerate(encoded.dictionary.to_pylist())]


class Serve(beam.PTransform):
    """ExampleBlocks (from ``ReadExamples``) or the user's own records (as for ``Learn``) ->
    a PCollection of predictions (Arrow tables, ``unitless.prediction/4``, ``served`` true):
    each example without a label predicted at once by the newest state of its model key that
    a training run published in ``model_dir`` (its checkpoints; a key not published yet by a
    fresh model of the options' learner), naming the state's version (``examples_seen``,
    ``checkpoint_id``) and age (``model_age_seconds``; ``stale`` past ``max_staleness``).
    Learns nothing and writes nothing (pass the predictions to your own sink, e.g.
    ``WritePredictions``); ``transform.dead_letters`` once it is applied. Options as for
    ``Learn`` (``model_dir``, ``algorithm``, ``publish_seconds``, reading options ...).

    ``Learn`` with ``--labels`` (or ``serve_apart``) serves through this step itself; this
    transform is for serving from the model directory of a run learning elsewhere."""

    def __init__(self, config: Optional[TrainConfig] = None, **options: Any):
        super().__init__()
        self.cfg = config if config is not None else configure(**options)
        self.dead_letters = None

    def expand(self, examples):
        cfg = self.cfg
        blocks, parse_dead = as_blocks(examples, cfg.spec, cfg.chunk_size, learner_check(cfg),
                                       None)
        served = blocks | "Serve" >> serve_step(cfg, write=False)
        self.dead_letters = served[DEAD] if parse_dead is None else (
            (parse_dead, served[DEAD]) | "Dead letters" >> beam.Flatten())
        return served[SERVED]


def serve_step(cfg: TrainConfig, through: Optional[Dict[Tuple[str, str], int]] = None,
               write: bool = True) -> beam.PTransform:
    """The serving step (``ServeBlocks``) as a ParDo: outputs ``blocks`` (for learning),
    ``SERVED`` and ``DEAD``."""
    return beam.ParDo(ServeBlocks(cfg, through, write)).with_output_types(
        ExampleBlock).with_outputs(SERVED, DEAD, main="blocks")
