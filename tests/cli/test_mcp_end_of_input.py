"""``computer mcp NAME`` fed by a pipe that closes at once (``printf ... | computer mcp NAME``, and the
MCP stdio shutdown: close stdin, wait for the exit): every request read before the end of input is
answered, a cancelled one is not waited for, then the server exits 0 (``tools/_mcp_eof.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from computer.tools._mcp_eof import answer_before_eof

from .conftest import MCP_HANDSHAKE, cli_env, run_cli


def _call(request_id: int, tool: str, arguments: dict[str, object]) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


def test_every_request_before_the_end_of_input_is_answered(tmp_path: Path) -> None:
    writes = [_call(i, "write", {"path": f"/workspace/p{i}.txt", "content": str(i)}) for i in range(10, 30)]
    messages = [
        *MCP_HANDSHAKE[:2],
        _call(3, "exec", {"command": "sleep 300"}),  # cancelled below: no answer is due, none waited for
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},
        *writes,
        _call(4, "exec", {"command": "sleep 1; echo slow"}),  # still running when stdin ends
        {"jsonrpc": "2.0", "id": 5, "method": "ping"},
        _call(6, "exec", {"command": "sleep 1; echo first"}),  # an id used twice: both are answered
        _call(6, "exec", {"command": "echo second"}),
    ]
    done = run_cli(
        ["mcp", "piped"],
        env=cli_env(tmp_path),
        input="".join(json.dumps(m) + "\n" for m in messages),
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    replies = {reply["id"]: reply for reply in lines}
    assert sorted(reply["id"] for reply in lines) == [1, 4, 5, 6, 6, *range(10, 30)]  # 3 was cancelled
    assert sorted(r["result"]["structuredContent"]["stdout"] for r in lines if r["id"] == 6) == [
        "first\n",
        "second\n",
    ]
    assert all(replies[i]["result"]["isError"] is False for i in range(10, 30))
    assert replies[4]["result"]["structuredContent"]["stdout"] == "slow\n"
    listed = run_cli(["tool", "piped", "find", "--pattern", "p*.txt"], env=cli_env(tmp_path))
    assert json.loads(listed.stdout)["count"] == 20


@pytest.mark.anyio
async def test_the_end_of_input_waits_for_the_answer_or_at_most_the_grace() -> None:
    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCRequest, JSONRPCResponse

    async def ended(answer_after: float | None, grace: float) -> list[str]:
        seen: list[str] = []
        send, receive = anyio.create_memory_object_stream[object](10)
        out_send, out_receive = anyio.create_memory_object_stream[object](10)
        reader, writer = answer_before_eof(receive, out_send, grace=grace)
        await send.send(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=7, method="ping")))
        await send.aclose()
        assert (await reader.receive()).message.id == 7

        async def answer() -> None:
            if answer_after is not None:
                await anyio.sleep(answer_after)
                seen.append("answered")
                await writer.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=7, result={})))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(answer)
                with pytest.raises(anyio.EndOfStream):
                    await reader.receive()
                seen.append("end")
        out_receive.close()
        return seen

    assert await ended(answer_after=0.2, grace=60) == ["answered", "end"]
    assert await ended(answer_after=None, grace=0.2) == ["end"]  # never answered: the grace ends it
