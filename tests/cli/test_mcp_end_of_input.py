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


def test_a_line_the_server_cannot_read_is_answered_with_an_error_and_the_next_one_served(
    tmp_path: Path,
) -> None:
    """A request whose string holds a lone surrogate (legal JSON syntax: a model's text cut inside a
    surrogate pair) was dropped by the SDK's reader without an answer: its caller waited for good. A
    line that is not JSON, or not a message, was dropped too. Each is answered now (``_mcp_unreadable``)."""
    write = _call(3, "write", {"path": "/workspace/half.txt", "content": "smile \ud83d"})
    lines = [
        *(json.dumps(m) for m in MCP_HANDSHAKE[:2]),
        json.dumps(write),  # json.dumps writes the lone surrogate as the escape \ud83d
        '{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "read", "argu',
        "[1, 2, 3]",
        "",  # an empty line: no message, no answer
        "  \r",
        json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"x": "\udc80"}}),
        json.dumps(
            {"jsonrpc": "2.0", "id": "k", "method": "tools/call", "params": {"name": "ls", "\udc80": 1}}
        ),
        json.dumps(_call(5, "write", {"path": "/workspace/whole.txt", "content": "smile \U0001f600"})),
        json.dumps(_call(6, "read", {"path": "/workspace/whole.txt"})),
    ]
    done = run_cli(["mcp", "unreadable"], env=cli_env(tmp_path), input="\n".join(lines) + "\n", timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    by_id = {reply["id"]: reply for reply in replies}
    assert sorted(by_id, key=str) == sorted([1, 3, None, 5, 6, "k"], key=str)
    assert len(replies) == 7  # two with a null id: the line that is not JSON and the array
    assert by_id[3]["error"]["code"] == -32700
    assert "lone UTF-16 surrogate (\\ud83d)" in by_id[3]["error"]["message"]
    assert "lone UTF-16 surrogate (\\udc80)" in by_id["k"]["error"]["message"]
    nulls = sorted(r["error"]["code"] for r in replies if r["id"] is None)
    assert nulls == [-32700, -32600]
    assert by_id[5]["result"]["isError"] is False
    assert by_id[6]["result"]["structuredContent"]["content"] == "smile \U0001f600"
    listed = run_cli(["tool", "unreadable", "ls", "--path", "/workspace"], env=cli_env(tmp_path))
    assert [entry["name"] for entry in json.loads(listed.stdout)["entries"]] == ["whole.txt"]


def test_the_end_of_a_session_names_the_processes_ending_with_it(tmp_path: Path) -> None:
    """An agent's server started over MCP runs in the live sandbox of `computer mcp`'s own process and
    ends with the session: said on stderr (the MCP host's log) now, not a word before."""
    messages = [*MCP_HANDSHAKE[:2], _call(3, "exec", {"command": "sleep 1234.75 &"})]
    done = run_cli(
        ["mcp", "ending"],
        env=cli_env(tmp_path),
        input="".join(json.dumps(m) + "\n" for m in messages),
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1])["result"]["isError"] is False
    assert (
        "computer: ending 1 process(es) still running in the workspace's sandbox with this session: "
        "sleep 1234.75 (pid" in done.stderr
    )
