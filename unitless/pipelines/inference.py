"""Beam ML's ``RunInference`` over a unitless model directory: every model key's model, new keys
and newer checkpoints included, as ``Score`` predicts."""
from typing import Any

from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from ..connectors.formats import parse_records
from ..connectors.records import string_array
from .config import REFRESH_SECONDS, configure
from .score import ScoringModels, score_block

RESULT_FIELDS = ("prediction", "probability", "checkpoint_id")


class ModelDirectoryHandler(ModelHandler):
    """Elements (model key, record) -> ``PredictionResult(record, inference, model_dir)``; the
    record as ``Learn`` and ``Score`` take the user's own (a dict or ``beam.Row``; reading
    options as for them, ``label_column``, ``bits``, ...), its model key given beside it.
    ``inference``: {"prediction", "probability", "checkpoint_id", "refused"}, the prediction
    ``Score`` makes (``predict_next`` from the key's latest checkpoint, ``ScoringModels``:
    looked for again every ``refresh_seconds``); a record that cannot be read, or whose key has
    no model, has ``refused`` (the reason) and nothing else. The model is the whole directory;
    RunInference's model-update side input (``ModelMetadata.model_id``) may name another."""

    def __init__(self, model_dir: str, refresh_seconds: float = REFRESH_SECONDS,
                 **options: Any):
        super().__init__()
        self.model_dir, self.refresh_seconds = model_dir, refresh_seconds
        self.spec = configure(scoring=True, dead_letter=None, **options).spec

    def load_model(self):
        return ScoringModels(self.model_dir, self.refresh_seconds)

    def update_model_path(self, model_path=None):
        if model_path:
            self.model_dir = model_path

    def run_inference(self, batch, model, inference_args=None):
        results = [None] * len(batch)
        block, dead = parse_records(self.spec, None, [(i, r) for i, (_, r) in enumerate(batch)])
        for letter in dead:
            results[letter.position] = _refused(letter.reason)
        block.keys = string_array([str(batch[i][0]) for i in block.positions.tolist()])
        for key, piece in block.split_by_key():
            table, refused = score_block(model, key, piece)
            for letter in refused:
                results[letter.position] = _refused(letter.reason)
            if table is not None:
                for row in table.select(["position", *RESULT_FIELDS]).to_pylist():
                    results[row.pop("position")] = {**row, "refused": None}
        return [PredictionResult(record, inference, self.model_dir)
                for (_, record), inference in zip(batch, results)]

    def get_metrics_namespace(self):
        return "unitless"


def _refused(reason):
    return {**dict.fromkeys(RESULT_FIELDS), "refused": reason}
