"""A model key's model as a run starts it: resumed from its latest checkpoint with --resume (its
group's, else the per-key layout's), else a fresh learner."""
import logging
from typing import Optional

from ..learner import LearnerState, read_metadata
from ..models.keyed_model import KeyedModel
from ..store import per_key
from ..store.group_writer import GroupWriter
from ..store.groups import group_key
from .config import TrainConfig, check_resume, new_learner

log = logging.getLogger("unitless")


def new_keyed_model(cfg: TrainConfig, key: str, checkpoints: GroupWriter,
                    fresh: LearnerState) -> KeyedModel:
    """The key's model: resumed from its latest checkpoint when asked (its group's, read by
    ``checkpoints``, a GroupWriter; else the per-key layout's), else the fresh learner
    ``fresh`` (``new_learner(cfg)``, shared: a ``ModelGroup`` copies a learner in)."""
    return saved_keyed_model(cfg, key, checkpoints) or KeyedModel(key, fresh)


def saved_keyed_model(cfg: TrainConfig, key: str, checkpoints: GroupWriter
                      ) -> Optional[KeyedModel]:
    """The key's model as its latest checkpoint holds it, with --resume; else None."""
    if cfg.resume:
        found = (checkpoints.group(group_key(key, cfg.model_groups)).load(key)
                 or per_key.load_latest_learner(cfg.model_dir, key))
        if found:
            path, table, state = found
            log.debug("model %r resumes from %s", key, path)
            check_resume(cfg, read_metadata(table), path)
            model = KeyedModel.from_table(table, state)
            model.run_start = model.state.examples_seen
            if cfg.allow_hyperparameter_change:
                model.state.hyperparameters = new_learner(cfg).hyperparameters
            return model
    return None
