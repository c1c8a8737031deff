"""Errors of the cluster layer."""

from __future__ import annotations

import errno

__all__ = ["OutcomeUnknownError", "UploadLostError", "WorkspaceUnavailableError"]


class WorkspaceUnavailableError(OSError):
    """EAGAIN: the owner went away during a call whose outcome is unknown, or cannot be placed now.

    Retrying is safe for the caller to decide: a write may or may not have been committed.
    """

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(errno.EAGAIN, f"workspace unavailable: {detail}", name)
        self.detail = detail

    def __reduce__(self) -> tuple[type[WorkspaceUnavailableError], tuple[str, str]]:
        # OSError pickles as ``cls(errno, strerror, filename)``, which this signature refuses: raised in
        # a Ray actor or task (an owner's constructor), it reached the caller as Ray's
        # ``UnserializableException``, its message lost.
        return (type(self), (self.filename, self.detail))


class UploadLostError(WorkspaceUnavailableError):
    """EAGAIN: an upload's owner restarted (or dropped it as stale) between two pieces; nothing was written.

    The client restarts the upload when it can send the data again (bytes), else raises this.
    """


class OutcomeUnknownError(WorkspaceUnavailableError):
    """EAGAIN, "unknown outcome": the owner died while running a mutation, which may or may not have applied.

    Calls that provably did not run are sent again by the client instead; this is only raised when
    nobody can tell. Read the state back before retrying a mutation that is not idempotent.
    """


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (Ray's errors carry a traceback after it), else its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
