"""``Runtime``: the exec router of one workspace (SPEC section 6)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._backend import Backend
from .types import BackendInfo

if TYPE_CHECKING:
    pass

__all__ = ["Runtime"]


class Runtime:
    """Routes executions of one workspace to its backends."""

    def __init__(self, workspace: Any, backends: Sequence[Backend], *, output: Any = None) -> None:
        self._workspace = workspace
        self._backends: dict[str, Backend] = {}
        for b in backends:
            if b.info.id in self._backends:
                raise ValueError(f"two backends share the id {b.info.id!r}")
            self._backends[b.info.id] = b
        self._output = output

    def backends(self) -> list[BackendInfo]:
        """What each configured backend says about itself, in configuration order."""
        return [b.info for b in self._backends.values()]

    def _select(self, backend: str | None) -> Backend:
        if not self._backends:
            raise ValueError("this workspace has no exec backends configured")
        if backend is None:
            return next(iter(self._backends.values()))
        try:
            return self._backends[backend]
        except KeyError:
            raise ValueError(
                f"unknown backend {backend!r}; configured: {', '.join(self._backends)}"
            ) from None

    async def exec(self, source: str, *, backend: str | None = None, **kwargs: Any) -> Any:
        self._select(backend)
        raise NotImplementedError("exec is being built")

    async def close(self) -> None:
        """Kill running executions."""
