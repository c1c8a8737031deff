"""A scripted runtime surface for the exec tool's shaping logic (arguments, notes, cancellation).

The real backends are exercised in ``test_scenario.py``; this fake only lets a test decide exactly what
a run reports and observe what the tool asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from computer.runtime.types import BackendInfo, ExecResult, ExecSnapshot


@dataclass
class ScriptedHandle:
    id: str
    backend: str
    snapshots: list[ExecSnapshot]
    final: ExecResult
    hang: bool = False
    killed: bool = False
    started: asyncio.Event = field(default_factory=asyncio.Event)
    killed_event: asyncio.Event = field(default_factory=asyncio.Event)

    def __aiter__(self) -> AsyncIterator[ExecSnapshot]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ExecSnapshot]:
        for snapshot in self.snapshots:
            yield snapshot
        self.started.set()
        if self.hang:
            await asyncio.Event().wait()

    async def result(self) -> ExecResult:
        if self.killed:  # what the runtime reports for a run it killed
            return ExecResult("cancelled", 137, "", "", id=self.id, backend=self.backend, error="killed")
        return self.final

    async def kill(self) -> None:
        self.killed = True
        self.killed_event.set()


@dataclass
class ScriptedRuntime:
    infos: list[BackendInfo]
    final: ExecResult = field(default_factory=lambda: ExecResult("completed", 0, "ok\n", ""))
    snapshots: list[ExecSnapshot] = field(default_factory=list)
    hang: bool = False
    calls: list[dict[str, Any]] = field(default_factory=list)
    handles: list[ScriptedHandle] = field(default_factory=list)
    waiting: asyncio.Event = field(default_factory=asyncio.Event)  # set once a handle has yielded all

    def backends(self) -> list[BackendInfo]:
        return list(self.infos)

    async def exec(self, source: str, **kwargs: Any) -> ScriptedHandle:
        self.calls.append({"source": source, **kwargs})
        backend = kwargs.get("backend") or self.infos[0].id
        handle = ScriptedHandle(
            f"exec-{len(self.calls)}",
            backend,
            self.snapshots,
            self.final,
            hang=self.hang,
            started=self.waiting,
        )
        self.handles.append(handle)
        return handle


@dataclass
class ScriptedWorkspace:
    runtime: ScriptedRuntime
    id: str = "scripted"


SHELL = BackendInfo("shell", "command", False, "Bash with coreutils; no network.")
PYTHON = BackendInfo("python", "module", True, "Python 3 with the workspace module.")
BARE = BackendInfo("custom", "command", False, "")
