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
    """The session's Ray with ``own_redis`` as the directory, in one owner model, ``lock_lease`` 5 s;
    the settings put back after.

    5 s, not 1.5 s: these tests hold a lock across a fault and expect it still held. A client lock is
    renewed every ``lock_lease`` / 3; with 1.5 s, the test process's event loop blocked 1.5 s before a
    write (a loaded machine; shown with an injected ``time.sleep``) lost the lock (``LockLostError``).
    Nothing here needs a lease to run out fast; measured, the three files take 78 s, not 61 s (the wait
    for a killed owner's lease in ``test_cluster_faults6``, +5 s a run; renewals every 1.7 s, not 0.5 s)."""
    yield computer.init(
        data_dir=tmp_path / "data", redis_url=own_redis.url, lock_lease=5.0, owners=request.param
    )
    computer.init(data_dir=tmp_path / "data")
