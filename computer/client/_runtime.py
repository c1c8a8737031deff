"""The client's runtime: backends from the creation snapshot, executions forwarded to the owner."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..runtime.types import BackendInfo, ExecResult, ExecSnapshot, ProcessInfo
from ._connection import Connection

__all__ = ["EXEC_START_WAIT", "ClientExecHandle", "ClientRuntime"]

# ``exec`` lets the owner wait this long for the run to end before it answers: a short command's result
# comes back with its id (``result()`` then makes no second round trip); a longer one's ``exec`` answers
# this much later than it would otherwise (its output is not lost: snapshots start from the beginning).
EXEC_START_WAIT = 0.025
# Seconds a cancelled ``exec`` waits in the background for the owner's answer, to kill what it started.
UNHEARD_WAIT = 60.0
_UNHEARD: set[asyncio.Future[None]] = set()  # those waits (kept from the garbage collector)
log = logging.getLogger(__name__)


class ClientExecHandle:
    """One execution on the owner; iterating streams its snapshots (cancelled when the loop stops)."""

    def __init__(
        self, connection: Connection, id: str, backend: str, result: ExecResult | None = None
    ) -> None:
        self._conn = connection
        self.id = id
        self.backend = backend
        self._result = result  # the run had ended when ``exec`` answered

    def __aiter__(self) -> AsyncIterator[ExecSnapshot]:
        return self._conn.stream("exec_snapshots", self.id, waits=True)

    async def result(self) -> ExecResult:
        if self._result is not None:
            return self._result
        result: ExecResult = await self._conn.request("exec_result", self.id, retry_safe=True, waits=True)
        return result

    async def kill(self) -> None:
        await self._conn.request("kill_exec", self.id)

    def __repr__(self) -> str:
        return f"ClientExecHandle(id={self.id!r}, backend={self.backend!r})"


class ClientRuntime:
    """``backends()`` answers from the snapshot taken when the client was created (no round trip)."""

    def __init__(
        self,
        connection: Connection,
        backends: list[BackendInfo],
        *,
        caller: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self._conn = connection
        self._backends = list(backends)
        self._caller = caller  # who starts a run, for its audit record on the owner

    def backends(self) -> list[BackendInfo]:
        return list(self._backends)

    async def exec(
        self,
        source: str,
        *,
        backend: str | None = None,
        id: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        input: Any = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (pinned API: the run's own limit)
        output: Any = None,
    ) -> ClientExecHandle:
        given = {
            "backend": backend,
            "id": id,
            "cwd": cwd,
            "env": env,
            "input": input,
            "stdin": stdin,
            "timeout": timeout,
            "output": output,
        }
        kwargs = {k: v for k, v in given.items() if v is not None}
        who = self._caller() if self._caller is not None else None
        exec_id, backend_id, result = await self._conn.request(
            "exec_start", source, kwargs, EXEC_START_WAIT, who, on_cancel=self._end_unheard
        )
        return ClientExecHandle(self._conn, exec_id, backend_id, result)

    def _end_unheard(self, ref: Any) -> None:
        """``exec`` was cancelled: a run the owner started anyway (its answer was on its way, or the
        cancel came late) is killed, since its caller never learnt its id (before, it ran on, in the
        pool or the live sandbox, an orphan; tests/pools/test_pool_cancels.py). A cancel that reaches
        the owner before the run starts leaves nothing to kill (the answer is a cancellation)."""

        async def end() -> None:
            try:
                async with asyncio.timeout(UNHEARD_WAIT):
                    kind, value = await ref
                    if kind == "ok" and value is not None and value[2] is None:
                        await self._conn.request("kill_exec", value[0])
            except (
                Exception,
                asyncio.CancelledError,
            ):  # cancelled there, failed, or the owner gone: nothing left to end
                log.debug("ending the run of a cancelled exec", exc_info=True)

        task = asyncio.ensure_future(end())
        _UNHEARD.add(task)
        task.add_done_callback(_UNHEARD.discard)

    async def get_exec(self, id: str) -> ClientExecHandle:
        exec_id, backend_id = await self._conn.request("get_exec", id, retry_safe=True)
        return ClientExecHandle(self._conn, exec_id, backend_id)

    async def kill_exec(self, id: str) -> None:
        await self._conn.request("kill_exec", id)

    async def dispose_exec(self, id: str) -> None:
        await self._conn.request("dispose_exec", id)

    async def processes(self, backend: str | None = None) -> list[ProcessInfo]:
        """The processes of the workspace's live sandbox (SPEC section 10)."""
        return list(await self._conn.request("live_processes", backend, retry_safe=True))

    async def kill_process(self, pid: int, backend: str | None = None) -> None:
        await self._conn.request("kill_process", pid, backend)

    async def end_sandbox(self, backend: str | None = None) -> bool:
        return bool(await self._conn.request("end_sandbox", backend))
