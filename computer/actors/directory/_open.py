"""Pick the directory the configuration asks for: Redis when a URL is set, else SQLite in the data dir."""

from __future__ import annotations

from ...config import Settings
from ._directory import Directory
from ._redis import RedisDirectory
from ._sqlite import SqliteDirectory

__all__ = ["open_directory"]


def open_directory(config: Settings) -> Directory:
    """The directory shared by every owner configured like ``config``."""
    if config.redis_url:
        return RedisDirectory(config.redis_url)
    return SqliteDirectory(config.data_dir / "directory.sqlite")
