"""The owner's side of its clients' lock requests: each one granted at most once, never after it was withdrawn.

A client names every acquire with a holder of its own (``client:<id>#<request>:<process>``,
``computer/client/_locks.py``). The same request can reach the owner more than once, or late:

- a resend: the client's call was cut (its reply lost, Ray's error for a call that may have run) and
  ``lock_acquire`` is retry-safe, so the same request comes again. Before, the resend waited behind
  the first one's grant, which nobody would ever renew or release: every worker, the requester
  included, was locked out for a whole lease (``lock_lease``, 30 s), and with a first attempt still
  waiting the two were both queued. Now a request granted already gets that same grant back (the
  same lease and fencing token, renewed), and one still waiting hands its place to the resend (the
  first attempt's caller is gone: it ends, holding nothing); the resend keeps that place in the queue
  (``LockTable.acquire(resend=True)``): before, it queued behind every request that came meanwhile;
- a withdrawal that overtook its request: a client that stops waiting (cancelled, timed out, the
  owner silent) sends ``lock_cancel``, on the owner's control group, while the acquire may still sit in
  Ray's queue for the wait group or on its way to the owner's loop; Ray's cancel of a call in flight is
  best effort. Before, the cancel found nothing to withdraw and the acquire, served after it, was
  granted to nobody: every other worker locked out for a whole lease. Now a withdrawn request is
  remembered (the last ``WITHDRAWN_KEPT`` for ``WITHDRAWN_TTL`` seconds) and refused if it comes
  after (ECANCELED, nothing granted);
- a request that overtook its client's close: ``close`` withdraws the whole client
  (``lock_release_holder``, one call for all its requests), while one of its acquires may still be on
  its way. Before, only single withdrawals were remembered: that acquire was granted after the close,
  to a client that would never renew nor release it (its connection may be gone with it), every other
  worker locked out for a whole lease. Now a closed client is remembered like a withdrawn request (the
  same bounds) and every request of it that comes after is refused (ECANCELED). A client id is never
  reused (a new client, a new uuid), so nothing legitimate is refused.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections import OrderedDict
from collections.abc import Sequence

from ..storage.errors import fs_error
from ..storage.locks import LockTable

__all__ = ["WITHDRAWN_KEPT", "WITHDRAWN_TTL", "LockRequests"]

WITHDRAWN_KEPT = 4096  # withdrawn requests remembered (a few bytes each)
WITHDRAWN_TTL = 600.0  # seconds: far beyond any call's stay in Ray's queue or a client's resends (30 s)


class LockRequests:
    """The lock requests of one owner's clients: those waiting (by holder) and those withdrawn."""

    def __init__(self) -> None:
        self.waits: dict[str, asyncio.Task[object]] = {}  # requests still waiting, by holder
        self._withdrawn: OrderedDict[str, float] = OrderedDict()  # holder -> when it was withdrawn

    async def acquire(
        self, locks: LockTable, holder: str, paths: Sequence[str], subtree: bool, ttl: float
    ) -> tuple[str, float, int]:
        """Take (or give back, for a resend) the lease of request ``holder``: ``(lease_id, ttl, token)``."""
        self._forget_old()
        if holder in self._withdrawn or holder.partition("#")[0] in self._withdrawn:
            raise fs_error(
                errno.ECANCELED,
                paths[0] if paths else None,
                "lock request withdrawn by its client before it was served: nothing granted",
            )
        granted = self._granted(locks, holder)
        if granted is not None:  # a resend of a granted request: the same grant, renewed
            locks.renew(granted, ttl)
            return granted, ttl, locks.token(granted) or 0
        earlier = self.waits.get(holder)
        # A resend while the first attempt waits (its caller gave it up): it takes that attempt's place
        # in the queue, and the first attempt ends there, holding nothing.
        resend = earlier is not None and not earlier.done()
        task = asyncio.current_task()
        if task is not None:
            self.waits[holder] = task
        try:
            lease = await locks.acquire(list(paths), subtree=subtree, holder=holder, ttl=ttl, resend=resend)
        finally:
            if task is not None and self.waits.get(holder) is task:
                del self.waits[holder]
        return lease, ttl, locks.token(lease) or 0

    def withdraw(self, locks: LockTable, holder: str) -> int:
        """Withdraw request ``holder``: stop its wait, release what it was granted, refuse it from now on."""
        self._remember(holder)
        waiting = self.waits.pop(holder, None)
        if waiting is not None:
            waiting.cancel()  # the lock table forgets a cancelled request
        return locks.release_holder(holder)

    def release_client(self, locks: LockTable, client: str) -> int:
        """Release every lease (and stop every wait) of client ``client`` and of its requests, and
        refuse its requests from now on (the client closed: one still on its way must not be granted)."""
        self._remember(client)
        mine = [h for h in self.waits if h == client or h.startswith(client + "#")]
        for h in mine:
            self.waits.pop(h).cancel()
        holders = {h for _, _, _, h in locks.held() if h == client or h.startswith(client + "#")}
        return sum(locks.release_holder(h) for h in holders)

    def _remember(self, withdrawn: str) -> None:
        """Refuse request (or whole client) ``withdrawn`` from now on, within the bounds."""
        self._forget_old()
        self._withdrawn[withdrawn] = time.monotonic()
        self._withdrawn.move_to_end(withdrawn)
        while len(self._withdrawn) > WITHDRAWN_KEPT:
            self._withdrawn.popitem(last=False)

    @staticmethod
    def _granted(locks: LockTable, holder: str) -> str | None:
        return next((lease.lease_id for lease in locks.held() if lease.holder == holder), None)

    def _forget_old(self) -> None:
        edge = time.monotonic() - WITHDRAWN_TTL
        while self._withdrawn and next(iter(self._withdrawn.values())) < edge:
            self._withdrawn.popitem(last=False)
