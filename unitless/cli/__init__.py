"""The `unitless` command (``main``), its console logging and the options reference it
writes (docs/options.md)."""
from .main import main

__all__ = ["main"]
