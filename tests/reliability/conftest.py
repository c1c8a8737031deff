"""Fixtures of the reliability tests that run a redis-server of their own (it is flushed, stopped,
written old records: never the session's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.config import Settings

from .test_redis_restart import RedisProcess


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A redis-server of the test's own (it is flushed: never the session's)."""
    server = RedisProcess(tmp_path, persistent=False)
    server.start()
    yield server
    if server.proc is not None:
        server.stop()


@pytest.fixture(params=["dedicated", "hosted"])
def on_redis(
    request: pytest.FixtureRequest, ray_session: Any, own_redis: RedisProcess, tmp_path: Path
) -> Iterator[Settings]:
    """The session's Ray with ``own_redis`` as the directory, in one owner model, ``lock_lease`` 1.5 s;
    the settings put back after."""
    yield computer.init(
        data_dir=tmp_path / "data", redis_url=own_redis.url, lock_lease=1.5, owners=request.param
    )
    computer.init(data_dir=tmp_path / "data")
