"""Everything a training or scoring run needs to know, independent of Beam and argparse."""
from dataclasses import dataclass, field

from ..connectors.formats import RecordSpec
from ..learner import bias_index, new_state


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
    allow_hyperparameter_change: bool = False  # --resume may change hyperparameters only


def new_learner(cfg):
    """A fresh learner state for this configuration."""
    return new_state(cfg.algorithm, 1 << cfg.spec.bits, cfg.loss, cfg.n_classes,
                     bias_index(cfg.spec.bits) if cfg.spec.bias else -1, **cfg.hyperparameters)


def check_resume(cfg, state, path):
    """Raise ValueError when the checkpointed learner ``state`` (read from ``path``) is not the
    learner this configuration would train: --resume continues a model, it does not change it.
    Hyperparameters may change with ``allow_hyperparameter_change``; the rest never can."""
    fresh = new_learner(cfg)
    settings = [("--algorithm", state.algorithm, fresh.algorithm),
                ("--loss", state.loss, fresh.loss),
                ("--bits", state.dim.bit_length() - 1, cfg.spec.bits),
                ("--no-bias", state.bias_index < 0, fresh.bias_index < 0),
                ("--classes", state.n_classes, fresh.n_classes)]
    if not cfg.allow_hyperparameter_change:
        settings += [(f"--{name.replace('_', '-')}", state.hyperparameters.get(name), value)
                     for name, value in sorted(fresh.hyperparameters.items())]
    for flag, was, now in settings:
        if was != now:
            hint = ("" if flag in ("--algorithm", "--loss", "--bits", "--no-bias", "--classes")
                    else "; pass --allow-hyperparameter-change to change it")
            raise ValueError(f"--resume: the model in {path} was trained with {flag} {was}, "
                             f"not {now}{hint}")
    if state.dim != fresh.dim or state.bias_index != fresh.bias_index:
        raise ValueError(f"--resume: the model in {path} has dimension {state.dim} and bias "
                         f"index {state.bias_index}, not {fresh.dim} and {fresh.bias_index}")
