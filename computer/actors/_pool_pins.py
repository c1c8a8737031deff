"""A dispatcher's affinity pins: the runs of a workspace that must go to one worker (its live sandbox
is there), and which of those pins were made ahead of a run's end (no live sandbox known there yet).
"""

from __future__ import annotations

__all__ = ["Pins"]


class Pins:
    """Workspace id -> the worker its runs go to (even while it drains), until unpinned."""

    def __init__(self) -> None:
        self._to: dict[str, str] = {}
        self._ahead: set[str] = set()  # of those, pinned as a run was sent, before it ended (``pin_ahead``)
        self._sent: dict[str, int] = {}  # of those, how many runs sent under that pin have not settled it

    def get(self, workspace_id: str) -> str | None:
        return self._to.get(workspace_id)

    def pin(self, workspace_id: str, worker: str) -> None:
        """A live sandbox of the workspace is on ``worker``."""
        self._to[workspace_id] = worker
        self._ahead.discard(workspace_id)
        self._sent.pop(workspace_id, None)

    def pin_ahead(self, workspace_id: str, worker: str) -> None:
        """Pin a workspace that has none to the worker its run is sent to, before that run says whether
        a live sandbox stays there (its exit pins or unpins): until the first run of a workspace had
        ended, its other runs went to other workers and started sandboxes of their own (a server
        started by one was out of reach of the next; ``processes`` and ``end_sandbox`` saw none of
        them, and the sandboxes that lost the pin were out of reach for good)."""
        if workspace_id not in self._to:
            self._to[workspace_id] = worker
            self._ahead.add(workspace_id)
        if workspace_id in self._ahead and self._to[workspace_id] == worker:
            self._sent[workspace_id] = self._sent.get(workspace_id, 0) + 1

    def give_up_ahead(self, workspace_id: str, worker: str) -> None:
        """A run sent to ``worker`` under a pin made ahead ended before anything reached the workspace
        there, and without an exit (the worker raised, or the caller cancelled the run before its
        worker answered): the pin goes once no other run sent under it is still to say. Before,
        it stayed, pointing at a worker that held no sandbox of the workspace (or a dead one), and
        every later run went there, full or not, and failed again on a worker whose backend was
        broken. A pin a run's exit made (a live sandbox known there) is not touched."""
        if workspace_id not in self._ahead or self._to.get(workspace_id) != worker:
            return
        left = self._sent.get(workspace_id, 1) - 1
        if left > 0:
            self._sent[workspace_id] = left
        else:
            self.unpin(workspace_id)

    def unpin(self, workspace_id: str) -> None:
        self._to.pop(workspace_id, None)
        self._ahead.discard(workspace_id)
        self._sent.pop(workspace_id, None)

    def unpin_from(self, workspace_id: str, worker: str) -> bool:
        """Unpin the workspace if it is pinned to ``worker``; whether a live sandbox was known there
        (a pin made ahead of a run's end knew none)."""
        if self._to.get(workspace_id) != worker:
            return False
        known = workspace_id not in self._ahead
        self.unpin(workspace_id)
        return known

    def known(self, workspace_id: str) -> bool:
        """Whether the workspace is pinned where a live sandbox of it is known (not merely ahead)."""
        return workspace_id in self._to and workspace_id not in self._ahead

    def holds(self, worker: str) -> bool:
        """Whether a workspace is pinned to ``worker``."""
        return worker in self._to.values()
