"""``spawn``: get or create the named, detached actor of an agent."""

from __future__ import annotations

from typing import Any

from ..actors import NAMESPACE
from ..actors.naming import check_name, data_dir_key
from ..config import Settings

__all__ = ["AGENT_MAX_CONCURRENCY", "agent_actor_name", "spawn"]

# approve/pending/get_workspace calls must get through while a turn (or an exec stream) is running.
AGENT_MAX_CONCURRENCY = 1000


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
    remote = agent_class if hasattr(agent_class, "remote") else ray.remote(agent_class)
    opts: dict[str, Any] = {
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
