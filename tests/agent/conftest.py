"""Fixtures of the agent tests: ``computer.init`` over the shared Ray session, and agent cleanup."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from ray import cloudpickle

from computer.actors import NAMESPACE
from computer.agent import agent_actor_name, spawn
from computer.config import Settings

from . import _agents, _scripted

# Ray workers cannot import the test package: ship the test agents and the scripted model by value.
cloudpickle.register_pickle_by_value(_agents)  # type: ignore[no-untyped-call]
cloudpickle.register_pickle_by_value(_scripted)  # type: ignore[no-untyped-call]


class Agents:
    """Spawns agents under unique names and kills whatever is left of them after the test."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def name(self) -> str:
        name = f"a-{uuid.uuid4().hex[:10]}"
        self.names.add(name)
        return name

    def spawn(self, cls: Any, name: str | None = None, **options: Any) -> Any:
        name = name or self.name()
        self.names.add(name)
        return spawn(cls, name, **options)

    def cleanup(self) -> None:
        for name in self.names:
            try:
                ray.kill(ray.get_actor(agent_actor_name(name), namespace=NAMESPACE))
            except ValueError:
                pass


@pytest.fixture
def agents(cluster: Settings) -> Iterator[Agents]:
    made = Agents()
    yield made
    made.cleanup()


async def until_dead(handle: Any, within: float = 30.0) -> None:
    """Wait (bounded) until an actor answers no more (``ray.kill`` and exits take effect asynchronously)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        try:
            await handle.ping.remote()
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the actor still answers")


async def until_named_free(name: str, within: float = 30.0) -> None:
    """Wait (bounded) until the agent's Ray name is released, so the next spawn creates a new actor."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        try:
            ray.get_actor(agent_actor_name(name), namespace=NAMESPACE)
        except ValueError:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"agent {name} is still registered")
