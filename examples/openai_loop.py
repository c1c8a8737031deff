"""An OpenAI-format tool loop over a workspace, offline.

``create_openai_tools`` returns the declarations to send and the ``execute`` that runs a call. A real
loop sends ``tools`` to any OpenAI-compatible client::

    response = client.chat.completions.create(model=..., messages=messages, tools=tools)
    message = response.choices[0].message

Here a scripted stand-in produces the assistant messages, so the example runs without a network.

    python examples/openai_loop.py
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import computer
from computer.runtime import ShellBackend
from computer.tools.openai import create_openai_tools

SCRIPT = [
    [("write", {"path": "/workspace/hello.py", "content": "print('hello from the sandbox')\n"})],
    [("exec", {"command": "python3 hello.py"})],
    [("read", {"path": "/workspace/hello.py", "offset": None, "limit": None, "byteOffset": None})],
]


def scripted_model(turn: int) -> dict[str, Any]:
    """Stands in for ``client.chat.completions.create(...)``: the assistant message of one turn."""
    if turn >= len(SCRIPT):
        return {"role": "assistant", "content": "All done."}
    calls = [
        {
            "id": f"call_{turn}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for i, (name, args) in enumerate(SCRIPT[turn])
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


async def main() -> None:
    async with computer.Workspace(backends=[ShellBackend()]) as workspace:
        await workspace.fs.mkdir("/workspace")
        tools, execute = create_openai_tools(workspace)  # constrained_sampling="prefer"
        strict = [t["function"]["name"] for t in tools if t["function"].get("strict")]
        print("tools:", ", ".join(t["function"]["name"] for t in tools), "| strict:", ", ".join(strict))

        messages: list[dict[str, Any]] = [{"role": "user", "content": "Write and run a hello script."}]
        for turn in range(10):
            message = scripted_model(turn)
            messages.append(message)
            if not message.get("tool_calls"):
                print("assistant:", message["content"])
                break
            for call in message["tool_calls"]:
                outcome = await execute(call)  # never raises; a bad call comes back with is_error
                text = " ".join(p["text"] for p in outcome["content"] if p["type"] == "text")
                print(f"{call['function']['name']} -> {'ERROR ' if outcome['is_error'] else ''}{text}")
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": outcome["content"]})


if __name__ == "__main__":
    asyncio.run(main())
