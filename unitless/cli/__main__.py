"""``python -m unitless.cli``: the `unitless` command."""
import sys

from .main import main

sys.exit(main())
