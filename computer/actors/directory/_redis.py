"""The cluster directory: records in Redis, msgpack-encoded, updated with optimistic transactions.

Redis going away (restarting, stopped, unreachable) is retried with backoff for up to 30 s
(``retry_for``) on every call; after that the call raises
:class:`~computer.actors.WorkspaceUnavailableError` (EAGAIN) naming the cause, never a raw ``redis``
exception. Every call may be repeated safely: a lease acquire repeated by the same owner gets the same
epoch back, a renew extends again, and a release repeated answers False (already released).

One clock: Redis's (``TIME``). A lease's expiry is written and judged inside the transaction by the
server's clock, never by the caller's ``time.time()``: before, a deletion's lease written by one node
was judged by another node's clock, so a node whose clock ran minutes ahead took over a live deletion
(and its owner's writes then went into a file the deletion unlinked), and a deletion written by a node
whose clock ran ahead stayed "being deleted" (EBUSY) for minutes after it died. :meth:`get` gives the
expiry in the reader's clock (what is left of the lease by Redis's clock, from the reader's now), so
``record.lease_live()`` and every caller comparing it with ``time.time()`` judge by Redis's clock too.
``last_active`` stays the writer's wall clock (what the listing shows; no decision rests on it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import msgpack

from .._errors import WorkspaceUnavailableError
from ._record import WorkspaceRecord, WorkspaceState, refuse_while_deleting

if TYPE_CHECKING:
    import redis

__all__ = ["RedisDirectory"]

T = TypeVar("T")

RETRY_FOR = 30.0  # seconds a call keeps retrying while Redis is unreachable (README: "retried for 30 s")


class RedisDirectory:
    """A :class:`Directory` in Redis: one key per workspace (``<prefix>ws:<name>``) plus a name set."""

    def __init__(self, url: str, *, prefix: str = "computer:dir:", retry_for: float = RETRY_FOR) -> None:
        self.url = url
        self.prefix = prefix
        self.retry_for = retry_for
        import redis  # here, not at the top: a process without Redis configured never pays ~0.2 s for it

        # Bounded socket timeouts: a stopped (SIGSTOP) Redis must not hang a caller past retry_for.
        self._redis: redis.Redis = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self._names_key = f"{prefix}names"

    def _key(self, name: str) -> str:
        return f"{self.prefix}ws:{name}"

    def _retrying(self, name: str, call: Callable[[], T]) -> T:
        """Run ``call``, retrying connection failures with backoff within ``retry_for`` seconds."""
        import redis

        deadline = time.monotonic() + self.retry_for
        pause = 0.05
        while True:
            try:
                return call()
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
                # ConnectionError also covers a Redis that is still loading its data after a restart.
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkspaceUnavailableError(
                        name, f"the directory (Redis at {self.url}) is unreachable: {exc}"
                    ) from exc
                time.sleep(min(pause, left))
                pause = min(pause * 2, 1.0)

    def get(self, name: str) -> WorkspaceRecord | None:
        """The record of ``name``, its lease's expiry in this process's clock (Redis's ``TIME`` read
        with it: what is left of the lease is Redis's say)."""

        def read() -> tuple[Any, Any]:
            pipe = self._redis.pipeline(transaction=False)  # one round trip; TIME just after the GET
            pipe.get(self._key(name))
            pipe.time()
            raw, (seconds, micros) = pipe.execute()
            return raw, int(seconds) + int(micros) / 1e6

        raw, server = self._retrying(name, read)
        if raw is None:
            return None
        record = _decode(name, raw)
        if record.lease_expires <= 0:
            return record  # released: nothing to translate
        return replace(record, lease_expires=record.lease_expires - server + time.time())

    def _update(
        self, name: str, change: Callable[[WorkspaceRecord | None, float], tuple[WorkspaceRecord | None, T]]
    ) -> T:
        """Read-modify-write one record atomically (WATCH/MULTI, retried on a concurrent change);
        ``change`` gets the record and Redis's clock (``TIME``, read in the transaction)."""
        key = self._key(name)

        def txn(pipe: Any) -> T:
            raw, now = _read(pipe, key)  # one round trip, as the GET alone was (commands run at once here)
            new, answer = change(None if raw is None else _decode(name, raw), now)
            pipe.multi()
            if new is not None:
                pipe.set(key, msgpack.packb(new.to_wire()))
                pipe.sadd(self._names_key, name)
            return answer

        result: Any = self._retrying(
            name,
            lambda: self._redis.transaction(txn, key, value_from_callable=True),  # type: ignore[arg-type]
        )
        return result  # type: ignore[no-any-return]

    def acquire_lease(
        self, name: str, node: str, owner_id: str, ttl: float, *, host: str | None = None
    ) -> int:
        def change(old: WorkspaceRecord | None, now: float) -> tuple[WorkspaceRecord, int]:
            if old is not None:
                refuse_while_deleting(name, old.node, old.lease_expires, node, now)
            if old is None:
                epoch = 1
            elif old.owner == owner_id and old.lease_live(now):
                epoch = old.epoch
            else:
                epoch = old.epoch + 1
            released = 0 if old is None else old.released_epoch
            new = WorkspaceRecord(
                name, node, owner_id, epoch, now + ttl, time.time(), "active", released, host
            )
            return new, epoch

        return self._update(name, change)

    def renew_lease(
        self, name: str, owner_id: str, epoch: int, ttl: float, *, last_active: float | None = None
    ) -> bool:
        def change(old: WorkspaceRecord | None, now: float) -> tuple[WorkspaceRecord | None, bool]:
            if old is None or old.owner != owner_id or old.epoch != epoch or old.state != "active":
                return None, False
            active = max(old.last_active, last_active or 0.0)
            new = WorkspaceRecord(
                name,
                old.node,
                owner_id,
                epoch,
                now + ttl,
                active,
                "active",
                old.released_epoch,
                old.host,
            )
            return new, True

        return self._update(name, change)

    def restore_lease(
        self,
        name: str,
        node: str,
        owner_id: str,
        epoch: int,
        ttl: float,
        *,
        host: str | None = None,
        last_active: float | None = None,
    ) -> bool:
        """Write back the lease ``owner_id`` holds under ``epoch`` when Redis has no record of ``name`` at
        all (restarted empty, flushed, the key evicted) or only a stale one (``WorkspaceRecord.stale_for``:
        an older epoch, a Redis restored from an old snapshot); True then, or when that lease is already
        there. Never over a record of a newer epoch (a takeover's, a deletion's: they win). The caller
        checks first that its file still carries ``epoch`` (``_restore.restore_lost_lease``). The
        released epoch is not known any more: 0, so no client takes a call for provably unrun."""

        def change(old: WorkspaceRecord | None, now: float) -> tuple[WorkspaceRecord | None, bool]:
            if old is not None and not old.stale_for(owner_id, epoch, now):
                return None, old.owner == owner_id and old.epoch == epoch and old.state == "active"
            active = time.time() if last_active is None else last_active
            return WorkspaceRecord(name, node, owner_id, epoch, now + ttl, active, "active", 0, host), True

        return self._update(name, change)

    def release_lease(self, name: str, owner_id: str, epoch: int, *, hibernating: bool = False) -> bool:
        def change(old: WorkspaceRecord | None, now: float) -> tuple[WorkspaceRecord | None, bool]:
            if old is None or old.owner != owner_id or old.epoch != epoch or old.state != "active":
                return None, False
            state: WorkspaceState = "hibernating" if hibernating else "closed"
            new = WorkspaceRecord(
                name, old.node, owner_id, epoch, 0.0, old.last_active, state, epoch, old.host
            )
            return new, True

        return self._update(name, change)

    def remove(self, name: str, owner_id: str) -> bool:
        key = self._key(name)

        def txn(pipe: Any) -> bool:
            raw = pipe.get(key)
            mine = raw is not None and _decode(name, raw).owner == owner_id
            pipe.multi()
            if mine:
                pipe.delete(key)
                pipe.srem(self._names_key, name)
            return mine

        removed: Any = self._retrying(
            name,
            lambda: self._redis.transaction(txn, key, value_from_callable=True),  # type: ignore[arg-type]
        )
        return bool(removed)

    def names(self) -> list[str]:
        raw: Any = self._retrying("*", lambda: self._redis.smembers(self._names_key))
        names = (n.decode("utf-8", "surrogatepass") if isinstance(n, bytes) else str(n) for n in raw)
        return sorted(names, key=lambda n: n.encode("utf-8", "surrogatepass"))

    def close(self) -> None:
        self._redis.close()

    def __repr__(self) -> str:
        return f"RedisDirectory({self.url!r})"


# The record and Redis's clock in one command (a read-only script: ``TIME`` needs no replication care).
_READ = "return {redis.call('GET', KEYS[1]), redis.call('TIME')}"


def _read(client: Any, key: str) -> tuple[bytes | None, float]:
    """The raw record at ``key`` and Redis's ``TIME`` in seconds, in one round trip (``client``: the
    connection, or a transaction's pipeline while it watches, where commands run at once)."""
    raw, (seconds, micros) = client.eval(_READ, 1, key)
    return raw or None, int(seconds) + int(micros) / 1e6


def _decode(name: str, raw: bytes) -> WorkspaceRecord:
    data = msgpack.unpackb(raw)
    if not isinstance(data, dict):
        raise ValueError(f"corrupt directory record for {name!r}")
    return WorkspaceRecord.from_wire(name, data)
