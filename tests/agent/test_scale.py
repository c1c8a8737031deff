"""Many agents: each takes one turn, all hibernate (no process left), and any of them continues later.

The count is a parameter: 20 in the default suite, 200 with ``RUN_SLOW=1`` (each awake agent is a
Ray worker process of ~70 MB, so turns run in waves of :data:`WAVE` and idle agents exit). Agents are
reached through ``AgentClient``, as a user running many of them would. The test prints its figures:
wall time, peak agent processes, peak memory in use above the start.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from computer.agent import AgentClient

from ._agents import LightAgent
from ._scripted import outcome, plan
from .conftest import Agents, until_named_free

WAVE = 16  # agents starting or chatting at once


@dataclass
class Peaks:
    memory_bytes: int = 0
    processes: int = 0


def _memory_in_use() -> int:
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            fields[key] = int(value.split()[0]) * 1024
    return fields["MemTotal"] - fields["MemAvailable"]


def _agent_processes() -> int:
    count = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read().startswith(b"ray::LightAgent"):
                        count += 1
            except OSError:
                continue
    return count


async def _until_no_agent_process(within: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while _agent_processes():
        assert loop.time() < deadline, f"{_agent_processes()} agent processes are still alive"
        await asyncio.sleep(0.1)


@contextmanager
def sampling(peaks: Peaks) -> Iterator[None]:
    """Sample memory in use and live agent processes every 100 ms while the block runs."""
    base = _memory_in_use()
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            peaks.memory_bytes = max(peaks.memory_bytes, _memory_in_use() - base)
            peaks.processes = max(peaks.processes, _agent_processes())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize(
    "count",
    [
        pytest.param(20, marks=pytest.mark.timeout(600)),  # ~75 s alone, 150 s on a busy machine
        pytest.param(
            200,
            marks=[
                pytest.mark.slow,
                pytest.mark.timeout(1800),
                pytest.mark.skipif(os.environ.get("RUN_SLOW") != "1", reason="set RUN_SLOW=1 to run"),
            ],
        ),
    ],
)
async def test_many_agents_take_a_turn_hibernate_and_continue(agents: Agents, count: int) -> None:
    names = [agents.name() for _ in range(count)]
    gate = asyncio.Semaphore(WAVE)
    peaks = Peaks()

    async def first_turn(name: str) -> int:
        async with gate:
            # The client re-spawns an agent that went to sleep before its first call reached it
            # (hibernate_after is 1 s and a busy machine can take longer than that to deliver it).
            client = AgentClient(LightAgent, name, recover_within=300)
            return int(outcome((await client.chat(plan(reply=name))).text)["turns"])

    started = time.monotonic()
    with sampling(peaks):
        turns = await asyncio.wait_for(asyncio.gather(*(first_turn(n) for n in names)), 60 + 6 * count)
        first_done = time.monotonic()
        assert turns == [1] * count
        # Idle agents hibernate: every actor exits and frees its name (and its process).
        await asyncio.wait_for(asyncio.gather(*(until_named_free(n, within=120) for n in names)), 180)
        await _until_no_agent_process(within=60)  # a process ends shortly after its name is freed
        asleep = time.monotonic()
        chosen = random.Random(count).sample(names, min(count, 5))
        woken = [AgentClient(LightAgent, name, recover_within=300) for name in chosen]
        again = await asyncio.gather(*(a.chat(plan(reply="again")) for a in woken))
    assert [outcome(r.text)["turns"] for r in again] == [2] * len(chosen)
    print(
        f"\n{count} agents: first turns {first_done - started:.1f} s, all hibernated after "
        f"{asleep - first_done:.1f} s more, wake + turn of {len(chosen)}: {time.monotonic() - asleep:.1f} s; "
        f"peak {peaks.processes} agent processes, peak memory {peaks.memory_bytes / 2**20:.0f} MiB above start"
    )
