"""unitless in your own Beam pipeline: composable transforms.

    import apache_beam as beam
    from unitless.beam import Learn, ReadExamples, Rows, WritePredictions

    with beam.Pipeline() as p:
        learn = Learn(algorithm="scinol2", model_dir="out/models", model_key_column="region",
                      predictions=None, dead_letter="out/dead")
        predictions = (p | beam.Create([{"label": 1, "region": "eu", "price": 3.5}, ...])
                       | learn)
        predictions | Rows() | beam.Map(print)

* ``ReadExamples(inputs, ...)``: files or a Kafka topic -> example blocks (and its
  ``dead_letters``).
* ``Learn(...)``: example blocks, or your own records (dicts or ``beam.Row``s), -> predictions
  made before each example is learned (Arrow tables), one model per model key, checkpointed.
* ``Score(model_dir, ...)``: the same inputs -> scores from each key's latest checkpoint (a
  newer one taken up while it runs).
* ``ModelDirectoryHandler(model_dir, ...)``: Beam ML's ``RunInference`` over a model directory,
  elements (model key, record) -> ``PredictionResult``, predicting as ``Score`` does.
* ``WritePredictions(target)`` / ``WriteDeadLetters(target)``: tables -> part files in a
  directory or messages on a ``kafka://host:port/topic``.
* ``Rows()``: Arrow tables -> one dict per row (for ``assert_that`` or your own steps).

Options are the `unitless` command's flags as keywords (``--label-column`` is
``label_column``), with the same defaults; ``configure(**options)`` checks them. The command
itself builds its pipelines from these transforms.
"""
import apache_beam as beam

from .pipelines.config import TrainConfig, configure
from .pipelines.inference import ModelDirectoryHandler
from .pipelines.io import ReadExamples, WriteDeadLetters, WritePredictions
from .pipelines.score import Score
from .pipelines.train import Learn

__all__ = ["Learn", "ModelDirectoryHandler", "ReadExamples", "Rows", "Score", "TrainConfig",
           "WriteDeadLetters", "WritePredictions", "configure"]


class Rows(beam.PTransform):
    """Arrow tables (predictions, scores, dead letters) -> one dict per row."""

    def expand(self, tables):
        return tables | beam.FlatMap(lambda table: table.to_pylist())
