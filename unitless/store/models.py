"""Kept where users' code imports it from (``from unitless.store.models import
newest_models``): the catalog of a model directory's checkpoints, ``unitless.store.catalog``."""
from .catalog import (checkpoint_history, checkpoint_metadata, checkpoint_summaries,
                      has_checkpoint, latest_checkpoint, latest_metadata, lists_models,
                      load_checkpoint, load_latest, load_latest_learner, model_directory_of,
                      model_keys, newest_models, newest_version, read_checkpoint)

__all__ = ["checkpoint_history", "checkpoint_metadata", "checkpoint_summaries", "has_checkpoint",
           "latest_checkpoint", "latest_metadata", "lists_models", "load_checkpoint",
           "load_latest", "load_latest_learner", "model_directory_of", "model_keys",
           "newest_models", "newest_version", "read_checkpoint"]
