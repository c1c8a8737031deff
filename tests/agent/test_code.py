"""``execute`` runs model-written Python that calls the agent's tools; extensions add sandboxed tools."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import ray

import computer

from ._agents import CodeAgent, QuickCodeAgent
from ._scripted import outcome, plan
from .conftest import Agents, until_dead, until_named_free

CODE = """
import json

def main():
    workspace.write_file("/workspace/report.txt", tools.weather(city="Lima"))
    print("checked", len(dir(tools)), "tools")
    return {"weather": tools.weather(city="Quito"), "file": workspace.read_text("/workspace/report.txt")}
"""

MATH = """
def add(a, b):
    return {"result": a + b}

def shout(text):
    workspace.write_file("/workspace/shout.txt", text.upper())
    return text.upper()

tools = {
    "add": {"description": "Add two numbers",
            "parameters": {"a": {"type": "number"}, "b": {"type": "number"}},
            "execute": add},
    "shout": {"description": "Shout and keep a copy", "parameters": {"text": {"type": "string"}},
              "execute": shout},
}
"""


async def test_execute_calls_the_agents_tools_from_sandboxed_code(agents: Agents) -> None:
    agent = agents.spawn(CodeAgent)
    answer = outcome((await agent.chat.remote(plan(("execute", {"code": CODE})))).text)
    assert answer["results"][0]["tool"] == "execute"
    result = json.loads(answer["results"][0]["content"])
    assert result["status"] == "completed"
    assert result["value"] == {"weather": "sunny in Quito", "file": "sunny in Lima"}
    assert result["stdout"] == "checked 3 tools\n"  # weather, archive, wipe: not execute itself
    [record] = await agent.executions.remote()
    assert record["status"] == "completed"
    assert record["code"] == CODE
    assert record["value"] == {"weather": "sunny in Quito", "file": "sunny in Lima"}
    assert record["stdout"].startswith("checked")
    assert [(c["tool"], c["args"]) for c in record["toolCalls"]] == [
        ("weather", {"city": "Lima"}),
        ("weather", {"city": "Quito"}),
    ]


async def test_execute_reports_errors_and_cannot_bypass_approval(agents: Agents) -> None:
    agent = agents.spawn(CodeAgent)
    code = "result = tools.wipe()"
    answer = outcome((await agent.chat.remote(plan(("execute", {"code": code})))).text)
    result = json.loads(answer["results"][0]["content"])
    assert result["status"] == "failed"
    assert "needs human approval" in result["error"]
    records = await agent.executions.remote()
    assert records[0]["toolCalls"][0]["tool"] == "wipe" and "error" in records[0]["toolCalls"][0]
    missing = outcome((await agent.chat.remote(plan(("execute", {"code": "result = tools.nope()"})))).text)
    assert "no tool 'nope'" in missing["results"][0]["content"]


async def test_model_loads_an_extension_uses_it_and_it_survives_a_restart(agents: Agents) -> None:
    name = agents.name()
    agent = agents.spawn(CodeAgent, name)
    manifest = {"name": "math", "version": "1.0.0", "description": "Arithmetic"}
    message = plan(
        ("load_extension", {"manifest": manifest, "source": MATH}),
        ("math_add", {"a": 2, "b": 3}),
        ("list_extensions", {}),
    )
    answer = outcome((await agent.chat.remote(message)).text)
    assert json.loads(answer["results"][0]["content"])["tools"] == ["math_add", "math_shout"]
    assert answer["results"][1] == {"tool": "math_add", "content": '{"result":5}'}
    assert [e["name"] for e in json.loads(answer["results"][2]["content"])] == ["math"]

    ray.kill(agent)
    await until_dead(agent)
    await until_named_free(name)
    again = agents.spawn(CodeAgent, name)
    after = outcome((await again.chat.remote(plan(("math_shout", {"text": "hi"})))).text)
    assert {"math_add", "math_shout", "load_extension", "list_extensions"} <= set(after["tools"])
    assert after["descriptions"]["math_add"] == "Add two numbers"
    assert after["results"] == [{"tool": "math_shout", "content": "HI"}]
    assert (await again.list_extensions.remote())[0]["tools"] == ["math_add", "math_shout"]


async def test_a_broken_extension_is_refused_at_load(agents: Agents) -> None:
    agent = agents.spawn(CodeAgent)
    message = plan(("load_extension", {"manifest": {"name": "bad"}, "source": "tools = 3"}))
    answer = outcome((await agent.chat.remote(message)).text)
    assert "loading extension 'bad' failed" in answer["results"][0]["content"]
    assert await agent.list_extensions.remote() == []


SPIN = "while True:\n    pass\n"

TICK = """
import time

def main():
    i = 0
    while True:
        i += 1
        workspace.write_file("/workspace/tick", str(i))
        time.sleep(0.05)
"""

SPINNING_EXTENSION = """
def spin():
    while True:
        pass

tools = {"forever": {"description": "Never returns", "parameters": {}, "execute": spin}}
"""


async def test_execute_and_extension_runs_are_cut_at_the_timeout(agents: Agents) -> None:
    agent = agents.spawn(QuickCodeAgent)
    await agent.load_extension.remote({"name": "spinner"}, SPINNING_EXTENSION)
    answer = outcome(
        (await agent.chat.remote(plan(("execute", {"code": SPIN}), ("spinner_forever", {})))).text
    )
    result = json.loads(answer["results"][0]["content"])
    assert result["status"] == "cancelled"
    assert "timed out after 1.5 s" in result["error"]
    assert "timed out after 1.5 s" in answer["results"][1]["content"]
    [record] = await agent.executions.remote()
    assert record["status"] == "cancelled" and "timed out" in record["error"]


async def test_cancelling_a_turn_kills_its_execute_run_and_records_it(agents: Agents) -> None:
    agent = agents.spawn(CodeAgent)
    turn = agent.chat.remote(plan(("execute", {"code": TICK})))
    async with computer.get_workspace(agent) as ws:
        deadline = time.monotonic() + 60
        while not await ws.fs.exists("/workspace/tick"):
            assert time.monotonic() < deadline, "the run never started"
            await asyncio.sleep(0.05)
        ray.cancel(turn)
        with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.RayTaskError)):
            await turn
        deadline = time.monotonic() + 30
        while not (records := await agent.executions.remote()):
            assert time.monotonic() < deadline, "the cancelled run left no record"
            await asyncio.sleep(0.05)
        assert records[0]["status"] == "cancelled" and "cancelled" in records[0]["error"]
        ticks = await ws.fs.read_text("/workspace/tick")
        await asyncio.sleep(1.0)  # a run still alive writes a tick every 0.05 s
        assert await ws.fs.read_text("/workspace/tick") == ticks
    assert outcome((await agent.chat.remote(plan())).text)["turns"] == 1  # the cancelled turn is not kept


def one_tool(name: str) -> str:
    return f"tools = {{{name!r}: {{'description': 'd', 'parameters': {{}}, 'execute': lambda: {name!r}}}}}\n"


async def test_extension_tool_names_may_not_clash(agents: Agents) -> None:
    agent = agents.spawn(CodeAgent)
    await agent.load_extension.remote({"name": "a_b"}, one_tool("c"))
    with pytest.raises(ValueError, match="'a_b_c' of extension 'a' clashes with extension 'a_b'"):
        await agent.load_extension.remote({"name": "a"}, one_tool("b_c"))
    with pytest.raises(ValueError, match="clashes with the management tool 'load_extension'"):
        await agent.load_extension.remote({"name": "load"}, one_tool("extension"))
    await agent.load_extension.remote({"name": "a_b"}, one_tool("c"))  # a reload keeps its own names
    message = plan(("load_extension", {"manifest": {"name": "list"}, "source": one_tool("extensions")}))
    answer = outcome((await agent.chat.remote(message)).text)
    assert "clashes with the management tool 'list_extensions'" in answer["results"][0]["content"]
    answer = outcome((await agent.chat.remote(plan(("a_b_c", {})))).text)
    assert answer["results"] == [{"tool": "a_b_c", "content": "c"}]
    assert [e["name"] for e in await agent.list_extensions.remote()] == ["a_b"]


async def test_a_stored_clashing_extension_is_left_out_instead_of_failing_turns(agents: Agents) -> None:
    agent = agents.spawn(CodeAgent)
    await agent.ping.remote()
    params = {"type": "object", "properties": {}, "required": []}
    async with computer.get_workspace(agent) as ws:
        for name, tool in (("a", "b_c"), ("a_b", "c"), ("load", "extension")):
            record = {
                "manifest": {"name": name, "version": "0.0.0", "description": ""},
                "source": one_tool(tool),
                "tools": [{"name": tool, "description": "d", "parameters": params}],
                "loaded": 0,
            }
            await ws.fs.mkdir("/.computer/agent/extensions", recursive=True)
            await ws.fs.write_file(f"/.computer/agent/extensions/{name}.json", json.dumps(record).encode())
    answer = outcome((await agent.chat.remote(plan(("a_b_c", {})))).text)
    assert answer["results"] == [{"tool": "a_b_c", "content": "b_c"}]  # the first in name order
    assert "Load an extension" in answer["descriptions"]["load_extension"]
