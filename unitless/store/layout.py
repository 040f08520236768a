"""The one interface both model directory layouts have (``CheckpointLayout``): the group layout
read with the per-key one of earlier versions (``store.catalog``, what everything reads through)
and the per-key layout alone (``store.per_key``). mypy holds both modules to it (``LAYOUTS``)."""
from typing import Any, Dict, List, Optional, Protocol, Tuple

import pyarrow as pa

from ..learner import LearnerState
from . import catalog, per_key


class CheckpointLayout(Protocol):
    def model_keys(self, model_dir: str) -> List[str]:
        """The model keys with a checkpoint under ``model_dir``, sorted."""

    def checkpoint_metadata(self, model_dir: str) -> List[Tuple[str, str, Dict[str, Any]]]:
        """[(model key, where its newest checkpoint is, its metadata)] of every model."""

    def latest_checkpoint(self, model_dir: str, key: str) -> Optional[str]:
        """Where the model's newest valid checkpoint is, or None."""

    def load_latest(self, model_dir: str, key: str) -> Optional[Tuple[str, pa.Table]]:
        """(where, table) of the model's newest valid checkpoint, or None."""

    def load_latest_learner(self, model_dir: str, key: str
                            ) -> Optional[Tuple[str, pa.Table, Optional[LearnerState]]]:
        """(where, table, its learner state) of the model's newest valid checkpoint, or None."""

    def load_checkpoint(self, path: str) -> Tuple[str, pa.Table]:
        """(where, table) of one checkpoint, which must be valid."""

    def read_checkpoint(self, path: str) -> pa.Table:
        """The Arrow table of one checkpoint."""


LAYOUTS: Tuple[CheckpointLayout, ...] = (catalog, per_key)
