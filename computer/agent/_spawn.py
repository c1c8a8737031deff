"""``spawn``: get or create the named, detached actor of an agent."""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any

from ..actors import NAMESPACE, OWNER_GROUPS
from ..actors.naming import check_name, data_dir_key
from ..actors.raycompat import actor_class_parts
from ..config import Settings

__all__ = ["AGENT_MAX_CONCURRENCY", "AGENT_WAIT_METHODS", "agent_actor_name", "spawn"]

# approve/pending/get_workspace calls must get through while a turn (or an exec stream) is running.
AGENT_MAX_CONCURRENCY = 1000
# The agent's calls that wait for others: a turn waits for the one before it (the turn lock), then for
# its model and tools; an approval resumes the paused turn. They held slots of the default group, so
# as many waiting turns (or exec streams, lock requests) as slots left every other call (``ping``,
# ``pending``, ``history``, a read) queued until a turn ended. The actor ``spawn`` makes serves them on
# the owner's wait group (``WAIT_GROUP``), a raw handle's calls included (the method's own group), and
# has the owner's other groups, which ``describe`` reports to ``get_workspace(agent)`` clients.
AGENT_WAIT_METHODS = frozenset({"chat", "chat_stream", "approve", "reject"})
_served: dict[Any, tuple[Any, dict[str, Any]]] = {}  # agent class -> (actor class with groups, options)


def agent_actor_name(name: str, config: Settings | dict[str, Any] | None = None) -> str:
    """The Ray actor name of agent ``name``: ``computer:agent:<dir>:<name>``.

    Scoped by the data directory the agent's workspace lives in (``config``'s, read like the owner
    reads it, else the cluster's settings), as owner names are: the same agent name in two data
    directories is two agents. Distinct from the plain owner ``computer:ws:<dir>:<name>``.
    """
    if isinstance(config, dict):
        config = Settings(**config)
    elif config is None:
        from ..actors import cluster_settings

        config = cluster_settings()
    return f"computer:agent:{data_dir_key(config.data_dir)}:{check_name(name)}"


def spawn(
    agent_class: Any, name: str, *, config: Settings | dict[str, Any] | None = None, **options: Any
) -> Any:
    """The actor of agent ``name`` (a Ray ``ActorHandle``), created from ``agent_class`` on first use.

    ``agent_class`` is an ``Agent`` subclass, ``@ray.remote``-decorated or not. The actor is named and
    detached, so any process finds it; after it hibernated or was killed, ``spawn`` creates a new one
    that reads the conversation back from the workspace. ``options`` override Ray actor options.
    """
    import ray

    if not ray.is_initialized():
        from ..actors import init

        init()
    remote, defaults = _with_groups(agent_class)
    opts: dict[str, Any] = {
        **defaults,
        "name": agent_actor_name(name, config),
        "namespace": NAMESPACE,
        "get_if_exists": True,
        "lifetime": "detached",
        "max_concurrency": AGENT_MAX_CONCURRENCY,
        "num_cpus": 0,
        **options,
    }
    args: tuple[Any, ...] = (name,)
    if config is not None:
        args += (config.model_dump(mode="json") if isinstance(config, Settings) else config,)
    return remote.options(**opts).remote(*args)


def _with_groups(agent_class: Any) -> tuple[Any, dict[str, Any]]:
    """The actor class of ``agent_class`` (bare, or decorated with ``@ray.remote``: its options are
    returned as defaults) with the owner's concurrency groups, made once: a subclass that says it has
    them (``Agent.__init__`` reads its ``*_group``) and sends ``AGENT_WAIT_METHODS`` to the wait group.
    """
    import ray

    made = _served.get(agent_class)
    if made is not None:
        return made
    defaults: dict[str, Any] = {}
    base = agent_class
    if hasattr(agent_class, "remote"):  # an ActorClass: its class, and the options it was decorated with
        base, defaults = actor_class_parts(agent_class)
    groups = {group: slots for group, slots in OWNER_GROUPS.values()}
    groups.update(defaults.pop("concurrency_groups", None) or {})  # its own, if it was given any
    members: dict[str, Any] = {attr: group for attr, (group, _) in OWNER_GROUPS.items()}
    members["__module__"] = base.__module__
    for method in AGENT_WAIT_METHODS:
        members[method] = _on_wait_group(getattr(base, method))
    served = type(base.__name__, (base,), members)
    made = (ray.remote(concurrency_groups=groups)(served), defaults)  # type: ignore[call-overload]
    _served[agent_class] = made
    return made


def _on_wait_group(method: Any) -> Any:
    """``method`` served on the wait group (the agent hops to its own loop: ``Agent._on_own_loop``)."""
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def streamed(self: Any, *args: Any, **kwargs: Any) -> Any:
            async with contextlib.aclosing(method(self, *args, **kwargs)) as items:
                async for item in items:  # closed with this one, not once collected
                    yield item

        wrapped: Any = streamed
    else:

        @functools.wraps(method)
        async def called(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await method(self, *args, **kwargs)

        wrapped = called
    # Ray reads the group from the function it unwraps (``__wrapped__``): this one, with its signature.
    del wrapped.__wrapped__
    wrapped.__signature__ = inspect.signature(method)
    wrapped.__ray_concurrency_group__ = OWNER_GROUPS["wait_group"][0]
    return wrapped
