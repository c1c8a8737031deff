"""Errors of the cluster layer."""

from __future__ import annotations

import errno

__all__ = ["WorkspaceUnavailableError"]


class WorkspaceUnavailableError(OSError):
    """EAGAIN: the owner went away during a call whose outcome is unknown, or cannot be placed now.

    Retrying is safe for the caller to decide: a write may or may not have been committed.
    """

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(errno.EAGAIN, f"workspace unavailable: {detail}", name)
