"""Renewing many owner leases at once: what an owner host does for every workspace it holds (issue 20).

A dedicated owner renews its own lease (``Directory.renew_lease``) every third of the lease. A host
holding a thousand workspaces would make a thousand directory writes per round that way, so it
renews them together: one SQLite transaction (one commit instead of one per workspace), one call to
the head's directory actor. ``renew_leases`` is a function over the :class:`Directory` protocol, not
a new protocol method, so every directory (and any other implementation) keeps working: one that has
no ``renew_leases`` of its own (Redis: one transaction per record already) renews one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ._directory import Directory

__all__ = ["LeaseRenewal", "renew_leases"]


class LeaseRenewal(NamedTuple):
    """One ``renew_lease(name, owner_id, epoch, ttl, last_active=...)``."""

    name: str
    owner_id: str
    epoch: int
    ttl: float
    last_active: float | None = None


def renew_leases(directory: Directory, renewals: Sequence[LeaseRenewal]) -> list[bool]:
    """Renew every lease of ``renewals``; for each, whether it was still held (False: taken over)."""
    batch = getattr(directory, "renew_leases", None)
    if batch is not None:
        return [bool(kept) for kept in batch(list(renewals))]
    return [
        directory.renew_lease(r.name, r.owner_id, r.epoch, r.ttl, last_active=r.last_active) for r in renewals
    ]
