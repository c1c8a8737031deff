"""With the default backends an agent's bash and execute run in the cluster's exec pools."""

from __future__ import annotations

import json

from ._agents import PoolAgent
from ._scripted import outcome, plan
from .conftest import Agents

CODE = (
    'def main():\n    return tools.weather(city="Turku") + " / " + workspace.read_text("/workspace/n.txt")\n'
)


async def test_bash_and_execute_run_in_the_pools_and_call_back_the_agent(agents: Agents) -> None:
    agent = agents.spawn(PoolAgent)
    message = plan(
        ("bash", {"command": "echo pooled > n.txt"}),
        ("execute", {"code": CODE}),
    )
    answer = outcome((await agent.chat.remote(message)).text)
    assert json.loads(answer["results"][0]["content"])["status"] == "completed"
    result = json.loads(answer["results"][1]["content"])
    assert result["status"] == "completed", result
    assert result["value"] == "sunny in Turku / pooled\n"
