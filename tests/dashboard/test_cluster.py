"""The dashboard against a running cluster: timelines from the files, live output of a run on an awake
owner through the cluster, the cluster view; an asleep workspace is never woken by looking at it."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest

import computer
from computer.config import Settings
from computer.dashboard import ClusterSource
from computer.tools import create_tools

from .conftest import Serve

pytestmark = pytest.mark.ray


async def _events(http: httpx.AsyncClient, url: str, wanted: int) -> list[dict[str, Any]]:
    """The first ``wanted`` snapshot events of a run's stream."""
    found: list[dict[str, Any]] = []
    async with http.stream("GET", url) as stream:
        async for line in stream.aiter_lines():
            if line.startswith("data: {") and '"status"' in line:
                found.append(json.loads(line[6:]))
                if len(found) >= wanted:
                    break
    return found


async def test_the_dashboard_reads_a_cluster(cluster: Settings, name: str, serve: Serve) -> None:
    async with computer.get_workspace(name) as ws:
        tools = create_tools(ws)
        with computer.audit_caller(agent="worker-1"):
            await tools["write"].run({"path": "/workspace/a.txt", "content": "hello\n"})
        handle = await ws.runtime.exec("for i in $(seq 1 30); do echo tick $i; sleep 0.1; done")
        base = await serve(ClusterSource(cluster))
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            page = ""
            for _ in range(100):  # the owner's audit batch commits within 50 ms
                page = (await http.get(f"/w/{name}")).text
                if "/workspace/a.txt" in page:
                    break
                await asyncio.sleep(0.05)
            assert "/workspace/a.txt" in page and "worker-1" in page
            rows = (await http.get("/fragments/workspaces")).text
            assert name in rows and "awake" in rows
            for _ in range(100):  # the journal records the run as running
                runs = (await http.get(f"/w/{name}")).text
                if handle.id in runs:
                    break
                await asyncio.sleep(0.05)
            live = await asyncio.wait_for(_events(http, f"/events/w/{name}/runs/{handle.id}", 2), 30)
            assert live[0]["live"] is True and live[0]["status"] == "running"
            cluster_page = (await http.get("/cluster")).text
            assert "cluster view" in cluster_page and "no Ray cluster" not in cluster_page
            # Each pool's queue, waits and runs/s (from the pools' control loop), and each worker's queue.
            totals = cluster_page.split('id="pool-totals"', 1)[1].split("</table>", 1)[0]
            assert re.search(
                r'<td>shell</td><td class="num">\d+[^<]*</td>(<td class="num">[^<]+</td>){5}', totals
            )
            # The awake owner, and (owners="hosted") the host holding it, as `computer ls` names it.
            owners = cluster_page.split("Awake owners", 1)[1].split("</table>", 1)[0]
            assert name in owners
            if cluster.owners == "hosted":
                assert re.search(r"<td>host \d+ \(pid \d+\)</td>", owners), owners
            workers = cluster_page.split("Pool workers", 1)[1].split("</table>", 1)[0]
            assert re.search(
                r'<td>shell:\d+</td><td>[^<]*</td><td class="num">\d+</td><td class="num">\d+</td>', workers
            )
        await handle.result()


async def test_looking_at_an_asleep_workspace_wakes_nothing(
    cluster: Settings, name: str, serve: Serve
) -> None:
    import ray

    from computer.actors import NAMESPACE, actor_name

    from .conftest import open_workspace

    asleep = f"{name}-other"
    ws = open_workspace(cluster, asleep)
    await create_tools(ws)["write"].run({"path": "/workspace/b.txt", "content": "x"})
    await ws.close()
    base = await serve(ClusterSource(cluster))
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert "/workspace/b.txt" in (await http.get(f"/w/{asleep}")).text
        assert "x" in (await http.get(f"/w/{asleep}/file", params={"path": "/workspace/b.txt"})).text
    with pytest.raises(ValueError):
        ray.get_actor(actor_name(asleep), namespace=NAMESPACE)
