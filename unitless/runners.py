"""Kept where users' scripts import it from: ``unitless.runtime.runners``."""
from .runtime.runners import beam_options, pipeline, refused, runner_name, undeclared

__all__ = ["beam_options", "pipeline", "refused", "runner_name", "undeclared"]
