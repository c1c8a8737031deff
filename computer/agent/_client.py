"""``AgentClient``: call an agent by name; re-spawn it when it hibernated, was killed, or is closing.

A raw actor handle dies with its actor. The client keeps the class and the name instead: when a call
finds the actor gone (``RayActorError``) or leaving (:class:`AgentMovedError`), it waits until the
name is released, spawns a new actor (which reads its state back from the workspace) and retries.
Turns carry a ``turn_id`` and approvals a call id, so a retry of a request whose turn was already
committed returns the committed reply instead of running it twice.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from ..actors import NAMESPACE, named_actor
from ..actors.raycompat import actor_id
from ..config import Settings
from ._spawn import agent_actor_name, spawn
from ._turn import AgentMovedError, PendingCall, Reply

__all__ = ["AgentClient"]


class AgentClient:
    """The agent ``name`` of class ``agent_class``, reached through whichever actor currently runs it."""

    def __init__(
        self,
        agent_class: Any,
        name: str,
        *,
        config: Settings | dict[str, Any] | None = None,
        recover_within: float = 60.0,
    ) -> None:
        self.agent_class = agent_class
        self.name = name
        self.config = config
        self.recover_within = recover_within
        self._handle: Any = None

    @property
    def handle(self) -> Any:
        """The current actor handle (spawned on first use)."""
        if self._handle is None:
            self._handle = spawn(self.agent_class, self.name, config=self.config)
        return self._handle

    async def chat(self, message: str) -> Reply:
        turn_id = uuid.uuid4().hex
        return await self._call("chat", message, turn_id)  # type: ignore[no-any-return]

    async def chat_stream(self, message: str) -> AsyncIterator[dict[str, Any]]:
        """The turn's events; a retry after a failure replays only the committed ``reply`` event."""
        turn_id = uuid.uuid4().hex
        deadline = time.monotonic() + self.recover_within
        while True:
            handle = self.handle
            try:
                async for ref in handle.chat_stream.remote(message, turn_id):
                    yield await ref
                return
            except (AgentMovedError, _actor_errors()) as exc:
                await self._recover(handle, deadline, exc)

    async def approve(self, call_id: str) -> Reply:
        return await self._call("approve", call_id)  # type: ignore[no-any-return]

    async def reject(self, call_id: str, reason: str | None = None) -> Reply:
        return await self._call("reject", call_id, reason)  # type: ignore[no-any-return]

    async def pending(self) -> list[PendingCall]:
        return await self._call("pending")  # type: ignore[no-any-return]

    async def call(self, method: str, *args: Any) -> Any:
        """Any other method of the agent (``history``, ``add_mcp_server``, ...), with the same recovery."""
        return await self._call(method, *args)

    async def _call(self, method: str, *args: Any) -> Any:
        deadline = time.monotonic() + self.recover_within
        while True:
            handle = self.handle
            try:
                return await getattr(handle, method).remote(*args)
            except (AgentMovedError, _actor_errors()) as exc:
                await self._recover(handle, deadline, exc)

    async def _recover(self, handle: Any, deadline: float, exc: BaseException) -> None:
        """Forget the dead actor and wait (bounded) until its name is free for a new one."""
        if time.monotonic() > deadline:
            raise exc
        self._handle = None
        dead = actor_id(handle)
        while time.monotonic() < deadline:
            try:
                current = await asyncio.to_thread(
                    named_actor, agent_actor_name(self.name, self.config), NAMESPACE
                )  # bounded (``ClusterSilentError``), off the loop
            except ValueError:
                return  # released: the next call spawns a new actor
            if actor_id(current) != dead:
                return  # someone else already spawned the next one
            await asyncio.sleep(0.05)  # Ray offers nothing to await for a name's release
        raise exc


def _actor_errors() -> type[BaseException]:
    from ray.exceptions import RayActorError

    return RayActorError
