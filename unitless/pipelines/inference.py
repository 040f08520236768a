"""Beam ML's ``RunInference`` over a unitless model directory: every model key's model, new keys
and newer checkpoints included, as ``Score`` predicts."""
import time
from typing import Any, Optional

import apache_beam as beam
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from ..parse.jsonl import parse_records
from ..parse.records import string_array
from ..store.catalog import model_directory_of
from .config import REFRESH_SECONDS, configure
from .score import check_model_dir, score_with
from .scoring_models import MODEL_REFRESHES, ScoringModels

RESULT_FIELDS = ("prediction", "probability", "checkpoint_id")
PREDICTIONS = beam.metrics.Metrics.counter("unitless", "predictions")
REFUSED = beam.metrics.Metrics.counter("unitless", "refused")
CHECKPOINT_AGE = beam.metrics.Metrics.distribution("unitless", "checkpoint_age_seconds")


class ModelDirectoryHandler(ModelHandler):
    """Elements (model key, record) -> (model key, ``PredictionResult(record, inference,
    model_id)``), as Beam's ``KeyedModelHandler`` gives them: the record as ``Learn`` and
    ``Score`` take the user's own (a dict or ``beam.Row``; reading options as for them,
    ``label_column``, ``bits``, ...), its model key given beside it. ``inference``:
    {"prediction", "probability", "checkpoint_id", "refused"}, the prediction ``Score`` makes
    (``predict_next`` from the key's latest checkpoint, ``ScoringModels``: read when the key is
    first scored, looked for again every ``refresh_seconds``, at most ``models_in_memory``
    kept); ``model_id`` the checkpoint it came from (a part's locator or a file). A record
    that cannot be read, that scoring refuses as training would (a feature value that is not
    finite, a label that is not the model's, a prediction that is not finite), or whose key has
    no model, has ``refused`` (the reason), null fields and ``model_id`` None.

    ``min_batch_size``, ``max_batch_size`` and ``max_batch_duration_secs`` go to Beam's
    ``BatchElements``, as for any ``ModelHandler``. The model is the whole directory; the
    model-update side input (``ModelMetadata.model_id``, e.g. from ``WatchFilePattern`` over
    ``<dir>/groups/*/*/manifest-*.json``) may name another, or any file or directory under
    one. Metrics (namespace ``unitless``): ``predictions``, ``refused``, ``model_refreshes``
    (a newer checkpoint taken up, or another directory) and ``checkpoint_age_seconds`` (a
    distribution: the age of the checkpoint each prediction used)."""

    def __init__(self, model_dir: str, refresh_seconds: float = REFRESH_SECONDS, *,
                 min_batch_size: Optional[int] = None, max_batch_size: Optional[int] = None,
                 max_batch_duration_secs: Optional[int] = None, **options: Any):
        super().__init__(min_batch_size=min_batch_size, max_batch_size=max_batch_size,
                         max_batch_duration_secs=max_batch_duration_secs)
        cfg = configure(scoring=True, dead_letter=None, **options)
        self.spec, self.models_in_memory = cfg.spec, cfg.models_in_memory
        self.model_dir, self.refresh_seconds = model_directory_of(model_dir), refresh_seconds
        check_model_dir(self.model_dir)  # fails fast, at graph construction
        # the directory of the last model loaded (on a worker)
        self.loaded_dir: Optional[str] = None

    def load_model(self) -> ScoringModels:
        """The directory's models, none read yet (each when its key is first scored)."""
        if self.loaded_dir is not None and self.loaded_dir != self.model_dir:
            MODEL_REFRESHES.inc()
        self.loaded_dir = self.model_dir
        return ScoringModels(self.model_dir, self.refresh_seconds, self.models_in_memory)

    def update_model_path(self, model_path: Optional[str] = None):
        if model_path:
            self.model_dir = model_directory_of(model_path)

    def run_inference(self, batch, model, inference_args=None):
        inferences, used = [None] * len(batch), [None] * len(batch)
        block, dead = parse_records(self.spec, None, [(i, r) for i, (_, r) in enumerate(batch)])
        for letter in dead:
            inferences[letter.position] = _refused(letter.reason)
        block.keys = string_array([str(batch[i][0]) for i in block.positions.tolist()])
        for key, piece in block.split_by_key():
            found = model.get(key)
            table, refused = score_with(found, key, piece)
            for letter in refused:
                inferences[letter.position] = _refused(letter.reason)
            if table is not None:
                positions = table.column("position").to_pylist()
                for position, row in zip(positions, table.select(RESULT_FIELDS).to_pylist()):
                    inferences[position] = {**row, "refused": None}
                    used[position] = found.checkpoint
                _count_age(found, table.num_rows)
        scored = sum(u is not None for u in used)
        PREDICTIONS.inc(scored)
        REFUSED.inc(len(batch) - scored)
        return [(key, PredictionResult(record, inference, checkpoint))
                for (key, record), inference, checkpoint in zip(batch, inferences, used)]

    def get_metrics_namespace(self):
        return "unitless"


def _count_age(found, predictions):
    """The age of the checkpoint used, once per prediction made with it (a checkpoint that
    does not say when it was taken, as a sharded model's, is not counted)."""
    if found.written is not None:
        age = max(0, int(time.time() - found.written))
        for _ in range(predictions):
            CHECKPOINT_AGE.update(age)


def _refused(reason):
    return {**dict.fromkeys(RESULT_FIELDS), "refused": reason}
