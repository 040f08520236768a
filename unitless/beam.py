"""unitless in your own Beam pipeline: the command's steps as composable transforms.

``ReadExamples`` (files or a Kafka topic to example blocks), ``Learn`` (predictions made before
each example is learned, one model per model key, checkpointed), ``Serve`` (examples answered by
the model states a training run publishes), ``Score``,
``ModelDirectoryHandler`` (Beam ML's ``RunInference``), ``WritePredictions``,
``WriteDeadLetters`` and ``Rows`` (Arrow tables to dicts). Options are the command's flags as
keywords (``configure`` checks them); the command builds its pipelines from these transforms.
What each takes and gives, with an example: docs/usage.md, "In your own Beam pipeline".
"""
import apache_beam as beam

from .pipelines.config import TrainConfig, configure
from .pipelines.inference import ModelDirectoryHandler
from .pipelines.io.sinks import WriteDeadLetters, WritePredictions
from .pipelines.io.sources import ReadExamples
from .pipelines.learn import Learn
from .pipelines.score import Score
from .pipelines.serve import Serve

__all__ = ["Learn", "ModelDirectoryHandler", "ReadExamples", "Rows", "Score", "Serve",
           "TrainConfig",
           "WriteDeadLetters", "WritePredictions", "configure"]


class Rows(beam.PTransform):
    """Arrow tables (predictions, scores, dead letters) -> one dict per row."""

    def expand(self, tables):
        return tables | beam.FlatMap(lambda table: table.to_pylist())
