"""A model key's model as a run starts it: resumed from its latest checkpoint with --resume (its
group's, else the per-key layout's), else a fresh learner; and, resumed, what it had learned
before its learner is decoded (``known_model``)."""
import logging
from typing import Callable, Optional

from ..learner import LearnerState, read_metadata
from ..models.keyed_model import KeyedModel
from ..models.model_group import ModelGroup
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


def saved_keyed_model(cfg: TrainConfig, key: str, checkpoints: GroupWriter,
                      decode: bool = True) -> Optional[KeyedModel]:
    """The key's model as its latest checkpoint holds it, with --resume; else None. Not
    ``decode``d: what it learned only (its learner None), its checkpoint's checksum checked."""
    if not cfg.resume:
        return None
    group = checkpoints.group(group_key(key, cfg.model_groups))
    state = None
    if decode:
        loaded = group.load(key) or per_key.load_latest_learner(cfg.model_dir, key)
        if loaded is None:
            return None
        path, table, state = loaded
        meta = read_metadata(table)
    else:
        found = group.metadata(key)
        if found is None:
            kept = per_key.load_latest(cfg.model_dir, key)
            found = None if kept is None else (kept[0], read_metadata(kept[1]))
        if found is None:
            return None
        path, meta = found
    log.debug("model %r resumes from %s", key, path)
    check_resume(cfg, meta, path)
    model = KeyedModel.from_metadata(meta, state)
    if decode:
        model.run_start = model.state.examples_seen
        if cfg.allow_hyperparameter_change:
            model.state.hyperparameters = new_learner(cfg).hyperparameters
    return model


def known_model(cfg: TrainConfig, group: ModelGroup, key: str, checkpoints: GroupWriter,
                fresh: LearnerState, of: Callable[..., KeyedModel]) -> KeyedModel:
    """The group's model of ``key`` as far as what it has learned goes (its positions): its
    own (``of(key)``), or, resumed, its latest checkpoint's without its learner decoded, kept
    in ``group.dormant`` until it has something new to learn: a resumed run reads its inputs
    again, and a model whose examples it learned before need not be decoded to skip them
    (not with --labels, whose join is given each model's share as it is read back). A key
    with no checkpoint is given ``fresh`` (``new_keyed_model``'s), its checkpoints not looked
    up again: ``of(key, model)``."""
    model = group.models.get(key) or group.dormant.get(key)
    if model is not None:
        return model
    if cfg.resume and not cfg.labels and key not in group.evicted:
        model = saved_keyed_model(cfg, key, checkpoints, decode=False)
        if model is None:
            return of(key, KeyedModel(key, fresh))
        group.dormant[key] = model
        return model
    return of(key)
