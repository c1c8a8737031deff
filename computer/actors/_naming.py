"""Workspace names: validation, the owner actor's Ray name and namespace, the file path."""

from __future__ import annotations

import errno
from pathlib import Path

from ..config import Settings
from ..storage.errors import fs_error

__all__ = ["NAMESPACE", "actor_name", "check_name", "workspace_file"]

# Every owner actor lives in this one Ray namespace, whatever namespace the caller's job uses, so a
# name resolves to the same owner from every driver, task and actor of the cluster.
NAMESPACE = "computer"

_MAX_NAME_BYTES = 200  # leaves room for the ".sqlite" suffix and SQLite's "-wal"/"-shm" files


def check_name(name: str) -> str:
    """Return ``name`` if it can name a workspace (it becomes a file name); EINVAL otherwise."""
    if not isinstance(name, str) or not name:
        raise fs_error(errno.EINVAL, repr(name), "workspace name must be a non-empty string")
    if "/" in name or "\x00" in name or name in (".", ".."):
        raise fs_error(errno.EINVAL, name, "workspace name must not contain '/' or NUL, nor be '.' or '..'")
    if len(name.encode("utf-8", "surrogatepass")) > _MAX_NAME_BYTES:
        raise fs_error(errno.ENAMETOOLONG, name, f"workspace name longer than {_MAX_NAME_BYTES} bytes")
    return name


def actor_name(name: str) -> str:
    """The Ray actor name of the owner of workspace ``name``."""
    return f"computer:ws:{check_name(name)}"


def workspace_file(config: Settings, name: str) -> Path:
    """Where the SQLite file of workspace ``name`` lives."""
    return config.workspaces_dir / f"{check_name(name)}.sqlite"
