"""Restarting Redis under the directory: calls fail clearly while it is down, and the directory
recovers on the same port, with its records (persistent Redis) or from nothing (a Redis that lost
everything), without ever handing a workspace an epoch that storage would refuse."""

from __future__ import annotations

import errno
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
import redis
from owner_models import kill_owner, owner_process

import computer
from computer.actors import WorkspaceUnavailableError
from computer.actors.directory import RedisDirectory


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisProcess:
    """A redis-server on a fixed loopback port that can be stopped and started again."""

    def __init__(self, workdir: Path, *, persistent: bool) -> None:
        self.port = _free_port()
        self.workdir = workdir
        self.persistent = persistent
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed")
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        )
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                *persistence,
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(port=self.port, socket_timeout=0.5).ping():
                    return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # a process starting: nothing to await

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()
        self.restarts += 1


@pytest.fixture(params=[True, False], ids=["persistent", "forgetful"])
def redis_process(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path, persistent=request.param)
    server.start()
    yield server
    if server.proc is not None:
        server.stop()


def test_directory_fails_clearly_while_redis_is_down_and_recovers_on_restart(
    redis_process: RedisProcess, record_property: Any
) -> None:
    directory = RedisDirectory(redis_process.url, retry_for=0.5)
    try:
        assert directory.acquire_lease("ws", "node-a", "owner-1", 30.0) == 1
        assert directory.acquire_lease("ws", "node-a", "owner-2", 30.0) == 2
        redis_process.stop()
        started = time.monotonic()
        # Retried with backoff for retry_for seconds, then the documented error, never a raw redis one.
        with pytest.raises(WorkspaceUnavailableError, match="unreachable") as failed:
            directory.renew_lease("ws", "owner-2", 2, 30.0)
        assert failed.value.errno == errno.EAGAIN and time.monotonic() - started >= 0.5
        with pytest.raises(WorkspaceUnavailableError):
            directory.get("ws")
        redis_process.start()
        record = directory.get("ws")
        if redis_process.persistent:
            assert record is not None and record.epoch == 2
            assert directory.renew_lease("ws", "owner-2", 2, 30.0) is True
            assert directory.acquire_lease("ws", "node-a", "owner-3", 30.0) == 3
        else:
            assert record is None  # everything was lost, yet the directory works again
            assert directory.renew_lease("ws", "owner-2", 2, 30.0) is False
            assert directory.acquire_lease("ws", "node-a", "owner-3", 30.0) >= 1
        assert directory.names() == ["ws"]
    finally:
        directory.close()
    record_property("redis_restarts", 1)


def test_a_directory_call_rides_through_a_short_redis_outage(redis_process: RedisProcess) -> None:
    """Found by issue 25: a read raised ``redis.ConnectionError`` 0.01 s after Redis went away."""
    directory = RedisDirectory(redis_process.url)
    try:
        assert directory.acquire_lease("ws", "node-a", "owner-1", 30.0) == 1
        redis_process.stop()
        restarter = threading.Timer(1.0, redis_process.start)
        restarter.start()
        try:
            record = directory.get("ws")  # retried until Redis is back
        finally:
            restarter.join()
        assert (record is not None) == redis_process.persistent
    finally:
        directory.close()


async def _kill(handle: Any) -> None:
    """Kill the owner's process (its host, or its dedicated actor) and wait until it answers no more."""
    await kill_owner(handle)


async def test_workspaces_keep_working_across_a_redis_restart(
    ray_session: Any, redis_process: RedisProcess, tmp_path: Path
) -> None:
    name = f"rel-redis-{uuid.uuid4().hex[:10]}"
    computer.init(data_dir=tmp_path / "data", redis_url=redis_process.url, lock_lease=2.0)
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/before", b"1")
            await _kill(ws.handle)  # a second owner: the file now remembers epoch 2
            assert await ws.fs.read_file("/before") == b"1"  # a read re-resolves the new owner
            await ws.fs.write_file("/second", b"2")
            redis_process.restart()
            await _kill(ws.handle)  # a third owner, placed by a directory that restarted
            assert await ws.fs.read_file("/before") == b"1"
            await ws.fs.write_file("/after", b"3")  # storage accepts the new owner's epoch
            assert sorted(await ws.fs.ls("/")) == ["/after", "/before", "/second"]
    finally:
        try:
            ray.kill(owner_process(computer.workspace_actor(name)))
        except Exception:
            pass
        computer.init(data_dir=tmp_path / "data")
