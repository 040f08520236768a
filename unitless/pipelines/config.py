"""Everything a training or scoring run needs to know, independent of Beam and argparse."""
from dataclasses import dataclass, field

from ..connectors.formats import RecordSpec


@dataclass
class TrainConfig:
    inputs: list
    format: str
    spec: RecordSpec
    algorithm: str = "nag"
    loss: str = "logistic"
    n_classes: int = 1
    hyperparameters: dict = field(default_factory=dict)
    model_dir: str = "out/models"
    predictions: str = "out/predictions"
    output_format: str = "parquet"
    dead_letter: str = "out/dead_letter"
    checkpoint_every: int = 0          # examples; 0: only at end of input
    checkpoint_seconds: float = 0.0    # seconds; 0: off
    keep_checkpoints: int = 3
    resume: bool = False
    chunk_size: int = 8192
    log_every_seconds: float = 10.0
    kafka_settings: dict = field(default_factory=dict)  # kafka-python client settings
