"""What the learning step hands out, and when each is made durable: predictions and dead
letters to their sinks, model checkpoints taken and written together, and, serving apart, the
models' published states (docs/design.md, "Delivery and checkpoints")."""
import logging
import math
import time
from typing import Dict, Iterable, List, Optional

from apache_beam.metrics import Metrics
import pyarrow as pa

from ..connectors.sinks import open_sink
from ..models.keyed_model import KeyedModel
from ..models.model_group import ModelGroup
from ..store.group_writer import GroupWriter
from ..store.groups import group_key, published_dir
from ..store.starts import prune_starts, starts_dir
from .config import TrainConfig
from .taken import TakenCheckpoints

log = logging.getLogger("unitless")


class Sinks:
    """A step's two sinks, for predictions and dead letters (``open_sink``), opened on the
    worker. What a bundle wrote and did not flush is discarded when the next begins: the
    runner retries that bundle."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.predictions = open_sink(cfg.predictions, cfg.output_format, "predictions",
                                     cfg.kafka_settings)
        self.dead_letters = open_sink(cfg.dead_letter, "jsonl", "dead letters",
                                      cfg.kafka_settings)

    def __iter__(self):
        return iter((self.predictions, self.dead_letters))

    def discard(self) -> None:
        for sink in self:
            sink.discard()  # what a failed bundle left behind

    def flush(self) -> None:
        for sink in self:
            sink.flush()

    def close(self) -> None:
        for sink in self:
            sink.close()


class Delivery:
    """The learning step's sinks and model files, opened once per worker (``open``).

    Predictions and dead letters are buffered by their sinks and flushed before any
    checkpoint is written (``write_checkpoints``), so that no checkpoint covers an example
    whose prediction could still be lost."""
    FLUSH_ROWS = 1 << 18  # predictions buffered before a part file is written anyway

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.checkpoints = Metrics.counter("unitless", "checkpoints")
        self.publications = Metrics.counter("unitless", "publications")
        self.loss = Metrics.distribution("unitless", "loss_micros")

    def open(self) -> None:
        cfg = self.cfg
        # checkpoints taken, not yet written; about what they hold (``take``)
        self.pending = TakenCheckpoints()
        self.group_files = GroupWriter(cfg.model_dir, cfg.model_groups, cfg.keep_checkpoints)
        # (serving apart: the models' states as the serving step reads them, ``publish``)
        self.publisher = (GroupWriter(published_dir(cfg.model_dir), cfg.model_groups, keep=2)
                          if cfg.serve_apart else None)
        self.sinks = Sinks(cfg)

    def close(self) -> None:
        self.sinks.close()

    def discard(self) -> None:
        self.sinks.discard()

    def flush(self) -> None:
        self.sinks.flush()

    def finish_bundle(self) -> None:
        self.write_checkpoints()
        self.flush()

    def write_predictions(self, table: pa.Table) -> None:
        self.sinks.predictions.write(table)

    def write_dead_letters(self, table: pa.Table) -> None:
        self.sinks.dead_letters.write(table)

    def flush_if_full(self) -> None:
        if self.sinks.predictions.rows >= self.FLUSH_ROWS:
            self.flush()

    def take(self, group: ModelGroup, models: List[KeyedModel], metadata: List[dict],
             news: List[List[str]]) -> None:
        """Take the checkpoints of ``models`` of ``group`` with their ``metadata``, their
        tables made together (``ModelGroup.checkpoints``; ``news``: the partitions each newly
        passed); they are written with the others of the bundle before the bundle ends, or
        sooner when they grow large or the caller writes them (``write_checkpoints``)."""
        taken = group.checkpoints(models, metadata)
        if self.pending.add([(model.key, rows, meta, model.progressive_loss(), passed)
                             for model, (rows, meta), passed in zip(models, taken, news)]):
            self.write_checkpoints()

    def publish(self, group: ModelGroup, keys: Optional[Iterable[str]] = None,
                at_once: bool = False) -> None:
        """Serving apart: publish the state of each of the group's models (of model ``keys``,
        None: all) that learned since it was last published, ``publish_seconds`` ago or more
        (``at_once``: however recently), for the serving step to read (``published_dir``; not
        a checkpoint: no join's share, nothing a resumed run reads)."""
        if self.publisher is None:
            return
        now = time.time()
        models = (group.every_model() if keys is None
                  else [group.models[k] for k in keys if k in group.models])
        due = [m for m in models
               if m.publish_due(0.0 if at_once else self.cfg.publish_seconds, now)]
        if not due:
            return
        taken = group.checkpoints(due, [m.published_metadata(now) for m in due])
        self.publisher.write(self._by_group((model.key, rows, meta)
                                            for model, (rows, meta) in zip(due, taken)))
        self.publications.inc(len(due))

    def write_checkpoints(self) -> Dict[str, str]:
        """Flush every sink, then write the checkpoints taken, all made durable together.
        Returns {model key: locator} of those written (a model whose group holds a newer
        checkpoint is not: ``GroupWriter.write``)."""
        if not self.pending:
            return {}
        self.flush()
        written = self.group_files.write(self._by_group(
            (key, rows, meta) for key, rows, meta, _, _ in self.pending.entries))
        # (where a model's restart position now covers partitions, its start records there
        # are superseded: see KeyByModel)
        for group in {group_key(key, self.cfg.model_groups)
                      for key, *_, news in self.pending.entries if news}:
            prune_starts(starts_dir(self.cfg.model_dir), group, self.group_files.passed(group))
        for key, _, meta, loss, _ in self.pending.entries:
            self.checkpoints.inc()
            if math.isfinite(loss) and abs(loss) < 1e12:
                self.loss.update(int(1e6 * loss))
            log.debug("model %r: checkpoint at %d examples, progressive loss %.6f", key,
                      meta["examples_seen"], loss)
        self.pending.clear()
        return written

    def _by_group(self, entries):
        """{group: [(model key, rows, metadata)]} of such entries."""
        groups = {}
        for entry in entries:
            groups.setdefault(group_key(entry[0], self.cfg.model_groups), []).append(entry)
        return groups
