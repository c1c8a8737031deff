"""What a dispatcher keeps for a workspace's next run to say: its live sandbox was lost (with its
worker under ``end_sandbox``, :data:`LOST_SANDBOX`, or left on a worker that does not answer,
:data:`SILENT_SANDBOX`), and what a worker that handed a run back (``Requeue``) kept for it (notes for
its stderr, refused paths), said by the run wherever it goes next.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from ..runtime import ExitEvent
from ._pool_admission import Requeue

__all__ = ["LOST_REMEMBERED", "LOST_SANDBOX", "SILENT_SANDBOX", "Notices"]

# What a run says first on its stderr when the worker holding its workspace's live sandbox died.
LOST_SANDBOX = (
    "computer: the exec worker holding this workspace's live sandbox died ({why}); its background "
    "processes ended with it (what they had written and synced is kept) and this command runs in a "
    "fresh sandbox\n"
)
# What a run says first on its stderr when the worker holding its workspace's live sandbox stopped
# answering (the sandbox's processes may still run there, out of reach).
SILENT_SANDBOX = (
    "computer: the exec worker holding this workspace's live sandbox does not answer ({why}); its "
    "background processes are out of reach (what they wrote after their last sync is not in the "
    "workspace) and this command runs in a fresh sandbox\n"
)
# Workspaces whose notices a dispatcher keeps for their next run (the most recent ones).
LOST_REMEMBERED = 1000

_V = TypeVar("_V")


def _remember(kept: dict[str, _V], workspace_id: str, value: _V) -> None:
    """Keep ``value`` as the most recent of ``kept``, dropping the oldest beyond :data:`LOST_REMEMBERED`."""
    kept.pop(workspace_id, None)
    kept[workspace_id] = value
    while len(kept) > LOST_REMEMBERED:
        del kept[next(iter(kept))]


class Notices:
    """One dispatcher's notices, by workspace id, each said once."""

    def __init__(self) -> None:
        # -> the note its next run says first on its stderr: its live sandbox was lost with its worker
        # under ``end_sandbox`` (LOST_SANDBOX), or left on a worker that did not answer (SILENT_SANDBOX).
        self._lost: dict[str, str] = {}
        # -> what a worker that handed its run back kept for its next run (notes, refused paths -> reasons).
        self._carried: dict[str, tuple[list[str], dict[str, str]]] = {}

    def lose(self, workspace_id: str, note: str) -> None:
        """The workspace's live sandbox was lost: its next run says ``note`` first."""
        _remember(self._lost, workspace_id, note)

    def take_lost(self, workspace_id: str) -> str | None:
        return self._lost.pop(workspace_id, None)

    def carry(self, workspace_id: str, requeue: Requeue) -> None:
        """Keep what the worker that handed a run back kept for the workspace's next run."""
        if requeue.note is None and not requeue.unreported:
            return
        notes, refused = self._carried.get(workspace_id, ([], {}))
        if requeue.note is not None:
            notes.append(requeue.note)
        _remember(self._carried, workspace_id, (notes, {**refused, **requeue.unreported}))

    def take_notes(self, workspace_id: str) -> list[str]:
        """The carried notes of the workspace, taken (said once its run started)."""
        carried = self._carried.get(workspace_id)
        if carried is None or not carried[0]:
            return []
        notes = list(carried[0])
        carried[0].clear()
        return notes

    def with_refusals(self, workspace_id: str, event: ExitEvent) -> ExitEvent:
        """``event`` listing the carried refusals of the workspace as skipped (they are taken)."""
        carried = self._carried.pop(workspace_id, None)
        if carried is None or not carried[1]:
            return event
        reasons = {**carried[1], **event.skipped_reasons}
        return dataclasses.replace(
            event, skipped=sorted({*event.skipped, *carried[1]}), skipped_reasons=reasons
        )
