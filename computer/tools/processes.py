"""The optional ``processes`` and ``kill`` tools: what runs in a workspace's live sandbox, and stopping it.

Runs of one workspace on one backend share a live sandbox while it lives (SPEC section 10), so a
program started in the background by one ``exec`` call keeps running after it. These two tools let
the model see and stop such programs:

- ``processes {backend?}`` → ``{backend?, count, processes: [{pid, command, started, cpuSeconds,
  rssBytes, ppid, execId?, log?}]}`` over ``workspace.runtime.processes(backend=...)``; ``started`` is
  ISO 8601 UTC, ``log`` the workspace file holding what the process printed after its run returned,
  ``command`` cut to :data:`COMMAND_CHARS` characters (``…`` last).
- ``kill {pid, backend?}`` → ``{killed: pid, exited, backend?}`` over ``workspace.runtime.kill_process``;
  a pid the sandbox does not have is an error naming it. SIGKILL is asynchronous (the process is gone
  once the kernel reaps it), so the tool then watches ``processes`` for up to ``KILL_WAIT`` seconds:
  ``exited: true`` means a ``processes`` call made now no longer lists it; ``false`` that it was still
  listed when the tool stopped watching (a process stuck in uninterruptible I/O).

Both are off by default (``create_tools(workspace, processes=True)``, or the same option of any
adapter): most agents never start background programs, and a smaller tool list is a better prompt.
``backend`` omitted lets the runtime choose (its default live-sandbox backend). Neither tool is
forwarded whole to the owner: each is one runtime call, which over a ``get_workspace`` client is
already one round trip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, create_model

from ._input import ToolInput, Whole
from ._tool import Tool, ToolUpdate

__all__ = ["PROCESS_TOOLS", "create_kill_tool", "create_processes_tool", "process_dict"]

PROCESS_TOOLS = ("processes", "kill")
KILL_WAIT = 5.0  # seconds kill watches for the process to leave the sandbox's process table
# Characters of a command line the tool shows at most (``…`` last when cut): a listing is every
# process, page after page, each command line up to 4,096 characters: 250 processes of 4,096 emoji
# were ~4 MB of one tool result.
COMMAND_CHARS = 512

PROCESSES_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "backend": {"type": "string"},
        "count": {"type": "integer"},
        "processes": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "pid": {"type": "integer"},
                    "command": {"type": "string"},
                    "started": {"type": "string"},
                    "cpuSeconds": {"type": "number"},
                    "rssBytes": {"type": "integer"},
                    "ppid": {"type": "integer"},
                    "execId": {"type": "string"},
                    "log": {"type": "string"},
                },
                "required": ["pid", "command", "started", "cpuSeconds", "rssBytes"],
            },
        },
        "error": {"type": "string"},
    },
}

KILL_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "killed": {"type": "integer"},
        "exited": {"type": "boolean"},
        "backend": {"type": "string"},
        "error": {"type": "string"},
    },
}


def process_dict(info: Any) -> dict[str, Any]:
    """One ``ProcessInfo`` as the tool shows it (camelCase, ``started`` as ISO 8601 UTC)."""
    started = info.started
    if isinstance(started, datetime):
        if started.tzinfo is None:
            started = started.replace(tzinfo=UTC)
        started = started.astimezone(UTC).isoformat().replace("+00:00", "Z")
    command = str(info.command)
    out: dict[str, Any] = {
        "pid": int(info.pid),
        "command": command if len(command) <= COMMAND_CHARS else command[: COMMAND_CHARS - 1] + "\u2026",
        "started": str(started),
        "cpuSeconds": float(info.cpu_seconds),
        "rssBytes": int(info.rss_bytes),
    }
    ppid = getattr(info, "ppid", None)
    if ppid:
        out["ppid"] = int(ppid)
    for key, attr in (("execId", "exec_id"), ("log", "log")):
        value = getattr(info, attr, None)
        if value:
            out[key] = str(value)
    return out


def _backend_field(workspace: Any) -> tuple[Any, Any]:
    """``backend``: one of the workspace's backend ids, optional (the runtime's default)."""
    ids = [info.id for info in workspace.runtime.backends()]
    kind: Any = Literal[tuple(ids)] if ids else str

    def shape(schema: dict[str, Any]) -> None:
        # pydantic writes anyOf[enum, null]; a plain optional string enum reads better everywhere.
        schema.pop("anyOf", None)
        schema.pop("default", None)
        schema["type"] = "string"
        if ids:
            schema["enum"] = list(ids)

    return (
        kind | None,
        Field(
            default=None,
            description="The backend whose live sandbox to look at"
            + (f": {', '.join(ids)}" if ids else "")
            + ". Default: the runtime's.",
            json_schema_extra=shape,
        ),
    )


def _backend_kwargs(backend: str | None) -> dict[str, Any]:
    return {} if backend is None else {"backend": backend}


def _with_backend(result: dict[str, Any], backend: str | None) -> dict[str, Any]:
    return {"backend": backend, **result} if backend is not None else result


def create_processes_tool(workspace: Any, *, with_kill: bool = True) -> Tool:
    """The ``processes`` tool over ``workspace.runtime.processes``; ``with_kill``: the description
    points to the ``kill`` tool (leave it False when there is none, e.g. a read-only tool set)."""
    runtime = workspace.runtime
    input_model: type[ToolInput] = create_model(
        "ProcessesInput", __base__=ToolInput, backend=_backend_field(workspace)
    )

    async def handler(params: Any, on_update: ToolUpdate | None) -> dict[str, Any]:
        found = await runtime.processes(**_backend_kwargs(params.backend))
        listed = [process_dict(info) for info in found]
        return _with_backend({"count": len(listed), "processes": listed}, params.backend)

    return Tool(
        name="processes",
        description=(
            "List the programs still running in the workspace's live sandbox (for example ones an exec "
            "call started in the background with &): pid, command, start time (UTC), CPU seconds, "
            "resident memory in bytes and, when known, the exec run that started it and the workspace "
            "file (log) holding what it printed since."
            + (" Pass a pid to kill to stop one." if with_kill else "")
        ),
        input_model=input_model,
        handler=handler,
        output_schema=PROCESSES_OUTPUT_SCHEMA,
    )


def create_kill_tool(workspace: Any) -> Tool:
    """The ``kill`` tool over ``workspace.runtime.kill_process``."""
    runtime = workspace.runtime
    input_model: type[ToolInput] = create_model(
        "KillInput",
        __base__=ToolInput,
        pid=(
            Whole,
            Field(ge=1, description="The process id, as processes lists it (the sandbox's own pid)."),
        ),
        backend=_backend_field(workspace),
    )
    kill: Callable[..., Any] = runtime.kill_process

    async def handler(params: Any, on_update: ToolUpdate | None) -> dict[str, Any]:
        try:
            await kill(params.pid, **_backend_kwargs(params.backend))
        except ProcessLookupError as exc:
            detail = str(exc)
            if str(params.pid) not in detail:
                detail = f"no process {params.pid} in the live sandbox" + (f" ({detail})" if detail else "")
            raise ProcessLookupError(detail) from None
        exited = await _gone(runtime, params.pid, _backend_kwargs(params.backend))
        return _with_backend({"killed": params.pid, "exited": exited}, params.backend)

    return Tool(
        name="kill",
        description=(
            "Stop one program running in the workspace's live sandbox (SIGKILL), by the pid that "
            "processes lists. What it already wrote under /workspace is kept."
        ),
        input_model=input_model,
        handler=handler,
        mutating=True,
        destructive=True,
        output_schema=KILL_OUTPUT_SCHEMA,
    )


async def _gone(runtime: Any, pid: int, kwargs: dict[str, Any]) -> bool:
    """Whether ``pid`` leaves the process table within ``KILL_WAIT`` seconds (checked with backoff)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + KILL_WAIT
    delay = 0.01
    while True:
        if all(info.pid != pid for info in await runtime.processes(**kwargs)):
            return True
        if loop.time() >= deadline:
            return False
        # The runtime offers no event for "reaped": poll, backing off to 0.2 s.
        await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
        delay = min(delay * 2, 0.2)
