"""The directory protocol: placement, owner leases with fencing epochs, and hibernation bookkeeping."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._record import WorkspaceRecord

__all__ = ["Directory"]


@runtime_checkable
class Directory(Protocol):
    """Which node holds each workspace file, which owner holds its lease, and whether it hibernates.

    Every method is atomic against concurrent callers in any process. Leases are taken over, never
    refused: Ray's named actors already make one owner per name inside a cluster, and the epoch is the
    backstop that stops a zombie owner (it opens its file with ``fence=epoch``, so once a newer owner
    opened the file with a higher epoch the zombie's writes fail, and its renewals return False).
    """

    def get(self, name: str) -> WorkspaceRecord | None:
        """The record of ``name``, or None when the name was never owned."""
        ...

    def acquire_lease(
        self, name: str, node: str, owner_id: str, ttl: float, *, host: str | None = None
    ) -> int:
        """Take the lease for ``owner_id`` on ``node`` (of machine ``host``); return its epoch.

        The epoch is strictly greater than every earlier one, unless ``owner_id`` already holds a live
        lease (then the lease is extended and its epoch returned unchanged). The state becomes active.
        The one refusal: EBUSY while a deletion's lease is live (``refuse_while_deleting``).
        """
        ...

    def renew_lease(
        self, name: str, owner_id: str, epoch: int, ttl: float, *, last_active: float | None = None
    ) -> bool:
        """Extend the lease (and record the last activity); False when another owner took it over."""
        ...

    def release_lease(self, name: str, owner_id: str, epoch: int, *, hibernating: bool = False) -> bool:
        """Give the lease up, leaving the state hibernating or closed; False if it was taken over."""
        ...

    def remove(self, name: str, owner_id: str) -> bool:
        """Forget ``name`` if ``owner_id`` holds (or last held) its lease; False otherwise.

        Used by ``computer.delete_workspace``, which takes the lease first so that a removal never
        erases the record of an owner that started meanwhile.
        """
        ...

    def names(self) -> list[str]:
        """Every recorded workspace name, sorted."""
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
        ...
