"""One client's link to an owner actor: calls, streams, and recovery when the owner went away.

Recovery rules (ARCHITECTURE, durable-object emulation):
- the owner answered "moved" (it is hibernating or was taken over and did not run the call): re-resolve
  by name and retry, until a bounded deadline;
- the owner died during the call: retry once after re-resolving if the call is idempotent, or if the
  directory shows that owner released its lease itself (it hibernated, so it ran nothing after that);
  otherwise raise :class:`WorkspaceUnavailableError` (EAGAIN), since a mutation may or may not have
  committed.
Only managed owners (created by ``workspace_actor``) are re-created; a ``WorkspaceHost`` actor of the
user's is not ours to re-create.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import ray
from ray.exceptions import RayActorError

from ..actors import WorkspaceUnavailableError, open_directory, workspace_actor
from ..actors.raycompat import streaming
from ..actors.wire import Reply, unwrap
from ..config import Settings

__all__ = ["Connection"]

_AHEAD = 4  # stream pieces an owner may produce before the consumer takes them
_MOVED_DEADLINE = 30.0  # seconds to wait for a hibernating owner to exit and a new one to answer


class Connection:
    """Calls RPC methods of one workspace's owner and unwraps their replies."""

    def __init__(self, handle: Any, *, name: str | None, managed: bool) -> None:
        self.handle = handle
        self.name = name
        self.managed = managed
        self.epoch = 0
        self.config: Settings | None = None

    def learn(self, info: dict[str, Any]) -> None:
        """Remember who the owner is (from ``describe``)."""
        self.name = str(info["name"])
        self.managed = bool(info["managed"])
        self.epoch = int(info["epoch"])
        if info.get("config") is not None:
            self.config = Settings.model_validate(info["config"])

    # -- calls -----------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        *args: Any,
        retry_safe: bool = False,
        on_cancel: Callable[[Any], None] | None = None,
    ) -> Any:
        """Call ``method`` on the owner and return its value (or raise its error).

        When the caller is cancelled, the owner's side is cancelled too; ``on_cancel`` then receives
        the call's ``ObjectRef`` to undo what the owner may have done before the cancel reached it.
        """
        deadline = time.monotonic() + _MOVED_DEADLINE
        died_once = False
        while True:
            handle = self.handle
            ref = getattr(handle, method).remote(*args)
            try:
                reply: Reply = await ref
            except asyncio.CancelledError:
                _cancel(ref)
                if on_cancel is not None:
                    on_cancel(ref)
                raise
            except RayActorError as exc:
                # An idempotent call keeps retrying while Ray restarts the owner (a restart takes
                # longer than one retry); a mutation is retried once, only after a clean release.
                again = retry_safe and time.monotonic() < deadline
                if not self.managed or not (again or (not died_once and await self._released_cleanly())):
                    raise self._unavailable(f"its owner died during {method} ({type(exc).__name__})") from exc
                if died_once:
                    await asyncio.sleep(0.1)
                died_once = True
                await self._reresolve(handle)
                continue
            if reply[0] == "moved":
                self._moved(reply, deadline)
                await self._reresolve(handle, backoff=True)
                continue
            return unwrap(reply)

    async def stream(self, method: str, *args: Any, retry_safe: bool = True) -> AsyncIterator[Any]:
        """Iterate an owner's streaming generator; stopping early (or being cancelled) cancels it."""
        deadline = time.monotonic() + _MOVED_DEADLINE
        died_once = False
        started = False
        while True:
            handle = self.handle
            # Backpressure: the owner runs at most a few pieces ahead of this consumer.
            gen = streaming(getattr(handle, method), _AHEAD).remote(*args)
            retry = False
            try:
                async for ref in gen:
                    item = await ref
                    if isinstance(item, tuple):
                        if item[0] == "moved" and not started:
                            self._moved(item, deadline)
                            retry = True
                            break
                        unwrap(item)  # an error reply ends the stream by raising
                    started = True
                    yield item
                if not retry:
                    return
            except RayActorError as exc:
                if started or died_once or not self.managed or not retry_safe:
                    raise self._unavailable(f"its owner died during {method} ({type(exc).__name__})") from exc
                died_once = True
            finally:
                _cancel(gen)
            await self._reresolve(handle, backoff=retry)

    # -- recovery --------------------------------------------------------------------------------

    def _unavailable(self, detail: str) -> WorkspaceUnavailableError:
        return WorkspaceUnavailableError(self.name or "?", detail)

    def _moved(self, reply: Reply, deadline: float) -> None:
        info = reply[1] or {}
        self.name = self.name or info.get("name")
        if not (self.managed or info.get("managed")) or self.name is None:
            raise self._unavailable("its owner closed it")
        self.managed = True
        if time.monotonic() > deadline:
            raise self._unavailable("its owner did not come back in time")

    async def _released_cleanly(self) -> bool:
        """Whether the owner we last spoke to gave its lease up itself (then it ran nothing after)."""
        if self.name is None or self.config is None or not self.epoch:
            return False
        config, name, epoch = self.config, self.name, self.epoch

        def check() -> bool:
            directory = open_directory(config)
            try:
                record = directory.get(name)
            finally:
                directory.close()
            return record is not None and record.released_epoch == epoch

        return await asyncio.to_thread(check)

    async def _reresolve(self, stale: Any, *, backoff: bool = False) -> None:
        """Find (or re-create) the owner by name, then learn its epoch."""
        if self.name is None:
            raise self._unavailable("its owner is gone and its name is unknown")
        if backoff:
            # The old owner still holds the name while it finishes closing.
            await asyncio.sleep(0.02)
        name, config = self.name, self.config
        self.handle = await asyncio.to_thread(workspace_actor, name, config=config)
        try:
            reply: Reply = await self.handle.describe.remote()
        except RayActorError:
            return  # the retried call reports it
        if reply[0] == "ok":
            self.learn(reply[1])


def _cancel(ref: Any) -> None:
    try:
        ray.cancel(ref)
    except Exception:  # already finished, or its owner is gone: nothing left to stop
        pass
