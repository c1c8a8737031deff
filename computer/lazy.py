"""Names a package exports without importing them until first used (PEP 562).

A package lists ``name -> relative module`` and defines ``__getattr__`` as a call of
:func:`lazy_attribute`: ``import computer`` then costs nothing of Ray, the storage engine or the
Redis client until a name that needs them is used. The value is cached in the package's namespace,
so the lookup runs once per name.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Any

__all__ = ["lazy_attribute"]


def lazy_attribute(package: str, table: dict[str, str], name: str) -> Any:
    """``package``'s attribute ``name``, imported from the module ``table`` names for it (relative
    to ``package``) and kept in ``package``; ``AttributeError`` for a name it does not export."""
    module = table.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(import_module(module, package), name)
    setattr(sys.modules[package], name, value)
    return value
