"""Abuse through clients of the cluster: fork and memory bombs in the pooled sandbox, network and DNS
from the sandbox, and workspace names built to reach another workspace's data."""

from __future__ import annotations

import errno
import os
import secrets
from typing import Any

import pytest
from exec_cases import loopback_server

import computer
from computer.config import Settings
from computer.tools import create_tools


def _host_processes() -> int:
    return sum(1 for entry in os.listdir("/proc") if entry.isdigit())


def _processes_with(marker: str) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        count += 1
            except OSError:
                continue
    return count


async def _next_run_works(ws: Any) -> None:
    result = await (await ws.runtime.exec("echo alive", timeout=30)).result()
    assert (result.status, result.stdout) == ("completed", "alive\n")


async def test_a_fork_bomb_is_contained_and_the_next_run_works(
    cluster: Settings, name: str, record_property: Any
) -> None:
    marker = f"bomb{secrets.token_hex(4)}"
    before = _host_processes()
    async with computer.get_workspace(name) as ws:
        result = await (
            await ws.runtime.exec(f"{marker}() {{ {marker} | {marker} & }}; {marker}; sleep 2", timeout=15)
        ).result()
        assert "Resource temporarily unavailable" in result.stderr  # the process cap said no
        await _next_run_works(ws)
    assert _processes_with(marker) == 0  # every process of the bomb ended with the run
    assert _host_processes() < before + 50
    record_property("escapes_attempted_fork_bomb", 1)


@pytest.mark.parametrize(
    ("program", "survivors"),
    [
        ("python3 -c 'x = bytearray(8 * 1024**3); print(\"survived\")'", 0),
        (
            "python3 -c 'x = []\nwhile len(x) < 200: x.append(bytearray(64 * 1024**2))\nprint(\"survived\")'",
            0,
        ),
        # Each process stays under the per-process cap; together they pass the run's 1 GiB cgroup.
        (
            "for i in 1 2 3 4; do python3 -c 'import time; x = bytearray(900 * 1024**2); "
            'x[::4096] = b"1" * len(x[::4096]); time.sleep(2); print("survived")\' & done; wait',
            1,
        ),
    ],
    ids=["one-huge-allocation", "growing", "four-processes"],
)
async def test_a_memory_bomb_is_stopped_and_the_next_run_works(
    cluster: Settings, name: str, program: str, survivors: int
) -> None:
    async with computer.get_workspace(name) as ws:
        result = await (await ws.runtime.exec(program, timeout=60)).result()
        assert result.stdout.count("survived") <= survivors
        # SIGKILL by the run's memory cgroup (137, or bash's "Killed" for a background job), or a
        # MemoryError where no memory cgroup exists and RLIMIT_AS bounds each process.
        assert result.exit_code == 137 or "MemoryError" in result.stderr or "Killed" in result.stderr
        await _next_run_works(ws)


async def test_the_sandbox_cannot_reach_a_loopback_server_nor_resolve_names(
    cluster: Settings, name: str
) -> None:
    async with loopback_server() as server, computer.get_workspace(name) as ws:
        port = server.port
        probe = (
            "import socket\n"
            f"for what, call in [('tcp', lambda: socket.create_connection(('127.0.0.1', {port}), timeout=2)),\n"
            "                   ('dns', lambda: socket.getaddrinfo('example.com', 80))]:\n"
            "    try:\n"
            "        call()\n"
            "        print(what, 'open')\n"
            "    except OSError as e:\n"
            "        print(what, 'blocked')\n"
        )
        tools = create_tools(ws)
        shell = await tools["exec"].run(
            {
                "backend": "shell",
                "command": f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo tcp open; "
                "getent hosts example.com || echo dns blocked; ip -o link 2>/dev/null | wc -l",
            }
        )
        python = await tools["exec"].run({"backend": "python", "command": probe})
    assert "tcp open" not in shell["stdout"] and "dns blocked" in shell["stdout"]
    assert python["stdout"] == "tcp blocked\ndns blocked\n"
    assert server.connections == 0


BAD_NAMES = ["", ".", "..", "../other", "a/b", "/abs", "x\x00y", "n" * 201]


async def test_bad_workspace_names_are_rejected_everywhere(cluster: Settings, record_property: Any) -> None:
    for bad in BAD_NAMES:
        with pytest.raises(OSError) as info:
            await computer.get_workspace(bad)
        assert info.value.errno in (errno.EINVAL, errno.ENAMETOOLONG), bad
        with pytest.raises(OSError):
            computer.workspace_actor(bad)
    record_property("bad_workspace_names", len(BAD_NAMES))


async def test_a_near_miss_name_never_resolves_to_another_workspaces_file(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as mine:
        await mine.fs.write_file("/secret.txt", "mine")
    near = [
        f"{name}-other",
        name.upper(),
        f" {name}",
        f"{name} ",
        f"..{name}",
        f"{name}\\..",
        f"{name}.sqlite",
    ]
    opened = []
    try:
        for other in near:
            async with computer.get_workspace(other) as ws:
                opened.append(other)
                assert not await ws.fs.exists("/secret.txt"), other
                assert ws.id != mine.id
        files = sorted(p.name for p in cluster.workspaces_dir.iterdir() if p.suffix == ".sqlite")
        assert len(files) == len(near) + 1
        for path in cluster.workspaces_dir.rglob("*"):
            assert path.resolve().parent == cluster.workspaces_dir.resolve()
    finally:
        import ray

        from computer.actors import NAMESPACE, actor_name

        for other in opened:
            try:
                ray.kill(ray.get_actor(actor_name(other), namespace=NAMESPACE))
            except ValueError:
                pass


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("COMPUTER_RELIABILITY_FULL"),
    reason="about 1.5 minutes: run by benchmarks/reliability_report.py (COMPUTER_RELIABILITY_FULL=1)",
)
async def test_a_1_gb_stdout_flood_through_the_pool_keeps_caller_and_owner_memory_bounded(
    cluster: Settings, name: str, record_property: Any
) -> None:
    total = 1_000_000_000
    async with computer.get_workspace(name) as ws:
        await (await ws.runtime.exec("true")).result()  # warm: the owner's first-run allocations
        owner_before = (await ws.handle.stats.remote())["rss_bytes"]
        caller_before = _rss()
        handle = await ws.runtime.exec(
            f"yes 'one more line of a very large flood' | head -c {total}", timeout=600
        )
        result = await handle.result()
        owner_after = (await ws.handle.stats.remote())["rss_bytes"]
        cut = result.truncated["stdout"]
        assert (result.status, cut.status, cut.total_bytes) == ("completed", "saved", total)
        assert cut.path is not None and (await ws.fs.stat(cut.path)).size == total
    assert _rss() - caller_before < 100 * 1024 * 1024
    assert owner_after - owner_before < 300 * 1024 * 1024
    record_property("flood_1gb_owner_rss_growth_mib", round((owner_after - owner_before) / 2**20, 1))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
