"""LangChain's synchronous path (``tool.invoke``, ``graph.invoke``) over a real workspace with a shell
backend: every call of the process's tool sets runs on one event loop, so what a run leaves in the
workspace's live sandbox (its loop-bound pipes and readers) is still usable by the next call.

Before, each synchronous call ran in ``asyncio.run`` on a loop of its own, closed when the call ended:
the first exec worked and every later one failed with ``RuntimeError: Event loop is closed``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langgraph")

from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent
from langgraph.types import Command

import computer
from computer.runtime import ShellBackend
from computer.tools.langchain import create_langchain_tools

from .lc_fakes import scripted, tool_calls_turn

pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")


@pytest.fixture
def workspace() -> Iterator[computer.Workspace]:
    ws = computer.Workspace(backends=[ShellBackend()])
    yield ws
    # Closed as a synchronous program would, on a loop of its own.
    asyncio.run(ws.close())


def _call(tools: dict[str, Any], name: str, args: dict[str, Any]) -> ToolMessage:
    message = tools[name].invoke({"type": "tool_call", "name": name, "args": args, "id": "c"})
    assert isinstance(message, ToolMessage)
    return message


def test_consecutive_sync_execs_each_run_and_see_the_last_ones_files(workspace: computer.Workspace) -> None:
    tools = create_langchain_tools(workspace, format="object")
    _call(tools, "write", {"path": "/workspace/a.txt", "content": "one\n"})
    for step in range(3):
        ran = _call(
            tools, "exec", {"command": f"cat a.txt > b{step}.txt; echo {step} >> a.txt; wc -l < a.txt"}
        )
        assert ran.artifact["status"] == "completed", ran.artifact
        assert ran.artifact["stdout"].strip() == str(step + 2)
    listed = _call(tools, "exec", {"command": "ls; cat b2.txt"})
    assert listed.artifact["stdout"].split() == ["a.txt", "b0.txt", "b1.txt", "b2.txt", "one", "0", "1"]
    # A timed-out run is a result, and the next run still works.
    late = _call(tools, "exec", {"command": "sleep 30", "timeout": 1})
    assert late.artifact["timedOut"] is True
    after = _call(tools, "exec", {"command": "echo after"})
    assert after.artifact["stdout"] == "after\n"
    # A second tool set over the same workspace shares the loop too.
    again = create_langchain_tools(workspace, format="object")
    assert _call(again, "exec", {"command": "cat b0.txt"}).artifact["stdout"] == "one\n"


def test_a_sync_graph_runs_parallel_exec_calls_and_an_approved_write(workspace: computer.Workspace) -> None:
    # LangGraph's synchronous ToolNode runs parallel calls in threads of its own, and `interrupt()`
    # reads the graph's context: both must reach the tool on the shared loop.
    model = scripted(
        tool_calls_turn(
            ("exec", {"command": "echo left > l.txt; echo left"}),
            ("exec", {"command": "echo right > r.txt; echo right"}),
        ),
        tool_calls_turn(("exec", {"command": "cat l.txt r.txt"}), prefix="second"),
        tool_calls_turn(("write", {"path": "/workspace/w.txt", "content": "approved"}), prefix="third"),
        tool_calls_turn(("exec", {"command": "cat w.txt"}), prefix="fourth"),
    )
    agent = create_react_agent(
        model, create_langchain_tools(workspace, approve=["write"]), checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "sync"}}
    paused = agent.invoke({"messages": [("user", "go")]}, config)
    assert paused["__interrupt__"][0].value["tool"] == "write"
    state = agent.invoke(Command(resume=True), config)
    outputs = [
        json.loads(m.content)["stdout"]
        for m in state["messages"]
        if isinstance(m, ToolMessage) and m.name == "exec"
    ]
    assert outputs == ["left\n", "right\n", "left\nright\n", "approved"]


def test_a_sync_program_that_never_closes_its_workspace_exits_cleanly(tmp_path: Any) -> None:
    # The shared loop runs in a daemon thread: at exit, the live sandbox's end needed the interpreter's
    # thread pool, already shut down ("Task exception was never retrieved ... cannot schedule new
    # futures after shutdown"). What is left on the loop now ends before the pools do.
    script = tmp_path / "agent.py"
    script.write_text(
        "import computer\n"
        "from computer.runtime import ShellBackend\n"
        "from computer.tools.langchain import create_langchain_tools\n"
        "ws = computer.Workspace(backends=[ShellBackend()])\n"
        "tools = create_langchain_tools(ws, format='object')\n"
        "call = {'type': 'tool_call', 'id': 'c', 'name': 'exec', 'args': {'command': 'echo ran'}}\n"
        "print(tools['exec'].invoke(call).artifact['stdout'], end='')\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "ran\n"), done.stderr
    assert "Traceback" not in done.stderr and "exception" not in done.stderr, done.stderr


def _invoke_in_child(tools: dict[str, Any], out: Any) -> None:
    message = tools["put"].invoke(
        {"type": "tool_call", "id": "c", "name": "put", "args": {"path": "/c", "content": "x"}}
    )
    out.put(message.artifact)


def test_a_forked_child_gets_a_loop_of_its_own(sample_tools: dict[str, Any]) -> None:
    # The shared loop's thread is not copied by fork: the child's first sync call waited for ever.
    import multiprocessing

    tools = create_langchain_tools(sample_tools, format="object")
    parent = tools["put"].invoke(
        {"type": "tool_call", "id": "p", "name": "put", "args": {"path": "/p", "content": "x"}}
    )
    assert parent.artifact == {"path": "/p", "bytesWritten": 1}
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_invoke_in_child, args=(tools, out))
    child.start()
    try:
        assert out.get(timeout=30) == {"path": "/c", "bytesWritten": 1}
        child.join(timeout=30)
        # ...and exits (the parent's exit hook, inherited, waited on the parent's loop in the child).
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
            child.join()
