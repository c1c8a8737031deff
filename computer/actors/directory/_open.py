"""Pick the directory the configuration asks for: Redis when a URL is set, else the embedded SQLite one."""

from __future__ import annotations

from ...config import Settings
from ._directory import Directory
from ._head import HeadDirectory, on_head_node
from ._registry import RegisteredDirectory
from ._sqlite import SqliteDirectory

__all__ = ["open_directory"]


def open_directory(config: Settings) -> Directory:
    """The directory shared by every owner configured like ``config``, on every node of the cluster.

    Redis when ``redis_url`` is set (noting each file's place in the head node's file too, unless the
    data directory is shared; and each deletion's tombstone, there or in the shared data directory:
    see :mod:`._registry`). Otherwise the embedded SQLite file: opened directly on the head
    node (or anywhere when ``shared_data_dir`` says every node sees the same data directory), and
    through the head node's directory actor on other nodes, so that a multi-node cluster never has
    one directory per node (see :mod:`._head`).
    """
    if config.redis_url:
        return RegisteredDirectory(config)
    if not config.shared_data_dir and not on_head_node():
        return HeadDirectory(config)
    return SqliteDirectory(config.data_dir / "directory.sqlite")
