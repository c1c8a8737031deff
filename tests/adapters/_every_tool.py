"""A workspace surface that gets every tool from ``create_tools``: the real files of an embedded
``Workspace`` plus a scripted runtime (exec, live-sandbox processes) and a recording assets publisher.

Used where a test must cover every tool through every adapter (validators, fuzzing) without starting
sandboxes: the exec shaping and the runtime's process calls are what is under test there, not the
backends (``test_scenario.py`` runs the real ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from computer import Workspace
from computer.runtime.types import ProcessInfo

from ._fake_runtime import PYTHON, SHELL, ScriptedRuntime

# Arguments that pass validation for each tool (and succeed on the seeded workspace).
GOOD: dict[str, dict[str, Any]] = {
    "read": {"path": "/workspace/a.txt"},
    "ls": {"path": "/workspace"},
    "find": {"pattern": "*"},
    "grep": {"query": "alpha"},
    "write": {"path": "/workspace/new.txt", "content": "x"},
    "edit": {"path": "/workspace/a.txt", "edits": [{"oldText": "alpha", "newText": "ALPHA"}]},
    "delete": {"path": "/workspace/nothing"},
    "exec": {"command": "true"},
    "publish": {"path": "/workspace/a.txt"},
    "processes": {},
    "kill": {"pid": 42},
}


@dataclass
class LiveRuntime(ScriptedRuntime):
    """The scripted runtime with a live sandbox's process table (SPEC section 10 calls)."""

    table: dict[str, list[ProcessInfo]] = field(default_factory=dict)
    process_calls: list[dict[str, Any]] = field(default_factory=list)

    async def processes(self, backend: str = "shell") -> list[ProcessInfo]:
        self.process_calls.append({"op": "processes", "backend": backend})
        return list(self.table.get(backend, []))

    async def kill_process(self, pid: int, backend: str = "shell") -> None:
        self.process_calls.append({"op": "kill", "pid": pid, "backend": backend})
        running = self.table.get(backend, [])
        if not any(p.pid == pid for p in running):
            raise ProcessLookupError(f"no process {pid}")
        self.table[backend] = [p for p in running if p.pid != pid]


def sleeper(pid: int, command: str = "sleep 1000", **extra: Any) -> ProcessInfo:
    return ProcessInfo(
        pid=pid,
        command=command,
        started=datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC),
        cpu_seconds=0.25,
        rss_bytes=4096,
        **extra,
    )


@dataclass
class RecordingAssets:
    shared: list[str] = field(default_factory=list)

    async def share(self, path: str, **options: Any) -> str:
        path.encode("utf-8")  # a lone surrogate raises: the real publisher refuses a path not UTF-8
        self.shared.append(path)
        return f"http://127.0.0.1:1/a/{path.rsplit('/', 1)[-1]}"


@dataclass
class EverySurface:
    """Files of ``workspace``; runtime and assets scripted."""

    workspace: Workspace
    runtime: LiveRuntime = field(default_factory=lambda: LiveRuntime([SHELL, PYTHON]))
    assets: RecordingAssets = field(default_factory=RecordingAssets)

    @property
    def id(self) -> str:
        return self.workspace.id

    @property
    def fs(self) -> Any:
        return self.workspace.fs

    @property
    def locks(self) -> Any:
        return self.workspace.locks

    async def close(self) -> None:
        await self.workspace.close()


async def every_surface() -> EverySurface:
    ws = Workspace()
    await ws.fs.mkdir("/workspace/sub", recursive=True)
    await ws.fs.write_file("/workspace/a.txt", "alpha\nbeta\ngamma\n")
    await ws.fs.write_file("/workspace/sub/b.py", "print('hi')\n")
    surface = EverySurface(ws)
    surface.runtime.table["shell"] = [sleeper(42), sleeper(43, "python3 -m http.server")]
    return surface
