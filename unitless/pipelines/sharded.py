"""One model over feature shards in a Beam pipeline (``--shards S``, ``--max-delay τ``): each
model's state split over S keys (model key, shard), which a runner spreads over its workers.

The learner's three parts (``learner/sharded.py``) run in three places: the sequencer
(``InOrder(CutRounds)``, rounds.py, keyed by model) orders a model's examples and cuts them
into rounds of τ + 1; ``ShardDoFn`` (keyed by (model, shard)) computes its part of each
round's ŷ, sends it through the feedback topic (``io.partitions.ReadFeedback`` brings the parts
back: a Beam graph has no cycles), combines the S parts and applies the gradient to its
features; ``FinishDoFn`` ends the feedback reader once a bounded input's last rounds are
learned. How rounds are taken exactly once, checkpointed as a consistent cut and resumed:
docs/design.md, "In the pipeline: --shards". Needs a streaming runner (Prism, Flink).
"""
import logging
import pickle
import threading
import typing
import uuid
from dataclasses import dataclass, field
from typing import Optional, Tuple

import apache_beam as beam
import numpy as np
import pyarrow.compute as pc
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms.userstate import (BagStateSpec, ReadModifyWriteStateSpec,
                                              SetStateSpec)

from .. import pickles
from ..connectors.feedback import PartMessage, encode_end, encode_part
from ..connectors.kafka import UNBOUNDED, KafkaTopic
from ..connectors.kafka_clients import open_producer, partition_offsets
from ..connectors.sinks import open_sink
from ..connectors.storage import unique_token
from ..learner import Batch, LearnerState, from_arrow, read_metadata, to_arrow
from ..learner.names import FeatureNames
from ..learner.online import count_learned
from ..learner.sharded import Part, combine, predict_part, update_part
from ..models.predictions import prediction_table, seen_after
from ..runtime.beam_patches import weigh_state_without_scanning_modules
from ..runtime.bundles import KeyGuard, new_step, send_elements_within
from ..store.per_key import write_checkpoints
from ..store.shards import load_shard, shard_dir
from ..store.starts import starts_dir
from .accounting import ACCOUNTS
from .config import TrainConfig, new_learner
from .decoded import DecodedModels
from .io.partitions import ReadFeedback
from .keying import key_by_model
from .ordering import InOrder
from .rounds import MODELS, CutRounds, End, Round, resume_cuts

log = logging.getLogger("unitless")
DONE = "done"  # output tag: models learned (shard 0)
ShardElement = typing.Tuple[typing.Tuple[str, int], typing.Any]


@dataclass
class _Shard:
    """A shard's learner state and its place in the model's rounds.

    In Beam state: the learner state as of its last compaction (BASE) and each applied round's
    change to it since (DELTAS: a round touches only its examples' features, a sliver of a
    2^24 model); the rounds and parts not yet applied (ROUNDS, PARTS; the round in flight
    stays in ROUNDS, and decoding predicts it again: the same bits, the same changes to the
    state); the rest pickled (PROGRESS), under a new ``token`` at every change. A worker keeps
    the shards it decoded, all of that in memory, and uses one again only while its token is
    still the one in Beam state (a retried bundle's changes are not): an element then reads
    and writes only what it changes."""
    state: object = None        # LearnerState of the shard's features
    next_round: int = 0         # rounds before it applied
    rounds: Optional[int] = None          # the model's number of rounds, once its input has ended
    finished: bool = False
    positions: dict = field(default_factory=dict)  # source -> last position applied
    errors: float = 0.0         # shard 0, classification: examples whose class was wrong
    logged_slots: int = 0       # the state's slots BASE and DELTAS hold
    delta_bytes: int = 0        # bytes of DELTAS
    base_bytes: int = 0         # bytes of BASE
    flying: int = -1            # the round in flight (its part sent, not yet applied), or -1
    token: Optional[str] = None
    # in memory only (in Beam state as ROUNDS, PARTS and BASE + DELTAS):
    in_flight: Optional[tuple] = None     # (Round, Part) of the round in flight
    waiting: Optional[dict] = None        # round number -> its ROUNDS entry, not yet predicted
    parts: Optional[dict] = None          # (round, shard) -> PartMessage, not yet used

    MEMORY = ("state", "in_flight", "waiting", "parts")

    def __getstate__(self):
        return {k: (None if k in self.MEMORY else v) for k, v in self.__dict__.items()}

    def progress_bytes(self):
        """The shard without what it keeps in memory only, pickled, under a new token."""
        self.token = unique_token()
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)


def state_delta(shard: _Shard, batch: Batch, names: FeatureNames) -> bytes:
    """What applying a round changed in the shard's learner state: the features given slots
    since the last delta (in slot order), the round's features' vectors, the scalars and
    counters, and its feature names."""
    state = typing.cast(LearnerState, shard.state)
    assert state.slot_index is not None
    touched = np.unique(state.find_features(batch.indices))
    new = state.slot_index[shard.logged_slots:state.n_slots].copy()
    shard.logged_slots = state.n_slots
    return pickle.dumps((new, touched, state.V[:, :, touched].copy(), state.S.copy(),
                         state.examples_seen, state.cumulative_loss, names),
                        protocol=pickle.HIGHEST_PROTOCOL)


def apply_delta(state: LearnerState, data: bytes) -> None:
    """``state_delta``'s change made to the state it was taken after (the same slots: new
    features are given theirs in the same order)."""
    new, touched, values, S, examples_seen, cumulative_loss, names = pickles.loads(data)
    if len(new):
        state.map_features(new)
    state.V[:, :, touched] = values
    state.S[...] = S
    state.examples_seen, state.cumulative_loss = examples_seen, cumulative_loss
    state.name_features(names)


class _SharedShards:
    """The decoded shards (``DecodedModels``) of one step in this worker process, shared by
    all its DoFn instances: the SDK runs concurrent bundles on instances of their own, and a
    runner may give a key's next bundle to another (Prism does, once a round's parts come in
    bundles of their own): a cache per instance then decoded the shard again from Beam state,
    its whole learner state and every delta since, every round. Each
    key is in one bundle at a time (``KeyGuard``), and a kept shard is used only while its
    token is still Beam state's, whichever instance kept it."""
    _lock = threading.Lock()
    _steps: dict = {}  # step -> [_SharedShards, DoFn instances set up]

    def __init__(self, count, mib):
        self.models, self.lock = DecodedModels(count, mib), threading.Lock()

    @classmethod
    def open(cls, step, count, mib):
        with cls._lock:
            entry = cls._steps.setdefault(step, [None, 0])
            if entry[0] is None:
                entry[0] = cls(count, mib)
            entry[1] += 1
            return entry[0]

    @classmethod
    def close(cls, step):
        """One instance of the step torn down; the last drops the shards."""
        with cls._lock:
            entry = cls._steps.get(step)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del cls._steps[step]

    def pop(self, key):
        with self.lock:
            return self.models.pop(key)

    def keep(self, key, shard, nbytes):
        with self.lock:
            self.models.keep(key, shard, nbytes)


class ShardDoFn(beam.DoFn):
    """((model key, shard), Round | End | PartMessage) -> predictions (shard 0), and the
    model key to ``DONE`` when shard 0 has learned the model's last round; see the module."""
    PROGRESS = ReadModifyWriteStateSpec("progress", BytesCoder())  # _Shard.progress_bytes
    BASE = ReadModifyWriteStateSpec("base", BytesCoder())   # pickled LearnerState
    DELTAS = BagStateSpec("deltas", BytesCoder())           # state_delta of each round since
    ROUNDS = BagStateSpec("rounds", BytesCoder())           # round number + pickled Round
    PARTS = BagStateSpec("parts", BytesCoder())             # pickled PartMessages not yet used

    def __init__(self, cfg, run, cuts=None):
        self.cfg, self.run, self.cuts = cfg, run, cuts or {}
        self.step = new_step()
        self.examples = Metrics.counter("unitless", "examples")
        self.checkpoints = Metrics.counter("unitless", "checkpoints")
        self.rounds_learned = Metrics.counter("unitless", "shard_rounds")
        self.decoded = Metrics.counter("unitless", "models_decoded")

    def setup(self):
        weigh_state_without_scanning_modules()
        self.keys = KeyGuard(self.step)
        self.topic = KafkaTopic.parse(self.cfg.feedback_topic, self.cfg.kafka_settings)
        # parts go at once (no linger), and the bundle ends once the broker has them all
        self.producer = open_producer(self.topic, linger_ms=0)
        self.sink = open_sink(self.cfg.predictions, self.cfg.output_format, "predictions",
                              self.cfg.kafka_settings)
        self.kept = _SharedShards.open(self.step, self.cfg.models_in_memory,
                                       self.cfg.model_memory_mib)

    def teardown(self):
        self.keys.release()
        _SharedShards.close(self.step)
        self.producer.close()
        self.sink.close()

    def start_bundle(self):
        self.sink.discard()

    def finish_bundle(self):
        # the parts sent are durable before this bundle's state is: a shard whose state says
        # a round is in flight has sent its part (decoding it sends none again)
        self.producer.flush()
        self.sink.flush()
        self.keys.release()

    def process(self, element, progress=beam.DoFn.StateParam(PROGRESS),
                base=beam.DoFn.StateParam(BASE), deltas=beam.DoFn.StateParam(DELTAS),
                rounds=beam.DoFn.StateParam(ROUNDS), parts=beam.DoFn.StateParam(PARTS)):
        (key, s), message = element
        self.keys.hold((key, s))
        shard = self._load(key, s, progress, base, deltas, rounds, parts)
        if isinstance(message, End):
            shard.rounds = message.rounds
        elif isinstance(message, Round):
            if (message.round < shard.next_round or message.round in shard.waiting
                    or message.round == shard.flying):
                return self._keep((key, s), shard)  # delivered again
            data = message.round.to_bytes(8, "little") + pickle.dumps(
                message, protocol=pickle.HIGHEST_PROTOCOL)
            shard.waiting[message.round] = data
            rounds.add(data)
        elif isinstance(message, PartMessage):
            if (message.round < shard.next_round
                    or (message.round, message.shard) in shard.parts):
                return self._keep((key, s), shard)  # delivered again, or sent again by a retry
            shard.parts[message.round, message.shard] = message
            parts.add(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        first = shard.next_round
        yield from self._advance(key, s, shard, base, deltas)
        if shard.next_round != first:  # rounds applied: drop what they used
            if not shard.waiting and shard.in_flight is None:
                rounds.clear()  # (all learned; learned rounds stay till then, read by a decode
                # only: rewriting the rest at each round would write the input over and over)
            parts.clear()
            for p in shard.parts.values():
                parts.add(pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL))
        progress.write(shard.progress_bytes())
        self._keep((key, s), shard)

    def _load(self, key, s, progress, base, deltas, rounds, parts):
        """The shard as Beam state holds it: the one this worker kept when its token is still
        Beam state's, else decoded; a new one is stored whole."""
        data = progress.read()
        kept = self.kept.pop((key, s))  # (kept again once this element is done)
        if data is None:
            shard = self._new_shard(key, s)
            shard.waiting, shard.parts = {}, {}
            self._compact(shard, base, deltas)
            progress.write(shard.progress_bytes())
            return shard
        shard = pickles.loads(data)
        if kept is not None and kept.token == shard.token:
            return kept
        shard.state = pickles.loads(base.read())
        for delta in deltas.read():
            apply_delta(shard.state, delta)
        shard.waiting = {r: entry for r, entry in ((int.from_bytes(entry[:8], "little"), entry)
                                                   for entry in rounds.read())
                         if r >= shard.next_round}
        if shard.flying >= 0:
            # predicted again: the same part (sent already), the same changes to the state
            # (its features' slots; NAG's rescaling)
            r = pickles.loads(shard.waiting.pop(shard.flying)[8:])
            shard.in_flight = (r, predict_part(shard.state, r.batch))
        shard.parts = {(p.round, p.shard): p for p in map(pickles.loads, parts.read())
                       if p.round >= shard.next_round}
        self.decoded.inc()
        return shard

    def _compact(self, shard, base, deltas):
        """Store the shard's whole learner state as BASE, without deltas: only between rounds
        (no prediction in flight, whose changes a decode makes again)."""
        data = pickle.dumps(shard.state, protocol=pickle.HIGHEST_PROTOCOL)
        base.write(data)
        deltas.clear()
        shard.base_bytes, shard.delta_bytes = len(data), 0
        shard.logged_slots = shard.state.n_slots

    def _keep(self, key, shard):
        self.kept.keep(key, shard, shard.state.nbytes)

    def _new_shard(self, key, s):
        """Shard s of the model: its checkpoint of the model's cut when resumed, else fresh."""
        cut = self.cuts.get(key)
        if cut is None or not cut.examples:
            return _Shard(new_learner(self.cfg), cut.rounds if cut else 0)
        path, table = load_shard(self.cfg.model_dir, key, s, self.cfg.shards, cut.examples)
        log.debug("model %r shard %d resumes from %s", key, s, path)
        state = from_arrow(table)
        if self.cfg.allow_hyperparameter_change:
            state.hyperparameters = new_learner(self.cfg).hyperparameters
        return _Shard(state, cut.rounds, positions=dict(cut.positions),
                      errors=float(read_metadata(table).get("errors", 0.0)))

    def _advance(self, key, s, shard, base, deltas):
        """Predict and apply every round that can be now, in order; returns the number of parts
        sent to the feedback topic."""
        sent = 0
        while True:
            if shard.in_flight is None:
                data = shard.waiting.pop(shard.next_round, None)
                if data is None:
                    break
                r = pickles.loads(data[8:])
                part = predict_part(shard.state, r.batch)
                self.producer.send(*encode_part(self.run, key, r.round, s, part.scores,
                                                part.scalars))
                sent += 1
                shard.in_flight, shard.flying = (r, part), r.round
                continue
            r, part = shard.in_flight
            got = [part if t == s else shard.parts.get((r.round, t))
                   for t in range(self.cfg.shards)]
            if any(p is None for p in got):
                break
            result, gradients, scalars = combine(
                shard.state, [Part(p.scores, p.scalars, None) for p in got], r.batch.labels,
                r.batch.weights)
            update_part(shard.state, r.batch, part, gradients, scalars)
            start = shard.state.examples_seen
            count_learned(shard.state, result.losses)
            shard.state.name_features(r.names)
            delta = state_delta(shard, r.batch, r.names)
            if shard.delta_bytes + len(delta) > 4 * shard.base_bytes:  # O(1) a round
                self._compact(shard, base, deltas)  # (before the next round's prediction)
            else:
                deltas.add(delta)
                shard.delta_bytes += len(delta)
            for t in range(self.cfg.shards):
                shard.parts.pop((r.round, t), None)
            shard.in_flight, shard.flying = None, -1
            shard.next_round += 1
            shard.positions = r.positions
            self.rounds_learned.inc()
            if s == 0:
                m = r.meta
                table = prediction_table(key, shard.state, m.ids, r.batch.labels, result,
                                         seen_after(start, r.batch.labels), m.sources,
                                         m.positions, None, m.event_times)
                self.examples.inc(table.num_rows)
                error = table.column("error")
                if error.null_count == 0:
                    shard.errors += float(pc.sum(error).as_py() or 0.0)
                self.sink.write(table)
                yield table
            if r.checkpoint:
                self._checkpoint(key, s, shard)
        if shard.rounds is not None and shard.next_round == shard.rounds and not shard.finished:
            shard.finished = True
            self._checkpoint(key, s, shard)
            if s == 0:
                yield beam.pvalue.TaggedOutput(DONE, key)
        return sent

    def _checkpoint(self, key, s, shard):
        """The shard's checkpoint, after the predictions written so far are durable."""
        self.sink.flush()
        cfg = self.cfg
        table = to_arrow(shard.state, {"model_key": key, "shard": s, "shards": cfg.shards,
                                       "max_delay": cfg.max_delay, "rounds": shard.next_round,
                                       "input_positions": shard.positions,
                                       "errors": shard.errors})
        write_checkpoints(shard_dir(cfg.model_dir, s, cfg.shards),
                          [(key, table, shard.state.examples_seen)], cfg.keep_checkpoints)
        self.checkpoints.inc()


class FinishDoFn(beam.DoFn):
    """("", ("models", n) | ("done", model key)) -> the end marker on every partition of the
    feedback topic, once as many models are done as the input had."""
    TOTAL = ReadModifyWriteStateSpec("total", PickleCoder())
    DONE_KEYS = SetStateSpec("done", beam.coders.StrUtf8Coder())
    ENDED = ReadModifyWriteStateSpec("ended", PickleCoder())

    def __init__(self, cfg, run):
        self.cfg, self.run = cfg, run

    def process(self, element, total=beam.DoFn.StateParam(TOTAL),
                done=beam.DoFn.StateParam(DONE_KEYS), ended=beam.DoFn.StateParam(ENDED)):
        kind, value = element[1]
        if kind == "models":
            total.write(value)
        else:
            done.add(value)
        n = total.read()
        if n is not None and not ended.read() and len(list(done.read())) >= n:
            ended.write(True)
            topic = KafkaTopic.parse(self.cfg.feedback_topic, self.cfg.kafka_settings)
            producer = open_producer(topic)
            try:
                for partition in producer.partitions():
                    producer.send(*encode_end(self.run), partition=partition)
                producer.flush()
            finally:
                producer.close()
            log.info("every model learned its last round: the feedback loop ends")


def learn_over_shards(blocks: beam.PCollection, cfg: TrainConfig
                      ) -> Tuple[beam.PCollection, beam.PCollection]:
    """ExampleBlocks -> (predictions, the Tallies of examples replayed), every model learned
    over ``cfg.shards`` feature shards (see the module; ``Learn`` with ``shards``). The
    pipeline must be streaming."""
    cuts = resume_cuts(cfg) if cfg.resume else {}
    if not blocks.pipeline.options.view_as(StandardOptions).streaming:
        raise ValueError("--shards runs a feedback loop through Kafka, which needs a streaming "
                         "runner: add --runner PrismRunner --streaming (or a Flink runner with "
                         "--streaming)")
    send_elements_within(blocks.pipeline)  # (a round waits for its parts)
    run = uuid.uuid4().hex
    topic = KafkaTopic.parse(typing.cast(str, cfg.feedback_topic), cfg.kafka_settings)
    # read from the end as it is now: nothing of this run is there yet
    ranges = [(p, end, UNBOUNDED) for p, (_, end) in sorted(partition_offsets(topic).items())]
    covered = [(key, source) for key, cut in cuts.items() for source in cut.positions]
    rounds = (blocks | "Key by model" >> key_by_model(
                  cfg.chunk_size, starts=starts_dir(cfg.model_dir, sharded=True), covered=covered)
              | "Sequence" >> beam.ParDo(InOrder(CutRounds(cfg, cuts))).with_outputs(
                  MODELS, ACCOUNTS, main="rounds"))
    feedback = (blocks.pipeline | "Feedback partitions" >> beam.Create(ranges)
                | "Read feedback" >> beam.ParDo(ReadFeedback(topic, run, cfg.shards))
                .with_output_types(ShardElement))
    learned = ((rounds.rounds | "Rounds" >> beam.Map(lambda e: e).with_output_types(ShardElement),
                feedback) | "To shards" >> beam.Flatten()
               | "Learn shards" >> beam.ParDo(ShardDoFn(cfg, run, cuts)).with_outputs(
                   DONE, main="predictions"))
    if blocks.is_bounded:  # (a Kafka topic read streaming has no end, nor has this run)
        models = (rounds[MODELS] | "Count models" >> beam.combiners.Count.Globally()
                  | "As total" >> beam.Map(lambda n: ("", ("models", n))))
        done = learned[DONE] | "As done" >> beam.Map(lambda k: ("", ("done", k)))
        _ = ((models, done) | "Models and done" >> beam.Flatten()
             | "Finish" >> beam.ParDo(FinishDoFn(cfg, run)))
    return learned.predictions, rounds[ACCOUNTS]
