"""``LockTable``: the owner's path locks (SPEC section 5). Pure asyncio, no Ray.

A hold covers several canonical paths at once (all or nothing, so no deadlock between holds). Two
holds conflict when they share a path; a ``subtree`` hold also conflicts with every hold at an
ancestor or a descendant of its paths. Holds are leases: with a ``ttl`` a hold lapses unless renewed,
and waiters are woken when it does. Waiters are served in arrival order: a request never overtakes
an earlier one it conflicts with, so nobody starves.

Fencing: every grant carries a token, ``(epoch << 32) + n``, strictly increasing per workspace: ``n``
counts grants of this table and ``epoch`` is the owner's fencing epoch, which is stored in the SQLite
file and grows with every new owner, so a token is never handed out twice, even across owner restarts.
A write made under a lease presents its token (:meth:`LockTable.check`) and is refused with
``LockLostError`` (ENOLCK) once that lease is gone: expired, released, or lost with a restarted owner.

The table itself is volatile (in the owner's memory) by decision: a restart loses every lease, and
the fencing check tells each holder so before it can write (its next write under the lost lease is
refused, nothing written). Persisting leases would cost a SQLite commit per acquire, renew and release
(three per tool call through a client), and a lock could then not be taken on a full disk, where the
delete tool must still free space. Owners never hibernate while a lease is held, so only a crash loses one.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .errors import fs_error
from .paths import canonical, is_within

__all__ = ["HeldLease", "LockTable", "own_hold", "refuse_nested"]

# The holds the current task is inside, innermost last: (the table's key, the task that holds, the
# canonical paths, subtree). Inherited by the tasks started inside them, which are told apart by task.
_HOLDS: ContextVar[tuple[tuple[object, object, tuple[str, ...], bool], ...]] = ContextVar(
    "computer_holds", default=()
)


def _overlap(a: Sequence[str], a_subtree: bool, b: Sequence[str], b_subtree: bool) -> str | None:
    """The first path of ``a`` that conflicts with one of ``b`` (the same path; with a subtree hold on
    either side, an ancestor or a descendant too), else None: one rule for leases and nested holds."""
    wide = a_subtree or b_subtree
    for x in a:
        for y in b:
            if x == y or (wide and (is_within(x, y) or is_within(y, x))):
                return x
    return None


def refuse_nested(key: object, paths: Sequence[str], subtree: bool) -> None:
    """Raise ``EDEADLK`` when the current task asks for a hold of ``paths`` on the lock table ``key``
    inside a conflicting hold of its own there (:func:`own_hold`): the check alone, for a call that
    locks elsewhere (a tool a client sends whole to its owner, ``tools._forward``)."""
    _refuse(key, tuple(canonical(p) for p in paths), subtree)


def _refuse(key: object, wanted: tuple[str, ...], subtree: bool) -> None:
    task = asyncio.current_task()
    if task is None:
        return
    for held_key, holder, held, held_subtree in _HOLDS.get():
        if held_key is key and holder is task:
            mine = _overlap(held, held_subtree, wanted, subtree)
            if mine is not None:
                raise fs_error(
                    errno.EDEADLK,
                    wanted[0] if wanted else None,
                    f"Resource deadlock avoided: this task holds {mine}, and a nested hold would wait "
                    "for itself forever (holds are not re-entrant: act inside the outer hold without "
                    "locking again, or lock after it)",
                )


@contextmanager
def own_hold(key: object, paths: Sequence[str], subtree: bool) -> Iterator[None]:
    """The block of a hold of ``paths`` on the lock table ``key`` (the locks surface object) by the
    current task: refused at once with ``EDEADLK`` when this task already holds a conflicting lock of
    the same table (:func:`refuse_nested`).

    Decision (s62): such a nested hold (``async with ws.locks.hold(["/f"])`` and, inside it, a second
    hold of ``/f``, or the write tool called on ``/f``) waited for good: the block cannot end while its
    own task waits, and the outer lease is renewed all along. Holds are not re-entrant (a task started
    in the block presents the same fencing token: two such tasks would both edit under one lease). A
    task started in the block waits as any request does (it may be meant to wait for the block's end,
    as a second agent would); that includes, on Python 3.11, the task ``asyncio.wait_for`` runs its
    awaitable in, which this cannot tell from the others: bound such a wait with ``asyncio.timeout``
    (no task of its own) to have it refused too."""
    wanted = tuple(canonical(p) for p in paths)
    _refuse(key, wanted, subtree)
    outer = _HOLDS.get()
    _HOLDS.set((*outer, (key, asyncio.current_task(), wanted, subtree)))
    try:
        yield
    finally:
        _HOLDS.set(outer)  # not ``reset``: a hold may be left from another task than entered it


class HeldLease(NamedTuple):
    """One lease of :meth:`LockTable.held`."""

    lease_id: str
    paths: tuple[str, ...]
    subtree: bool
    holder: str


@dataclass(eq=False)
class _Claim:
    """A lease (granted) or a request (waiting): the same shape, so conflicts are computed alike."""

    paths: tuple[str, ...]
    subtree: bool
    holder: str
    ttl: float | None
    lease_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    expires: float | None = None
    granted: asyncio.Future[str] | None = None
    seq: int = 0
    token: int = 0  # fencing token, set when granted

    def conflicts(self, other: _Claim) -> bool:
        return _overlap(self.paths, self.subtree, other.paths, other.subtree) is not None


class LockTable:
    """Exclusive path leases for one workspace; different tables never interact."""

    def __init__(self, *, epoch: int = 0) -> None:
        self._held: dict[str, _Claim] = {}
        self._waiting: list[_Claim] = []
        self._seq = itertools.count()
        self._grants = itertools.count(1)
        #: The owner's fencing epoch: the high bits of every token (set by the owner once it has one).
        self.epoch = epoch
        #: Whether a holder's process is known gone (set by the owner, see ``_lease.holder_gone``): a
        #: request is dropped instead of granted when its caller died before it arrived or while it waited.
        self.gone: Callable[[str], bool] | None = None

    # ------------------------------------------------------------------ public

    @asynccontextmanager
    async def hold(
        self,
        paths: Sequence[str],
        *,
        subtree: bool = False,
        holder: str = "local",
        ttl: float | None = None,
    ) -> AsyncIterator[None]:
        """Hold ``paths`` for the duration of the block; released on exit, also when it raises. A
        hold that conflicts with one its own task already has is ``EDEADLK`` (:func:`own_hold`)."""
        if isinstance(paths, str):
            paths = [paths]
        with own_hold(self, paths, subtree):
            lease = await self.acquire(paths, subtree=subtree, holder=holder, ttl=ttl)
            try:
                yield
            finally:
                self.release(lease)

    async def acquire(
        self,
        paths: Sequence[str],
        *,
        subtree: bool = False,
        holder: str = "local",
        ttl: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (pinned API; a bounded wait is part of the lease)
        resend: bool = False,
    ) -> str:
        """Wait until no conflicting lease (or earlier conflicting request) remains; return the lease id.

        ``ttl`` seconds without :meth:`renew` and the lease lapses. ``timeout`` bounds the wait
        (``TimeoutError``). A cancelled or timed-out request holds nothing.

        ``resend``: this is the same request as one of ``holder`` still waiting (its caller's call was
        cut and sent again): it takes that request's place in the queue, and the earlier wait ends with
        ``CancelledError``, holding nothing. Before, the earlier one was cancelled first and the resend
        queued behind every request that came meanwhile, served after them.
        """
        if isinstance(paths, str):
            paths = [paths]
        claim = _Claim(
            paths=tuple(sorted({canonical(p) for p in paths})),
            subtree=subtree,
            holder=holder,
            ttl=ttl,
            seq=next(self._seq),
        )
        if ttl is not None and ttl <= 0:
            raise ValueError("ttl must be positive")
        self._expire()
        if self.gone is not None and self.gone(holder):
            # Its caller died before the request arrived (Ray still delivers it): granted, it would hold
            # every later request up for a whole lease nobody renews.
            path = claim.paths[0] if claim.paths else None
            raise fs_error(errno.ESRCH, path, "lock request dropped: its client process is gone")
        if resend:
            earlier = next((c for c in self._waiting if c.holder == holder), None)
            if earlier is not None and earlier.granted is not None and not earlier.granted.done():
                claim.seq = earlier.seq
                claim.granted = asyncio.get_running_loop().create_future()
                self._waiting[self._waiting.index(earlier)] = claim
                earlier.granted.cancel()  # its acquire ends, holding nothing (it is out of the queue)
                return await self._wait(claim, timeout)
        if not self._waiting and self._grantable(claim):
            self._grant(claim)
            return claim.lease_id
        claim.granted = asyncio.get_running_loop().create_future()
        self._waiting.append(claim)
        return await self._wait(claim, timeout)

    async def _wait(self, claim: _Claim, timeout: float | None) -> str:  # noqa: ASYNC109 (as acquire's)
        """Wait for queued ``claim``'s grant (see :meth:`acquire`)."""
        assert claim.granted is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._dispatch()
            while not claim.granted.done():
                wait = self._next_expiry_in()
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"timed out waiting for a lock on {', '.join(claim.paths)}")
                    wait = left if wait is None else min(wait, left)
                await asyncio.wait((claim.granted,), timeout=wait)
                self._expire()
                self._dispatch()
            return claim.granted.result()
        except BaseException:
            if claim.granted.done() and not claim.granted.cancelled():
                self.release(claim.lease_id)
            elif claim in self._waiting:
                self._waiting.remove(claim)
                self._dispatch()
            raise

    def release(self, lease_id: str) -> bool:
        """Release a lease (False when it was not held: already released or expired)."""
        claim = self._held.pop(lease_id, None)
        if claim is None:
            return False
        self._dispatch()
        return True

    def renew(self, lease_id: str, ttl: float) -> bool:
        """Extend a lease to ``ttl`` seconds from now; False when it is gone (released or expired)."""
        self._expire()
        claim = self._held.get(lease_id)
        if claim is None:
            return False
        claim.ttl = ttl
        claim.expires = time.monotonic() + ttl
        return True

    def release_holder(self, holder: str) -> int:
        """Release every lease of ``holder`` (a client that went away); returns how many."""
        doomed = [lid for lid, c in self._held.items() if c.holder == holder]
        for lid in doomed:
            del self._held[lid]
        if doomed:
            self._dispatch()
        return len(doomed)

    def token(self, lease_id: str) -> int | None:
        """The fencing token of a held lease (None when it is not held)."""
        self._expire()
        claim = self._held.get(lease_id)
        return None if claim is None else claim.token

    def check(self, fences: Sequence[int | Sequence[Any]], path: str | None = None) -> None:
        """Raise ``LockLostError`` (ENOLCK) unless every lease presented in ``fences`` is still held.

        Each fence is a token, or ``(token, paths)`` (the paths name the lock in the error). A mutating
        call made under locks presents their fences; the owner runs this first, so a holder whose lease
        expired, was released or died with a restarted owner never writes under it.
        """
        if not fences:
            return
        self._expire()
        live = {c.token for c in self._held.values()}
        for fence in fences:
            token, paths = (fence, ()) if isinstance(fence, int) else (int(fence[0]), tuple(fence[1]))
            if token not in live:
                epoch, n = divmod(token, 1 << 32)
                lock = f"the lock on {', '.join(paths)}" if paths else "a lock"
                raise fs_error(
                    errno.ENOLCK,
                    path,
                    f"lock lost: {lock} (fencing token {epoch}:{n}) expired, was released or died with "
                    "a restarted owner, so this write was refused (nothing written); take the lock "
                    "again and re-read before writing",
                )

    def held(self) -> list[HeldLease]:
        """Current leases (for diagnostics and tests)."""
        self._expire()
        return [HeldLease(lid, c.paths, c.subtree, c.holder) for lid, c in self._held.items()]

    # ------------------------------------------------------------------ internals

    def _grantable(self, claim: _Claim) -> bool:
        return not any(claim.conflicts(h) for h in self._held.values())

    def _grant(self, claim: _Claim) -> None:
        claim.token = (self.epoch << 32) + next(self._grants)
        if claim.ttl is not None:
            claim.expires = time.monotonic() + claim.ttl
        self._held[claim.lease_id] = claim

    def _dispatch(self) -> None:
        """Grant waiting requests in arrival order; a request waits behind earlier conflicting ones."""
        blocked: list[_Claim] = []
        still: list[_Claim] = []
        for claim in self._waiting:
            assert claim.granted is not None
            if claim.granted.done():
                continue
            if self._grantable(claim) and not any(claim.conflicts(b) for b in blocked):
                if self.gone is not None and self.gone(claim.holder):
                    # Its caller died while it waited (nothing cancels the call then): granted, it
                    # would hold every later request up for a whole lease nobody renews.
                    claim.granted.set_exception(
                        fs_error(
                            errno.ESRCH, claim.paths[0], "lock request dropped: its client process is gone"
                        )
                    )
                    continue
                self._grant(claim)
                claim.granted.set_result(claim.lease_id)
            else:
                blocked.append(claim)
                still.append(claim)
        self._waiting = still

    def _expire(self) -> None:
        now = time.monotonic()
        lapsed = [lid for lid, c in self._held.items() if c.expires is not None and c.expires <= now]
        for lid in lapsed:
            del self._held[lid]
        if lapsed:
            self._dispatch()

    def _next_expiry_in(self) -> float | None:
        expiries = [c.expires for c in self._held.values() if c.expires is not None]
        if not expiries:
            return None
        return max(min(expiries) - time.monotonic(), 0.0) + 0.001
