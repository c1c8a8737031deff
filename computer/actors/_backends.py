"""The backend factory hook: which exec backends an owner actor gets.

An owner calls :func:`owner_backends` in its own process when it opens its workspace, so the hook must
be importable there (a driver-side registry would not cross to the actor). The exec-pool module
``computer/actors/pools.py`` plugs in by defining::

    def owner_backends(config: Settings, name: str) -> Sequence[Backend]: ...

returning the pool-backed backends for workspace ``name``. Until that module exists owners have none.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ..config import Settings

if TYPE_CHECKING:
    from ..runtime import Backend

__all__ = ["owner_backends"]


def owner_backends(config: Settings, name: str) -> Sequence[Backend]:
    """The backends of the owner of ``name``: ``computer.actors.pools.owner_backends`` if defined."""
    try:
        pools: Any = import_module("computer.actors.pools")
    except ModuleNotFoundError as exc:
        if exc.name != "computer.actors.pools":
            raise
        return ()
    factory = getattr(pools, "owner_backends", None)
    if factory is None:
        return ()
    return list(factory(config, name))
