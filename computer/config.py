"""Configuration: one pydantic settings model (SPEC section 7b).

Values come from keyword arguments of ``computer.init(...)`` or from ``COMPUTER_*`` environment
variables; :func:`settings` returns the active one (the last ``configure``/``init`` wins).

``Settings`` reads the environment itself, as pydantic-settings' ``BaseSettings`` did with this
model's configuration (it was one): ``Settings(**values)`` takes each field not given from the
variable ``COMPUTER_<FIELD>`` (any case; the value as a string, validated like a keyword argument, an
empty one included), and so do ``model_validate``/``model_validate_json`` (pydantic validates
through a model's own ``__init__``); defaults are validated; other ``COMPUTER_*`` variables are
ignored. pydantic-settings cost ~30 ms of every ``computer`` command's start (~50 ms with its
sources) for these few lines.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["Settings", "configure", "settings"]


ENV_PREFIX = "COMPUTER_"


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, arbitrary_types_allowed=True)

    def __init__(self, **values: Any) -> None:
        super().__init__(**{**_from_environment(), **values})

    data_dir: Path = Field(default_factory=lambda: Path.home() / ".local" / "share" / "computer")
    redis_url: str | None = None  # unset: embedded SQLite directory and asset store
    assets_url: str = "http://127.0.0.1:8787"  # public base URL of `computer serve`
    # Exec pools (SPEC section 10): ``*_pool_size`` is each pool's minimum number of workers and
    # ``*_pool_max`` its maximum; None = elastic (the cluster's CPUs / pool_worker_cpus, plus one more
    # node's worth that the autoscaler can add); equal to the minimum = fixed; below it counts as it.
    # A size of 0 turns the pool off unless its max is set above 0 (then it scales from zero).
    shell_pool_size: int = Field(default=2, ge=0)
    python_pool_size: int = Field(default=2, ge=0)
    shell_pool_max: int | None = Field(default=None, ge=0)
    python_pool_max: int | None = Field(default=None, ge=0)
    pool_worker_cpus: float = Field(default=1.0, ge=0)  # CPUs each pool worker reserves from Ray
    pool_worker_memory: int = Field(default=512 * 1024 * 1024, ge=0)  # bytes each worker reserves
    pool_runs_per_cpu: float = Field(default=4.0, gt=0)  # concurrent runs per reserved CPU; more wait
    pool_idle_after: float = Field(default=60.0, gt=0)  # seconds idle before a worker above the minimum goes
    hibernate_after: float = Field(default=300.0, gt=0)  # seconds an owner may stay idle
    # The owner model (SPEC section 10, issue 20): "hosted" (the default) puts many workspaces in each
    # owner host actor (a few per node: ~0.5 MiB and ~15 ms to wake one on a live host); "dedicated"
    # gives every awake workspace an actor process of its own (~63 MiB and ~0.4 s to wake), for a
    # workspace that needs a process of its own.
    owners: Literal["hosted", "dedicated"] = "hosted"
    # Owner hosts per node for "hosted" (0: one per CPU of the node). The first process placing a
    # workspace on a node fixes the number for that node and data directory for the Ray session.
    owner_hosts_per_node: int = Field(default=0, ge=0)
    lock_lease: float = Field(default=30.0, gt=0)  # seconds a client's lock outlives its last renewal
    max_workspace_bytes: int | None = Field(
        default=None, ge=0
    )  # per-workspace size limit (ENOSPC beyond it); None: unlimited
    shared_data_dir: bool = False  # data_dir is shared storage: owners may wake on any node
    object_store_memory: int = 256 * 1024 * 1024  # for a local Ray started by init()
    # audit log per workspace (issue 21): False writes no records; retention: the oldest go past either limit
    audit: bool = True
    audit_max_records: int = Field(default=10_000, ge=1)
    audit_max_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)

    @field_validator("data_dir")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        """``~`` and ``~user`` as a shell would expand them: the README writes the default as
        ``~/.local/share/computer``, and a value copied from it into an MCP host's config or an env
        file reaches here unexpanded (it made a directory named ``~`` in the current one)."""
        return value.expanduser()

    @property
    def workspaces_dir(self) -> Path:
        return self.data_dir / "workspaces"

    @property
    def assets_dir(self) -> Path:
        return self.data_dir / "assets"


def _from_environment() -> dict[str, str]:
    """The fields that ``COMPUTER_*`` variables set (names in any case; the last spelling wins)."""
    prefix = ENV_PREFIX.lower()
    found = {key.lower(): value for key, value in os.environ.items()}
    return {name: found[prefix + name] for name in Settings.model_fields if prefix + name in found}


_active: Settings | None = None


def configure(**overrides: Any) -> Settings:
    """Build the active settings from the environment plus ``overrides`` (``None`` values are ignored)."""
    global _active
    _active = Settings(**{k: v for k, v in overrides.items() if v is not None})
    return _active


def settings() -> Settings:
    """The active settings (from the environment when nothing was configured)."""
    global _active
    if _active is None:
        _active = Settings()
    return _active
