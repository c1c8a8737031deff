"""The demo's agents in-process (no Ray): the scripted model repairs every project through the real
tools and shell sandbox, reacts to what the tools return, and a real-model client talks to a fake
OpenAI-compatible endpoint on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from computer import Workspace
from computer.assets import SqliteAssetStore
from computer.demo import (
    REPORT_PATH,
    TEMPLATES,
    AgentState,
    ModelError,
    OpenAIChatModel,
    ScriptedModel,
    project_for,
    run_agent,
)
from computer.runtime import PythonBackend, ShellBackend

from .conftest import FakeOpenAI


@pytest.fixture
async def workspace(tmp_path: Path) -> AsyncIterator[Workspace]:
    store = SqliteAssetStore(tmp_path / "assets")
    async with Workspace(backends=[ShellBackend(), PythonBackend()], assets=store) as ws:
        yield ws
    await store.close()


def test_projects_differ_between_agents() -> None:
    projects = [project_for(i) for i in range(12)]
    assert len({p.label for p in projects}) == 12
    assert len({p.tests for p in projects}) == 12
    assert {p.key for p in projects} == set(TEMPLATES)
    assert all(p.bug in p.source and p.fix not in p.source for p in projects)


@pytest.mark.parametrize("index", range(len(TEMPLATES)))
async def test_scripted_agent_repairs_each_project_and_publishes_a_report(
    workspace: Workspace, index: int
) -> None:
    state = AgentState(f"agent-{index}", project_for(index))
    await run_agent(workspace, ScriptedModel(), state)

    assert state.failure is None and state.green, (state.answer, state.step)
    assert state.test_runs == 2  # red, then green after the fix
    assert state.url is not None and state.url in (state.answer or "")
    fixed = await workspace.fs.read_text(state.project.source_path)
    assert state.project.fix in fixed and state.project.bug not in fixed
    report = await workspace.fs.read_text(REPORT_PATH)
    assert f"# Report: {state.project.label}" in report
    assert f"FAIL: test_{state.project.function}" in report
    assert "OK" in report.split("## Final test run")[1]
    assert len(state.latencies) == state.calls == 10


async def test_a_rerun_starts_clean_over_the_previous_run(workspace: Workspace) -> None:
    project = project_for(0)
    await run_agent(workspace, ScriptedModel(), AgentState("first", project))
    await workspace.fs.write_file(f"{project.source_path}.orig", "left over")
    state = AgentState("second", project)
    await run_agent(workspace, ScriptedModel(), state)
    assert state.green
    assert not await workspace.fs.exists(f"{project.source_path}.orig")  # the delete step cleared it


async def test_an_agent_without_exec_fails_with_the_reason_instead_of_raising(tmp_path: Path) -> None:
    async with Workspace() as ws:  # no backend: no exec tool, no publish
        state = AgentState("no-exec", project_for(1))
        await run_agent(ws, ScriptedModel(), state)
    assert state.done and not state.green
    assert state.tests_green is None
    assert state.step == "failed"


class _BrokenModel:
    name = "broken"

    async def complete(
        self, messages: list[dict[str, object]], tools: list[dict[str, object]]
    ) -> dict[str, object]:
        raise ModelError("endpoint down")

    async def aclose(self) -> None:
        return None


async def test_a_model_failure_is_recorded_on_the_agent(workspace: Workspace) -> None:
    state = AgentState("x", project_for(2))
    await run_agent(workspace, _BrokenModel(), state)
    assert state.failure == "ModelError: endpoint down" and not state.green


async def test_openai_chat_model_drives_the_agent_through_a_compatible_endpoint(
    workspace: Workspace, fake_openai: FakeOpenAI
) -> None:
    model = OpenAIChatModel("fake-model", base_url=fake_openai.base_url, api_key="sk-test")
    state = AgentState("llm", project_for(3))
    try:
        await run_agent(workspace, model, state)
    finally:
        await model.aclose()
    assert state.green, (state.failure, state.answer)
    mine = [r for r, h in zip(fake_openai.requests, fake_openai.headers, strict=True) if "words#4" in str(r)]
    assert len(mine) == 10  # nine turns of tool calls (two writes share one), then the answer
    assert all(r["model"] == "fake-model" and r["tools"] for r in mine)
    assert {t["function"]["name"] for t in mine[0]["tools"]} >= {
        "read",
        "write",
        "edit",
        "grep",
        "exec",
        "publish",
    }
    assert fake_openai.headers[-1]["authorization"] == "Bearer sk-test"
    tool_messages = [m for m in mine[-1]["messages"] if m["role"] == "tool"]
    assert all(isinstance(m["content"], str) for m in tool_messages)  # chat completions take text


async def test_openai_chat_model_reports_an_http_error_clearly(fake_openai: FakeOpenAI) -> None:
    model = OpenAIChatModel("", base_url=fake_openai.base_url, api_key="k")  # no model: the fake answers 400
    try:
        with pytest.raises(ModelError, match="answered 400"):
            await model.complete([{"role": "user", "content": "hi"}], [])
    finally:
        await model.aclose()


class _ClientWithout:
    """Just enough of a client for the demo's exec check."""

    def __init__(self, *ids: str) -> None:
        from computer.runtime.types import BackendInfo

        infos = [BackendInfo(id=i, protocol="module", callable=True) for i in ids]
        self.runtime = type("Runtime", (), {"backends": staticmethod(lambda: infos)})()


def test_the_demo_refuses_clearly_when_owners_have_no_shell_backend() -> None:
    from computer.demo._run import DemoError, _require_exec

    with pytest.raises(DemoError, match=r"no 'shell' exec backend \(offered: none\).*computer status"):
        _require_exec(_ClientWithout())
    with pytest.raises(DemoError, match=r"offered: python"):
        _require_exec(_ClientWithout("python"))
    _require_exec(_ClientWithout("python", "shell"))


def test_the_demo_says_when_its_agents_commands_run_without_sandbox_namespaces() -> None:
    """Without bubblewrap (the README's first command installs no system package) the agents'
    commands ran as the host user and the demo said nothing of it."""
    import io

    from rich.console import Console

    from computer.demo._run import _require_exec
    from computer.runtime.types import BackendInfo

    def said(isolation: str) -> str:
        client = _ClientWithout()
        infos = [BackendInfo(id="shell", protocol="command", callable=False, isolation=isolation)]
        client.runtime = type("Runtime", (), {"backends": staticmethod(lambda: infos)})()
        out = io.StringIO()
        _require_exec(client, Console(file=out, width=200))
        return out.getvalue()

    bare = said(
        "NO namespace isolation (bubblewrap unavailable): the program runs as this process's host user"
    )
    assert bare.startswith("exec: NO sandbox namespaces") and "apt-get install bubblewrap" in bare, bare
    assert said("bubblewrap: user namespace as uid 65534 ...") == ""


def test_the_summary_offers_serving_links_only_when_an_agent_published_one(tmp_path: Path) -> None:
    """A run whose agents all failed published nothing: the summary's "links: run ... serve" line would
    send the user to serve nothing (it was printed whatever the run did); the dashboard line stays."""
    from io import StringIO

    from rich.console import Console

    from computer.demo._run import DemoSummary, print_summary

    def printed(url: str | None) -> str:
        state = AgentState(name="demo-0", project=project_for(0), url=url, failure=None if url else "boom")
        out = StringIO()
        print_summary(DemoSummary([state], "scripted", tmp_path), Console(file=out, width=200))
        return out.getvalue()

    failed = printed(None)
    assert "links: run" not in failed and "dashboard" in failed and "FAILED: boom" in failed
    assert "links: run `computer --data-dir" in printed("http://127.0.0.1:1/x")
