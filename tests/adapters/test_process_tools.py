"""The optional ``processes`` and ``kill`` tools over a runtime's live-sandbox calls (SPEC section 10).

The runtime here is a stand-in that keeps a process table and records every call, so the tests see
exactly what the tools ask for; the real live sandboxes are the runtime's own tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from computer import Workspace
from computer.runtime.types import ProcessInfo
from computer.tools import create_tools
from computer.tools.processes import create_kill_tool, create_processes_tool

from ._every_tool import LiveRuntime, sleeper
from ._fake_runtime import PYTHON, SHELL


def two_backend_runtime() -> LiveRuntime:
    return LiveRuntime([SHELL, PYTHON])


@dataclass
class Surface:
    runtime: LiveRuntime = field(default_factory=two_backend_runtime)
    id: str = "fake"


async def test_processes_lists_the_live_sandbox_in_the_tools_shape() -> None:
    surface = Surface()
    surface.runtime.table["shell"] = [
        sleeper(
            7, "python3 -m http.server 8000", ppid=1, exec_id="exec-3", log="/.computer/output/exec-3.bg"
        ),
        sleeper(9),
    ]
    result = await create_processes_tool(surface).run({})
    assert result == {
        "count": 2,
        "processes": [
            {
                "pid": 7,
                "command": "python3 -m http.server 8000",
                "started": "2026-12-01T12:00:00Z",
                "cpuSeconds": 0.25,
                "rssBytes": 4096,
                "ppid": 1,
                "execId": "exec-3",
                "log": "/.computer/output/exec-3.bg",
            },
            {
                "pid": 9,
                "command": "sleep 1000",
                "started": "2026-12-01T12:00:00Z",
                "cpuSeconds": 0.25,
                "rssBytes": 4096,
            },
        ],
    }
    # No backend given: the runtime chooses (its default, here the shell).
    assert surface.runtime.process_calls == [{"op": "processes", "backend": "shell"}]


async def test_a_named_backend_is_passed_and_echoed() -> None:
    surface = Surface()
    surface.runtime.table["python"] = [sleeper(3)]
    result = await create_processes_tool(surface).run({"backend": "python"})
    assert result["backend"] == "python" and result["count"] == 1
    assert surface.runtime.process_calls == [{"op": "processes", "backend": "python"}]


async def test_started_is_utc_whatever_zone_the_runtime_used() -> None:
    surface = Surface()
    local = datetime(2026, 12, 1, 12, 30, 5, tzinfo=timezone(timedelta(hours=2)))
    surface.runtime.table["shell"] = [
        ProcessInfo(pid=1, command="x", started=local, cpu_seconds=0, rss_bytes=0)
    ]
    (listed,) = (await create_processes_tool(surface).run({}))["processes"]
    assert listed["started"] == "2026-12-01T10:30:05Z"


async def test_an_empty_sandbox_lists_nothing() -> None:
    result = await create_processes_tool(Surface()).run({"backend": None})
    assert result == {"count": 0, "processes": []}


async def test_kill_stops_one_process_and_a_missing_pid_is_an_error_naming_it() -> None:
    surface = Surface()
    surface.runtime.table["shell"] = [sleeper(7), sleeper(9)]
    kill = create_kill_tool(surface)
    assert await kill.run({"pid": 7}) == {"killed": 7, "exited": True}
    assert [p.pid for p in surface.runtime.table["shell"]] == [9]
    again = await kill.run({"pid": 7})
    assert again == {"error": "no process 7"}
    assert await kill.run({"pid": 9, "backend": "shell"}) == {"backend": "shell", "killed": 9, "exited": True}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({}, "pid: Field required"),
        ({"pid": 0}, "greater than or equal to 1"),
        ({"pid": "seven"}, "valid integer"),
        ({"pid": 7, "backend": "ruby"}, "'shell' or 'python'"),
        ({"pid": 7, "signal": 15}, "Unknown argument 'signal'"),
        ({"id": 7}, "'id' (did you mean 'pid'?)"),
    ],
)
async def test_bad_kill_calls_never_reach_the_runtime(args: dict[str, Any], needle: str) -> None:
    surface = Surface()
    result = await create_kill_tool(surface).run(args)
    assert needle in result["error"]
    assert surface.runtime.process_calls == []


async def test_the_schemas_offer_the_workspace_backends() -> None:
    surface = Surface()
    listing = create_processes_tool(surface).parameters
    assert listing["properties"]["backend"]["enum"] == ["shell", "python"]
    assert listing.get("required", []) == []
    kill = create_kill_tool(surface).parameters
    assert kill["required"] == ["pid"] and kill["additionalProperties"] is False


async def test_create_tools_adds_them_only_when_asked() -> None:
    async with Workspace() as ws:
        assert not {"processes", "kill"} & set(create_tools(ws))
        with_backend = _WithRuntime(ws)
        assert {"processes", "kill"} <= set(create_tools(with_backend, processes=True, exec={}))
        readonly = create_tools(with_backend, processes=True, readonly=True)
        assert "processes" in readonly and "kill" not in readonly
        assert "kill" not in readonly["processes"].description
        # No exec backend: no sandbox, so neither (they only answered "no exec backends configured").
        assert not {"processes", "kill", "exec"} & set(create_tools(ws, processes=True))


class _WithRuntime:
    """A real workspace's files with the stand-in runtime."""

    def __init__(self, ws: Workspace) -> None:
        self.id, self.fs, self.locks, self.assets = ws.id, ws.fs, ws.locks, None
        self.runtime = two_backend_runtime()


class _Client(_WithRuntime):
    """A client-like surface: whole-call forwarding for the file tools; runtime calls are its own."""

    def __init__(self, ws: Workspace) -> None:
        super().__init__(ws)
        self.forwarded: list[str] = []

    async def run_tool(self, name: str, args: dict[str, Any], *, options: Any = None) -> dict[str, Any]:
        self.forwarded.append(name)
        return {"forwarded": name}


async def test_over_a_forwarding_client_they_call_the_clients_runtime() -> None:
    async with Workspace() as ws:
        client = _Client(ws)
        client.runtime.table["shell"] = [sleeper(5)]
        tools = create_tools(client, processes=True, exec={})
        assert (await tools["ls"].run({"path": "/"})) == {"forwarded": "ls"}
        assert (await tools["processes"].run({}))["count"] == 1
        assert await tools["kill"].run({"pid": 5}) == {"killed": 5, "exited": True}
    assert client.forwarded == ["ls"]
    assert client.runtime.process_calls == [
        {"op": "processes", "backend": "shell"},
        {"op": "kill", "pid": 5, "backend": "shell"},
        {"op": "processes", "backend": "shell"},  # kill checking the process is gone
    ]


async def test_a_lookup_error_that_does_not_name_the_pid_is_completed() -> None:
    class NoSandbox(LiveRuntime):
        async def kill_process(self, pid: int, backend: str = "shell") -> None:
            raise ProcessLookupError("the workspace has no live sandbox")

    surface = Surface(runtime=NoSandbox([SHELL]))
    result = await create_kill_tool(surface).run({"pid": 12})
    assert result == {"error": "no process 12 in the live sandbox (the workspace has no live sandbox)"}


async def _background_sleeper_round_trip(ws: Any) -> None:
    """exec starts a background program; processes lists it; kill stops it; a second kill names it."""
    tools = create_tools(ws, processes=True, exec={"shell": {}})
    started = await tools["exec"].run({"command": "sleep 300 & echo $!"})
    assert started["status"] == "completed", started
    pid = int(started["stdout"].strip())
    listed = await tools["processes"].run({"backend": "shell"})
    # By the pid $! printed: in its first instants the child may not have exec'd sleep yet.
    (sleeper,) = [p for p in listed["processes"] if p["pid"] == pid]
    # Its command and rssBytes may still be those of the forked shell, or 0: only the types are certain.
    assert isinstance(sleeper["command"], str) and isinstance(sleeper["rssBytes"], int)
    assert sleeper["started"].endswith("Z")
    assert await tools["kill"].run({"pid": sleeper["pid"]}) == {"killed": sleeper["pid"], "exited": True}
    after = await tools["processes"].run({})  # exited: true means it is gone from the listing now
    assert all(p["pid"] != sleeper["pid"] for p in after["processes"])
    again = await tools["kill"].run({"pid": sleeper["pid"]})
    assert str(sleeper["pid"]) in again["error"]


async def test_a_real_live_sandbox_through_the_tools() -> None:
    from computer.runtime import ShellBackend

    async with Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        await _background_sleeper_round_trip(ws)


@pytest.mark.ray
async def test_a_real_live_sandbox_through_a_client(cluster: Any, workspace_name: str) -> None:
    import computer

    async with computer.get_workspace(workspace_name) as client:
        if not any(b.id == "shell" for b in client.runtime.backends()):
            pytest.skip("this build's computer.init configures no shell backend pool")
        await client.fs.mkdir("/workspace")
        await _background_sleeper_round_trip(client)


async def test_kill_reports_a_process_that_lingers_after_the_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL is asynchronous: a process still listed after the settle time is exited: false."""
    import computer.tools.processes as processes_module

    class Lingering(LiveRuntime):
        async def kill_process(self, pid: int, backend: str = "shell") -> None:
            self.process_calls.append({"op": "kill", "pid": pid, "backend": backend})  # listed on

    monkeypatch.setattr(processes_module, "KILL_WAIT", 0.2)
    surface = Surface(runtime=Lingering([SHELL]))
    surface.runtime.table["shell"] = [sleeper(7)]
    assert await create_kill_tool(surface).run({"pid": 7}) == {"killed": 7, "exited": False}
    polls = [c for c in surface.runtime.process_calls if c["op"] == "processes"]
    assert 2 <= len(polls) <= 12  # backed off, and bounded by the settle time


async def test_kill_sees_a_process_leave_after_a_few_polls() -> None:
    class Slow(LiveRuntime):
        async def processes(self, backend: str = "shell") -> list[ProcessInfo]:
            listed = await super().processes(backend)
            if len(self.process_calls) >= 4:
                self.table[backend] = []
            return listed

        async def kill_process(self, pid: int, backend: str = "shell") -> None:
            self.process_calls.append({"op": "kill", "pid": pid, "backend": backend})

    surface = Surface(runtime=Slow([SHELL]))
    surface.runtime.table["shell"] = [sleeper(7)]
    assert await create_kill_tool(surface).run({"pid": 7}) == {"killed": 7, "exited": True}


COMMAND_CHARS = 512


async def test_a_long_command_line_is_cut_so_a_full_listing_stays_a_bounded_result() -> None:
    """A listing is every process, each command line up to 4,096 characters (the sandbox's own cut):
    250 processes named with 4,096 emoji each made one result of ~4 MB. The tool cuts each to
    ``COMMAND_CHARS`` (512), with ``…`` last; a shorter one is whole."""
    surface = Surface()
    surface.runtime.table["shell"] = [sleeper(n, "\U0001f600" * 4096) for n in range(2, 252)]
    surface.runtime.table["shell"].append(sleeper(300, "x" * COMMAND_CHARS))
    result = await create_processes_tool(surface).run({})
    commands = [p["command"] for p in result["processes"]]
    assert all(len(c) == COMMAND_CHARS and c.endswith("\u2026") for c in commands[:-1])
    assert commands[-1] == "x" * COMMAND_CHARS
    assert len(json.dumps(result)) < 250 * COMMAND_CHARS * 13
