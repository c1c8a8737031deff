"""The audit log through a get_workspace client: forwarded calls recorded by the owner with the
client's identity and no extra round trip, client-run calls recorded too, query and follow."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import computer
from computer.config import Settings
from computer.storage import audit_caller
from computer.tools import create_tools

pytestmark = pytest.mark.ray


async def _rpcs(ws: Any) -> int:
    stats: dict[str, Any] = await ws.handle.stats.remote()
    return int(stats["rpcs"])


async def _records(ws: Any, count: int, **filters: Any) -> list[Any]:
    """The records once ``count`` of them arrived (client-run calls are sent without waiting)."""
    for _ in range(100):
        records = await ws.audit.query(**filters)
        if len(records) >= count:
            return records
        await asyncio.sleep(0.05)
    raise AssertionError(f"only {len(records)} records arrived: {records}")


async def test_a_clients_calls_carry_its_identity_and_cost_no_extra_round_trip(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as first, computer.get_workspace(name) as second:
        tools = create_tools(first)
        before = await _rpcs(first)
        with audit_caller(agent="planner", adapter="custom"):
            await tools["write"].run({"path": "/workspace/a.txt", "content": "hi"})
        assert await _rpcs(first) - before == 1  # the record travelled inside the one run_tool call
        await create_tools(second)["read"].run({"path": "/workspace/a.txt"})
        await tools["read"].run({"path": "/workspace/a.txt", "bogus": 1})  # answered here, recorded there
        # No waiting: a query made right after a client-side call is submitted after its record.
        write, read, bad = await first.audit.query()
    assert first.audit.client != second.audit.client
    assert write.caller == {"client": first.audit.client, "agent": "planner", "adapter": "custom"}
    assert (write.tool, write.status) == ("write", "ok")
    assert read.caller == {"client": second.audit.client} and read.tool == "read"
    assert (bad.tool, bad.status, bad.caller["client"]) == ("read", "error", first.audit.client)
    assert "bogus" in str(bad.error)


class _SlowRecords:
    """An owner handle whose ``audit_record`` reaches the owner late, as an async actor may run a
    later call of the same client first (Ray keeps no order among an async actor's calls)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._handle, name)
        if name != "audit_record":
            return method

        class _Late:
            @staticmethod
            def remote(*args: Any) -> Any:
                async def late() -> Any:
                    await asyncio.sleep(0.5)
                    return await method.remote(*args)

                return asyncio.ensure_future(late())

        return _Late


async def test_a_query_finds_this_clients_own_records_still_on_their_way(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as ws:
        ws.audit._conn.handle = _SlowRecords(ws.audit._conn.handle)
        tools = create_tools(ws)
        await tools["read"].run({"path": "/workspace/a.txt", "bogus": 1})  # answered here, recorded late
        assert [(r.tool, r.status) for r in await ws.audit.query()] == [("read", "error")]
        ws.audit._conn.handle = ws.audit._conn.handle._handle


async def test_query_and_follow_through_a_client(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        tools = create_tools(ws)
        await tools["ls"].run({"path": "/"})
        seen: list[str] = []

        async def watch() -> None:
            async for record in ws.audit.follow(poll=0.05):
                seen.append(str(record.tool))
                if len(seen) == 2:
                    return

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0.3)
        await tools["write"].run({"path": "/workspace/b.txt", "content": "x"})
        await tools["find"].run({"pattern": "*.txt"})
        await asyncio.wait_for(watcher, 10)
        assert seen == ["write", "find"]
        errors = await ws.audit.query(status="error")
        assert errors == []
        newest = await ws.audit.query(limit=2)
        assert [r.tool for r in newest] == ["write", "find"]
        assert [r.tool for r in await ws.audit.query(tool="ls")] == ["ls"]


async def test_a_clients_runs_and_links_carry_its_identity(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        tools = create_tools(ws)
        with audit_caller(agent="builder", adapter="custom"):
            await tools["write"].run({"path": "/workspace/r.txt", "content": "report"})
            await tools["exec"].run({"command": "cat r.txt", "env": {"MYVAR": "plainsecretvalue"}})
            await tools["publish"].run({"path": "/workspace/r.txt"})
        run = (await _records(ws, 1, kind="exec"))[0]
        share = (await _records(ws, 1, kind="share"))[0]
        tool_calls = await _records(ws, 3, kind="tool")
    expected = {"client": ws.audit.client, "agent": "builder", "adapter": "custom"}
    assert run.caller == expected and run.status == "ok" and run.args["command"] == "cat r.txt"
    assert share.caller == expected and share.args["path"] == "/workspace/r.txt"
    assert [(r.tool, r.caller) for r in tool_calls] == [(t, expected) for t in ("write", "exec", "publish")]
    # env values stay out of the log, as the run's record keeps them (names only)
    assert run.args["env"] == tool_calls[1].args["env"] == ["MYVAR"]
    assert "plainsecretvalue" not in str([r.to_json() for r in [run, *tool_calls]])
