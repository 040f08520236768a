"""Predictions and dead letters out, as a step of a user's pipeline: part files or a topic."""
from typing import Any, Mapping, Optional, Sequence, Union

import apache_beam as beam

from ...connectors.sinks import open_sink
from ..config import kafka_settings


class WriteToSink(beam.DoFn):
    """Arrow tables -> a sink (part files or Kafka), flushed at the end of every bundle."""

    def __init__(self, target, fmt, kind, kafka_settings=None):
        self.target, self.fmt, self.kind, self.kafka_settings = target, fmt, kind, kafka_settings

    def setup(self):
        self.sink = open_sink(self.target, self.fmt, self.kind, self.kafka_settings)

    def start_bundle(self):
        self.sink.discard()

    def process(self, table):
        self.sink.write(table)

    def finish_bundle(self):
        self.sink.flush()

    def teardown(self):
        self.sink.close()


class WritePredictions(beam.PTransform):
    """Arrow tables of predictions or scores -> part files (``output_format``: parquet, jsonl,
    csv) in a directory, or one Kafka message per row on a ``kafka://host:port/topic`` (key =
    model key, JSON value). Each bundle's output is made durable when the bundle ends."""
    kind, default_format = "predictions", "parquet"

    def __init__(self, target: str, output_format: Optional[str] = None,
                 kafka_config: Union[Mapping[str, Any], Sequence[str], None] = None):
        super().__init__()
        self.target = target
        self.output_format = output_format or self.default_format
        self.kafka_settings = kafka_settings(kafka_config)

    def expand(self, tables):
        return tables | beam.ParDo(WriteToSink(self.target, self.output_format, self.kind,
                                               self.kafka_settings))


class WriteDeadLetters(WritePredictions):
    """Dead-letter tables -> JSON lines (source, position, raw bytes as text and base64,
    reason) in a directory, or one Kafka message per dead letter."""
    kind, default_format = "dead letters", "jsonl"
