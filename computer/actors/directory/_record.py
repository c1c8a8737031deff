"""One directory record: where a workspace's file lives, who owns it, and since when it is idle."""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass
from typing import Literal

from ...storage.errors import fs_error

__all__ = ["DELETING", "WorkspaceRecord", "WorkspaceState", "refuse_while_deleting"]

DELETING = "deleting"  # the ``node`` of a deletion's lease (``delete_workspace``, ``computer rm``)


def refuse_while_deleting(name: str, node: str | None, expires: float, acquirer: str, now: float) -> None:
    """``OSError`` EBUSY when a deletion holds ``name``'s lease (``node`` is
    :data:`DELETING`, until ``expires``) and an owner on ``acquirer`` asks for it. Leases are otherwise
    taken over, never refused: here a hosted workspace that the deletion had just closed was reopened
    by its client's next call, with an epoch above the deletion's fence, and that client's writes were
    acknowledged into the file the deletion then unlinked. Another deletion may take it over."""
    if node == DELETING and acquirer != DELETING and expires > now:
        raise fs_error(errno.EBUSY, name, "the workspace is being deleted; retry once it is gone")


# ``node`` is the Ray node id of the last owner, ``host`` the machine it ran on.
# active: an owner holds (or held, until its lease ran out) the lease; hibernating: the owner went
# idle and exited, the file waits on ``node``; closed: the owner released the lease on purpose.
WorkspaceState = Literal["active", "hibernating", "closed"]


@dataclass(frozen=True, slots=True)
class WorkspaceRecord:
    """The directory's view of one workspace name. Times are wall-clock seconds (``time.time()``)."""

    name: str
    node: str | None  # Ray node id of the node holding the SQLite file
    owner: str | None  # id of the owner that holds (or last held) the lease
    epoch: int  # fencing epoch: strictly increases with every takeover
    lease_expires: float  # 0.0 once released
    last_active: float
    state: WorkspaceState
    # The latest epoch whose owner gave the lease up itself (hibernation or close): a call that failed
    # because that owner was gone was never executed, so a client may safely retry it.
    released_epoch: int = 0
    # Stable identity of the machine holding the file (``<hostname>/<ip>``): node ids change with every
    # Ray session, the machine does not. None in records written before hosts were recorded.
    host: str | None = None

    def lease_live(self, now: float | None = None) -> bool:
        """Whether an owner holds an unexpired lease."""
        return self.lease_expires > (time.time() if now is None else now)

    def stale_for(self, owner_id: str, epoch: int, now: float | None = None) -> bool:
        """Whether this record is older than the lease ``owner_id`` holds under ``epoch``: a lower epoch,
        or the same epoch under another owner id (a lease a directory that lost its records handed out
        again while counting up to the file's epoch, never used: ``_lease.take_lease``). Epochs only
        grow, and the owner's file carries its own (it checks), so such a record can only be left from
        an older state of the directory (a Redis restored from an old snapshot): no takeover.

        Also a higher epoch whose lease is over (by ``now``, the directory's clock): a snapshot taken
        before the workspace was deleted and made anew (its new file counts epochs from 1 again), restored
        under the new file's owner. A takeover or a deletion raises the file's epoch (the fence) right
        after its lease, which the owner checks; until then its lease is live, so it still wins. One
        whose lease ran out without fencing the file (its process died in between) never touched the
        file: writing over it loses nothing, and a later owner's epoch is still above the file's.
        Decided: a snapshot's record still live (restored within ``lock_lease`` of being taken) reads as
        a takeover (the owner leaves once, its locks with it, nothing written is lost)."""
        if self.epoch > epoch:
            return not self.lease_live(now)
        return self.epoch < epoch or self.owner != owner_id

    def to_wire(self) -> dict[str, object]:
        return {
            "node": self.node,
            "owner": self.owner,
            "epoch": self.epoch,
            "lease_expires": self.lease_expires,
            "last_active": self.last_active,
            "state": self.state,
            "released_epoch": self.released_epoch,
            "host": self.host,
        }

    @classmethod
    def from_wire(cls, name: str, data: dict[str, object]) -> WorkspaceRecord:
        state = str(data["state"])
        if state not in ("active", "hibernating", "closed"):
            raise ValueError(f"unknown workspace state {state!r} for {name!r}")
        return cls(
            name=name,
            node=_opt_str(data.get("node")),
            owner=_opt_str(data.get("owner")),
            epoch=int(data["epoch"]),  # type: ignore[call-overload]
            lease_expires=float(data["lease_expires"]),  # type: ignore[arg-type]
            last_active=float(data["last_active"]),  # type: ignore[arg-type]
            state=state,  # type: ignore[arg-type]
            released_epoch=int(data.get("released_epoch") or 0),  # type: ignore[call-overload]
            host=_opt_str(data.get("host")),
        )


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)
