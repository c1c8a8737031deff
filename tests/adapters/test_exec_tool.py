"""The exec tool's shape: arguments follow the backends, notes on cut output, cancellation kills."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from computer.runtime.types import ExecResult, ExecSnapshot, OutputTruncation
from computer.tools.exec import create_exec_tool, truncation_note

from ._fake_runtime import BARE, PYTHON, SHELL, ScriptedRuntime, ScriptedWorkspace


def _tool(*infos: Any, backends: Any = None, **runtime: Any) -> tuple[Any, ScriptedRuntime]:
    rt = ScriptedRuntime(list(infos), **runtime)
    return create_exec_tool(ScriptedWorkspace(rt), backends), rt


EXEC_PARAMETERS = {"command", "backend", "cwd", "env", "input", "timeout"}


@pytest.mark.parametrize("infos", [(SHELL,), (PYTHON,), (SHELL, PYTHON), (SHELL, BARE)])
def test_the_parameters_are_the_same_whatever_the_backends(infos: tuple[Any, ...]) -> None:
    tool, _ = _tool(*infos)
    props = tool.parameters["properties"]
    assert set(props) == EXEC_PARAMETERS
    assert tool.parameters["required"] == ["command"]
    assert props["backend"]["enum"] == [info.id for info in infos]
    assert props["backend"]["default"] == infos[0].id
    assert props["timeout"]["default"] == 120
    assert props["timeout"]["maximum"] == 3600 and props["timeout"]["exclusiveMinimum"] == 0
    assert tool.mutating and tool.destructive


async def test_omitted_backend_runs_the_first_one() -> None:
    tool, rt = _tool(SHELL, PYTHON)
    result = await tool.run({"command": "ls"})
    assert "error" not in result
    assert rt.calls[0]["backend"] == "shell"
    await tool.run({"command": "print(1)", "backend": "python"})
    assert rt.calls[1]["backend"] == "python"


async def test_an_unknown_backend_with_several_is_an_error_listing_them() -> None:
    tool, rt = _tool(SHELL, PYTHON)
    result = await tool.run({"command": "ls", "backend": "node"})
    assert "backend" in result["error"] and "'shell'" in result["error"]
    assert rt.calls == []


async def test_input_to_a_command_only_workspace_is_an_error() -> None:
    tool, rt = _tool(SHELL)
    result = await tool.run({"command": "ls", "input": [1]})
    assert "not callable" in result["error"]
    assert rt.calls == []


async def test_backend_sent_with_one_backend_is_dropped() -> None:
    tool, rt = _tool(SHELL)
    result = await tool.run({"command": "echo hi", "backend": "python"})
    assert result["backend"] == "shell"
    assert rt.calls[0]["backend"] == "shell"


async def test_run_passes_limits_cwd_env_and_input() -> None:
    rt = ScriptedRuntime([PYTHON], final=ExecResult("completed", 0, "", "", value={"n": 3}))
    tool = create_exec_tool(ScriptedWorkspace(rt), max_bytes=100, max_lines=7)
    result = await tool.run(
        {"command": "def main(x): ...", "cwd": "/workspace/a", "env": {"A": "1"}, "input": [1]}
    )
    assert rt.calls == [
        {
            "source": "def main(x): ...",
            "backend": "python",
            "cwd": "/workspace/a",
            "env": {"A": "1"},
            "input": [1],
            "output": {"max_lines": 7, "max_bytes": 100},
            "timeout": 120.0,
        }
    ]
    assert result["value"] == {"n": 3}
    assert result["status"] == "completed" and result["exitCode"] == 0


async def test_input_to_a_command_backend_is_rejected_when_several() -> None:
    tool, rt = _tool(SHELL, PYTHON)
    result = await tool.run({"command": "ls", "backend": "shell", "input": {"a": 1}})
    assert "not callable" in result["error"]
    assert rt.calls == []


def test_description_lists_caller_text_then_backend_text_and_a_default() -> None:
    tool, _ = _tool(SHELL, BARE, backends={"shell": {"description": "Use for builds."}, "custom": {}})
    line = next(x for x in tool.description.splitlines() if x.startswith("- shell:"))
    assert line == "- shell: Use for builds. Bash with coreutils; no network."
    bare = next(x for x in tool.description.splitlines() if x.startswith("- custom:"))
    assert "no description" in bare
    assert "untrusted" in tool.description


def test_backends_selection_keeps_only_named_ones() -> None:
    tool, _ = _tool(SHELL, PYTHON, backends={"python": {}})
    assert "- shell" not in tool.description
    assert tool.parameters["properties"]["backend"]["enum"] == ["python"]


def test_unknown_backend_names_configured_ids() -> None:
    with pytest.raises(ValueError, match="shell, python"):
        _tool(SHELL, PYTHON, backends={"node": {}})


def test_empty_selection_and_no_backends_are_errors() -> None:
    with pytest.raises(ValueError, match="exec=\\{\\}"):
        _tool(SHELL, backends={})
    with pytest.raises(ValueError, match="no exec backends"):
        _tool()


async def test_cut_stream_ends_with_a_note_naming_the_log() -> None:
    cut = OutputTruncation(
        "saved", "/.computer/output/shell.exec-1.stdout.log", 9000, 3000, 1001, False, "lines"
    )
    rt = ScriptedRuntime(
        [SHELL], final=ExecResult("completed", 0, "line 2999\nline 3000\n", "", truncated={"stdout": cut})
    )
    result = await create_exec_tool(ScriptedWorkspace(rt)).run({"command": "seq"})
    assert result["stdout"] == (
        "line 2999\nline 3000\n\n"
        "[Showing lines 1001-3000 of 3000. Full output: /.computer/output/shell.exec-1.stdout.log]"
    )
    assert result["stderr"] == ""
    assert result["truncated"]["stdout"]["totalLines"] == 3000


def test_note_for_an_unsaved_or_partial_stream() -> None:
    assert truncation_note(OutputTruncation("not-saved", None, 10, 5, 2, False, "bytes")) == (
        "[Showing lines 2-5 of 5. Full output was not saved.]"
    )
    partial = truncation_note(OutputTruncation("saved", "/p.log", 10**6, 1, 1, True, "bytes"))
    assert partial == "[Showing the end of line 1 of 1. Full output: /p.log]"


async def test_each_snapshot_reaches_on_update_as_a_dict() -> None:
    snaps = [
        ExecSnapshot("exec-1", "shell", "running", None, "a\n", "", seq=1),
        ExecSnapshot("exec-1", "shell", "completed", 0, "a\nb\n", "", done=True, seq=2),
    ]
    rt = ScriptedRuntime([SHELL], snapshots=snaps, final=ExecResult("completed", 0, "a\nb\n", ""))
    seen: list[dict[str, Any]] = []

    async def collect(update: dict[str, Any]) -> None:
        seen.append(update)

    await create_exec_tool(ScriptedWorkspace(rt)).run({"command": "x"}, on_update=collect)
    assert [(s["status"], s["stdout"]) for s in seen] == [("running", "a\n"), ("completed", "a\nb\n")]


async def test_cancelling_the_run_kills_the_exec() -> None:
    rt = ScriptedRuntime(
        [SHELL], hang=True, snapshots=[ExecSnapshot("exec-1", "shell", "running", None, "", "")]
    )
    tool = create_exec_tool(ScriptedWorkspace(rt))
    task = asyncio.create_task(tool.run({"command": "sleep 100"}))
    await asyncio.wait_for(rt.waiting.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rt.handles[0].killed


async def test_a_finished_run_is_not_killed() -> None:
    tool, rt = _tool(SHELL)
    await tool.run({"command": "true"})
    assert not rt.handles[0].killed


async def test_timeout_is_passed_to_the_runtime_and_checked() -> None:
    tool, rt = _tool(SHELL)
    await tool.run({"command": "make", "timeout": 2.5})
    assert rt.calls[0]["timeout"] == 2.5
    for bad in (0, -1, 3601, "soon"):
        result = await tool.run({"command": "make", "timeout": bad})
        assert "timeout" in result["error"], bad
    assert len(rt.calls) == 1


def test_default_and_maximum_timeout_are_options_of_the_factory() -> None:
    rt = ScriptedRuntime([SHELL])
    tool = create_exec_tool(ScriptedWorkspace(rt), default_timeout=30, max_timeout=60)
    props = tool.parameters["properties"]["timeout"]
    assert (props["default"], props["maximum"]) == (30, 60)
    assert "default 30, at most 60" in props["description"]
    for bad in ({"default_timeout": 0}, {"max_timeout": -1}, {"default_timeout": 90, "max_timeout": 60}):
        with pytest.raises(ValueError, match="timeout"):
            create_exec_tool(ScriptedWorkspace(rt), **bad)


async def test_a_backend_that_ignores_its_timeout_is_killed_and_the_call_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import computer.tools.exec as exec_module

    monkeypatch.setattr(exec_module, "TIMEOUT_GRACE", 0.2)
    rt = ScriptedRuntime(
        [SHELL], hang=True, snapshots=[ExecSnapshot("exec-1", "shell", "running", None, "", "")]
    )
    tool = create_exec_tool(ScriptedWorkspace(rt))
    result = await asyncio.wait_for(tool.run({"command": "sleep 600", "timeout": 0.3}), 10)
    assert rt.handles[0].killed
    assert result["status"] == "cancelled" and result["timedOut"] is True
    assert "error" in result


async def test_skipped_paths_come_back_with_their_reasons() -> None:
    final = ExecResult(
        "completed",
        0,
        "",
        "",
        skipped=["/workspace/fifo", "/workspace/big.bin"],
        skipped_reasons={"/workspace/fifo": "a FIFO is never pulled"},
    )
    tool, _ = _tool(SHELL, final=final)
    result = await tool.run({"command": "mkfifo fifo"})
    assert result["skipped"] == [
        {"path": "/workspace/fifo", "reason": "a FIFO is never pulled"},
        {"path": "/workspace/big.bin", "reason": "left out of the sync"},
    ]
    clean, _ = _tool(SHELL)
    assert "skipped" not in await clean.run({"command": "true"})
