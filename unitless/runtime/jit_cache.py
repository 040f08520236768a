"""Which of unitless's compiled functions this process compiled on first use instead of
loading them from numba's on-disk cache (``python -m unitless.compile`` fills it)."""
import sys
from typing import Any, Optional, cast

from numba.core.dispatcher import Dispatcher


def compiled_here() -> list[str]:
    """(functions compiled in this process instead of loaded from the cache, what they are)."""
    compiled = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("unitless.") or module is None:
            continue
        for attr in vars(module).values():
            if isinstance(attr, Dispatcher) and attr.stats.cache_misses:
                compiled.append(f"{name}.{cast(Any, attr).__name__}")
    return sorted(set(compiled))


def compiled_notice() -> Optional[str]:
    """One line when this process compiled functions (a first run), else None."""
    compiled = compiled_here()
    if not compiled:
        return None
    return (f"(this run compiled {len(compiled)} functions on first use, which later runs load "
            "from numba's cache; `python -m unitless.compile` does it once after installing)")
