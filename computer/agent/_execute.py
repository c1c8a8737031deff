"""The ``execute`` tool: model-written Python in the python backend, with ``tools.*`` and ``workspace``.

The backend runs :data:`DRIVER`, whose ``main(input)`` compiles the model's code as ``<execute>`` in a
namespace holding ``tools`` (each attribute calls one of the agent's own tools back through the
channel, see ``_sandbox_calls.py``) and ``workspace`` (the backend's module over the workspace fs).
The value is what the code's ``main()`` returns, else its ``result`` variable. Every run is recorded
in ``/.computer/agent/executions/`` (code, status, value, output, tool calls). A run is bounded by
``timeout`` (``Agent.execute_timeout``; past it the run is ``cancelled`` with a "timed out" error),
and a cancelled turn kills its run and records it as ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_core import to_jsonable_python

from ..runtime import TIMEOUT_EXIT_CODE
from ..surface import WorkspaceSurface
from ._store import AgentStore

__all__ = ["DRIVER", "EXECUTE_DESCRIPTION", "CodeRunner", "python_backend_id", "run_bounded"]

log = logging.getLogger(__name__)

EXECUTE_DESCRIPTION = (
    "Run Python code in a sandbox (no network). `tools.<name>(**arguments)` calls one of your tools and "
    "returns its result; `workspace` has synchronous functions on the workspace files (read_text, "
    "write_file, ls, find, grep, ...). Define main() returning a JSON-able value (or set `result`); "
    "print() output is returned as stdout. Use it to chain many tool calls in one step."
)

# Runs inside the sandbox. ``workspace.call(op, **args)`` sends one operation over the guest's channel.
DRIVER = """
import workspace


class _Tools:
    def __init__(self, call, token, names):
        self._call, self._token, self._names = call, token, list(names)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def tool(**arguments):
            return self._call("agent_tool", token=self._token, name=name, args=arguments)

        tool.__name__ = name
        return tool

    def __dir__(self):
        return self._names


def main(input):
    namespace = {"__name__": "__execute__", "workspace": workspace}
    namespace["tools"] = _Tools(workspace.call, input["token"], input["tools"])
    exec(compile(input["code"], "<execute>", "exec"), namespace)
    if callable(namespace.get("main")):
        return namespace["main"]()
    return namespace.get("result")
"""


def python_backend_id(runtime: Any) -> str:
    """The id of the workspace's callable python backend (a clear error when there is none)."""
    for info in runtime.backends():
        if info.callable and info.language == "python":
            return str(info.id)
    raise LookupError("this agent's workspace has no python backend (see Agent.get_backends)")


def timed_out(result: Any, timeout: float | None) -> str | None:
    """The error of a run its timeout cut (None for any other run)."""
    if timeout is not None and result.status == "cancelled" and result.exit_code == TIMEOUT_EXIT_CODE:
        return f"timed out after {timeout:g} s"
    return None


async def run_bounded(handle: Any, on_cancel: Callable[[], Awaitable[None]] | None = None) -> Any:
    """``handle.result()``; when the caller is cancelled (the turn was), the run is killed first
    (and ``on_cancel`` runs), shielded from a second cancellation, before ``CancelledError`` goes on."""
    try:
        return await handle.result()
    except asyncio.CancelledError:

        async def stop() -> None:
            try:
                await handle.kill()
            except Exception:
                log.warning("killing a cancelled run failed", exc_info=True)
            if on_cancel is not None:
                await on_cancel()

        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(asyncio.ensure_future(stop()))
        raise


class CodeRunner:
    """Runs code on the python backend with a tool dispatch, and keeps the execution records."""

    def __init__(
        self, workspace: WorkspaceSurface, context: Any, store: AgentStore, timeout: float | None = None
    ) -> None:
        self.workspace = workspace
        self.context = context
        self.store = store
        self.timeout = timeout

    async def run(
        self,
        code: str,
        tool_names: list[str],
        dispatch: Callable[[str, dict[str, Any]], Awaitable[Any]],
    ) -> dict[str, Any]:
        backend = python_backend_id(self.workspace.runtime)
        started = time.time()
        record: dict[str, Any] = {"id": f"execute-{secrets.token_hex(6)}", "code": code, "started": started}
        calls: list[dict[str, Any]] = []

        async def recorded(name: str, args: dict[str, Any]) -> Any:
            entry: dict[str, Any] = {"tool": name, "args": args}
            calls.append(entry)
            try:
                value = to_jsonable_python(await dispatch(name, args))
            except Exception as exc:
                entry["error"] = f"{type(exc).__name__}: {exc}"
                raise
            entry["ok"] = True
            return value

        name = f"{int(started * 1000):015d}-{record['id']}.json"

        async def cancelled() -> None:
            record.update(
                status="cancelled",
                value=None,
                stdout="",
                stderr="",
                error="the turn was cancelled: the run was killed",
                toolCalls=calls,
                finished=time.time(),
            )
            await self.store.write_json(self.store.path("executions", name), record)

        with self.context.session(recorded) as token:
            handle = await self.workspace.runtime.exec(
                DRIVER,
                backend=backend,
                id=record["id"],
                input={"code": code, "token": token, "tools": tool_names},
                timeout=self.timeout,
            )
            result = await run_bounded(handle, cancelled)
        record.update(
            status=result.status,
            value=result.value,
            stdout=result.stdout,
            stderr=result.stderr,
            error=timed_out(result, self.timeout) or result.error,
            toolCalls=calls,
            finished=time.time(),
        )
        await self.store.write_json(self.store.path("executions", name), record)
        shaped = {k: record[k] for k in ("id", "status", "value", "stdout", "stderr")}
        if result.status != "completed":
            shaped["error"] = record["error"] or _last_line(result.stderr) or result.status
        return shaped

    async def records(self) -> list[dict[str, Any]]:
        """Every stored execution record, oldest first."""
        return await self.store.list_json("executions")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
