"""Replace one of inductor's functions everywhere inductor reads it.

Inductor's modules import their helpers by name (``from torch._inductor.utils
import get_current_backend``), so a module that is already loaded holds its own
binding: replacing the function in its defining module alone would reach only
modules imported afterwards.  ``replace`` rebinds the name in every loaded
``torch._inductor`` module that holds the original.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["replace"]


def replace(owner: ModuleType, name: str, new: Callable[..., Any]) -> None:
    """Make ``owner.<name>``, and every loaded inductor module's binding of the same function, ``new``."""
    original = getattr(owner, name)
    for module_name, module in list(sys.modules.items()):
        if (module is owner or module_name.startswith("torch._inductor")) and getattr(module, name, None) is original:
            setattr(module, name, new)
