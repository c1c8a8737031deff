"""Owner processes in either owner model (issue 20), for tests that kill an owner or watch one leave.

``owners="hosted"`` (the default): a workspace's owner process is the owner host holding it, shared
with its neighbours, and hibernation closes the workspace inside a host that may stay up.
``owners="dedicated"``: the owner process is the workspace's own actor, which exits on hibernation.
A test states what it means (the process owning this workspace died; this workspace is open
somewhere; it woke in a new activation) through these helpers, and holds in both models. "A new
activation" is a higher fencing epoch (``stats()["epoch"]``, or the client's ``_conn.epoch``), never a
new actor id: a hosted workspace that wakes on its live host keeps the host's actor id.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from typing import Any

import ray

from computer.actors import NAMESPACE, HostedHandle, actor_name
from computer.actors.raycompat import actor_death_time
from computer.config import Settings


def owner_process(handle: Any) -> Any:
    """The ``ActorHandle`` of the process owning ``handle``'s workspace: its host, or its own actor."""
    return handle.host if isinstance(handle, HostedHandle) else handle


async def kill_owner(handle: Any, *, restart: bool = False) -> None:
    """Kill the process owning ``handle``'s workspace (hosted: every neighbour on its host goes too).

    Without ``restart`` the process is gone for good and this waits (bounded) until it answers no more
    (``ray.kill`` takes effect asynchronously); the next call through a client starts a new owner.
    With ``restart`` Ray restarts it in place (a dedicated owner or a host has restarts left).
    """
    process = owner_process(handle)
    ray.kill(process, no_restart=not restart)
    if restart:
        return
    for _ in range(400):
        try:
            await process.__ray_ready__.remote()
        except ray.exceptions.RayActorError:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the killed owner process keeps answering")


async def death_recorded(handle: Any, *, margin: float = 0.5) -> None:
    """Wait (bounded, 30 s) until Ray's actor table dates the death of the process owning ``handle``
    more than ``margin`` seconds ago (this machine's clock): a call sent from then on was sent after
    the death by more than the client's ``_DEATH_MARGIN`` (0.25 s), so a client tells that it never
    ran. Before, tests slept 0.5 s after :func:`kill_owner`, which held only if the table was written
    by the time the dead process stopped answering."""
    process = owner_process(handle)
    deadline = time.monotonic() + 30.0
    while (
        died := await asyncio.to_thread(actor_death_time, process)
    ) is None or time.time() - died <= margin:
        assert time.monotonic() < deadline, f"Ray's actor table does not date the death: {died}"
        await asyncio.sleep(0.1)


def kill_owner_now(handle: Any) -> None:
    """``ray.kill`` the process owning ``handle``'s workspace without waiting (a kill racing a call)."""
    ray.kill(owner_process(handle))


async def awake_owner(name: str, config: Settings) -> Any | None:
    """The ``ActorHandle`` of the process holding ``name`` open right now (its dedicated actor, or an
    owner host of ``config``'s data directory that has it open), None when it sleeps; never wakes it."""
    from computer.actors._hosts import host_handles

    try:
        return ray.get_actor(actor_name(name, config), namespace=NAMESPACE)
    except ValueError:
        pass
    for host in host_handles(config).values():
        try:
            if await host.ws_info.remote(name) is not None:
                return host
        except ray.exceptions.RayActorError:
            continue  # exited meanwhile: it holds nothing
    return None


async def kill_awake_owners(names: Iterable[str], config: Settings) -> None:
    """``ray.kill`` the process holding each of ``names`` open now (a test's teardown: its hosts or
    dedicated actors must not outlive the data directory it made)."""
    for name in names:
        owner = await awake_owner(name, config)
        if owner is not None:
            ray.kill(owner)


async def owner_awake(name: str, config: Settings) -> bool:
    """Whether an owner holds ``name`` open right now (see :func:`awake_owner`)."""
    return await awake_owner(name, config) is not None


async def process_pid(process: Any) -> int:
    """The pid of an owner process (an ``ActorHandle``: a host or a dedicated owner)."""
    return int(await process.__ray_call__.remote(lambda _self: os.getpid()))


async def epoch(ws: Any) -> int:
    """The fencing epoch of the owner answering client ``ws`` now (one more per activation)."""
    return int((await ws.handle.stats.remote())["epoch"])
