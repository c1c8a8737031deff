"""Issue 25's findings, each as a test that failed before the fix: locks that do not survive their owner,
clients that stay stuck on a dead owner, keyed mutations that must not run twice, an upload cut by an
owner restart surfacing as a bare ``LookupError``."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import uuid
from typing import Any

import pytest
import ray
from owner_models import death_recorded, kill_owner, kill_owner_now

import computer
from computer.actors import OutcomeUnknownError, UploadLostError, WorkspaceUnavailableError
from computer.config import Settings
from computer.storage.errors import LockLostError


async def _restart_in_place(ws: Any) -> None:
    """SIGKILL the owner's process (Ray restarts it in place) and wait until a new process answers."""
    pid = int((await ws.handle.stats.remote())["pid"])
    os.kill(pid, signal.SIGKILL)
    for _ in range(600):
        try:
            if int((await ws.handle.stats.remote())["pid"]) != pid:
                return
        except ray.exceptions.RayActorError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError("the owner was not restarted")


async def test_a_lock_lost_with_its_owner_refuses_the_stale_holders_write(
    cluster: Settings, name: str, record_property: Any
) -> None:
    """Issue 25 (2): A holds the counter's lock and reads 0; the owner dies and restarts; B takes the lock
    at once and increments to 1; A's write computed from 0 must be refused, not acknowledged."""
    async with computer.get_workspace(name) as a, computer.get_workspace(name) as b:
        await a.fs.write_file("/counter", b"0")
        async with a.locks.hold(["/counter"]):
            seen = int(await a.fs.read_file("/counter"))
            await _restart_in_place(a)
            async with b.locks.hold(["/counter"]):  # the restarted owner's table is empty: B gets it
                value = int(await b.fs.read_file("/counter"))
                await b.fs.write_file("/counter", str(value + 1).encode())
            with pytest.raises(LockLostError, match="lock lost: the lock on /counter") as lost:
                await a.fs.write_file("/counter", str(seen + 1).encode())
            assert lost.value.errno == errno.ENOLCK and lost.value.filename == "/counter"
            with pytest.raises(LockLostError):  # an upload under the lost lock too
                await a.fs.write_file("/counter", (b"9" for _ in range(3)))
        assert await a.fs.read_file("/counter") == b"1"  # one acknowledged increment, one refused
        async with a.locks.hold(["/counter"]):  # A takes it again and re-reads: a correct increment
            value = int(await a.fs.read_file("/counter"))
            await a.fs.write_file("/counter", str(value + 1).encode())
        assert await b.fs.read_file("/counter") == b"2"
    record_property("lock_owner_restarts", 1)


async def test_writes_under_a_live_lock_and_without_one_are_unaffected(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws, computer.get_workspace(name) as other:
        async with ws.locks.hold(["/a"]):
            await ws.fs.write_file("/a", b"1")
            await other.fs.write_file("/b", b"2")  # another client holds nothing: nothing to present
            await ws.fs.write_file("/big", b"x" * (5 * 1024 * 1024))  # an upload under the lock
        await ws.fs.write_file("/a", b"3")
        assert await other.fs.read_file("/a") == b"3"
        assert len(await other.fs.read_file("/big")) == 5 * 1024 * 1024


async def test_a_client_that_only_writes_heals_after_its_owner_is_killed(
    cluster: Settings, name: str
) -> None:
    """Issue 25 (3): after ``ray.kill`` every write raised EAGAIN until a read came. A write sent to an
    owner already known dead never ran: it goes to the new owner; at most the one write cut by the death
    reports an unknown outcome."""
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f", b"0")
        await kill_owner(ws.handle)  # its host, or its dedicated actor: gone for good
        await death_recorded(ws.handle)  # dated before the next call is sent, past the margin
        for i in range(1, 6):
            await ws.fs.write_file("/f", str(i).encode())  # never EAGAIN: the owner died before
        assert await ws.fs.read_file("/f") == b"5"
        # Cut mid-call: the kill races the write. Unknown at worst, and the next write heals.
        outcomes = []
        for i in range(3):
            write = asyncio.ensure_future(ws.fs.write_file("/g", str(i).encode()))
            kill_owner_now(ws.handle)
            try:
                await write
                outcomes.append("ok")
            except OutcomeUnknownError as exc:
                assert "unknown outcome" in str(exc) and exc.errno == errno.EAGAIN
                outcomes.append("unknown")
            await ws.fs.write_file("/h", str(i).encode())  # the next write always goes through
        assert await ws.fs.read_file("/h") == b"2"


async def test_a_resent_keyed_mutation_is_answered_with_its_first_reply(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        key = uuid.uuid4().hex
        first = await ws.handle.call.remote("mkdir", ("/d",), {}, (), key)
        again = await ws.handle.call.remote("mkdir", ("/d",), {}, (), key)  # would be EEXIST if run
        assert first == again == ("ok", None)
        fresh = await ws.handle.call.remote("mkdir", ("/d",), {}, (), uuid.uuid4().hex)
        assert fresh[0] == "os" and fresh[1][0] == errno.EEXIST


async def test_a_keyed_mutation_resent_after_its_owner_died_is_answered_from_the_call_journal(
    cluster: Settings, name: str
) -> None:
    """Across an owner's death: a key that ran gets its first reply; one that started but changed
    nothing runs; one whose paths changed since it started is an unknown outcome, never run twice."""
    from computer.actors.naming import workspace_file

    async with computer.get_workspace(name) as ws:
        ran, never, maybe = (uuid.uuid4().hex for _ in range(3))
        assert await ws.handle.call.remote("mkdir", ("/d",), {}, (), ran) == ("ok", None)
        journal = workspace_file(cluster, name).with_name(f"{name}.sqlite-calls")
        # Two calls cut by a death: one before it changed anything, one after /d changed.
        lines = [json.dumps({"k": never, "p": [0, ["/never"]]}), json.dumps({"k": maybe, "p": [0, ["/d"]]})]
        fd = os.open(journal, os.O_WRONLY | os.O_APPEND)
        os.write(fd, "".join(line + "\n" for line in lines).encode())
        os.close(fd)
        await _restart_in_place(ws)
        assert await ws.handle.call.remote("mkdir", ("/d",), {}, (), ran) == ("ok", None)  # not EEXIST
        assert await ws.handle.call.remote("mkdir", ("/never",), {}, (), never) == ("ok", None)
        assert await ws.fs.exists("/never")
        unknown = await ws.handle.call.remote("mkdir", ("/d",), {}, (), maybe)
        assert unknown[0] == "os" and unknown[1][0] == errno.EAGAIN and "unknown outcome" in unknown[1][1]


async def test_an_upload_cut_by_an_owner_restart_is_unavailable_or_replayed(
    cluster: Settings, name: str
) -> None:
    """Issue 25 (4): a bare ``LookupError: unknown or expired upload``. An iterator cannot be sent again:
    ``UploadLostError`` (a ``WorkspaceUnavailableError``, EAGAIN); bytes are sent again whole."""
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/up", b"old")
        conn = ws._conn
        real = conn.request
        puts = 0

        async def restarting(method: str, *args: Any, **kwargs: Any) -> Any:
            nonlocal puts
            if method == "upload_put":
                puts += 1
                if puts == 2:
                    await _restart_in_place(ws)
            return await real(method, *args, **kwargs)

        conn.request = restarting  # type: ignore[method-assign]
        try:
            with pytest.raises(UploadLostError) as lost:
                await ws.fs.write_file("/up", (bytes([65 + i]) * 600_000 for i in range(4)))
            assert isinstance(lost.value, WorkspaceUnavailableError) and lost.value.errno == errno.EAGAIN
            assert await ws.fs.read_file("/up") == b"old"  # nothing of it was written
            puts = 0
            data = os.urandom(6 * 1024 * 1024)
            await ws.fs.write_file("/up", data)  # bytes: the upload starts again after the restart
            assert await ws.fs.read_file("/up") == data
        finally:
            conn.request = real  # type: ignore[method-assign]


class _FailingMethod:
    """An owner's call failing with ``error`` (its first ``failures`` tries, then answered "ok"; None:
    every try), as Ray reports it to the client."""

    def __init__(self, error: BaseException, failures: int | None = None) -> None:
        self.error = error
        self.failures = failures
        self.calls = 0

    def remote(self, *args: Any) -> asyncio.Future[Any]:
        self.calls += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.failures is None or self.calls <= self.failures:
            future.set_exception(self.error)
        else:
            future.set_result(("ok", None))
        return future


async def test_no_raw_ray_exception_reaches_a_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """Audit (issue 25): a Ray error other than an actor's death (an object lost, a system error) is the
    documented class too: a read retries within the deadline, then ``WorkspaceUnavailableError``; a
    mutation is an unknown outcome."""
    from computer.client import _connection

    monkeypatch.setattr(_connection, "_MOVED_DEADLINE", 0.3)
    method = _FailingMethod(ray.exceptions.RaySystemError("the object store went away"))
    handle = type("Handle", (), {"call": method})()
    conn = _connection.Connection(handle, name="w", managed=False)
    with pytest.raises(WorkspaceUnavailableError) as read:
        await conn.request("call", "read_file", ("/f",), {}, retry_safe=True)
    assert not isinstance(read.value, OutcomeUnknownError) and method.calls > 1
    with pytest.raises(OutcomeUnknownError, match="unknown outcome"):
        await conn.request("call", "write_file", ("/f", b"x"), {}, keyed=True)


async def test_a_keyed_mutation_is_sent_again_while_its_owner_restarts_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under load a restarting owner's write failed ``OutcomeUnknownError`` (1 in 5 runs of the busy
    owner's restart test): the client sent it to the dead process twice, each try failing at once; a
    keyed call is safe to send again (the next owner's journal answers it), so it is, until the owner
    is back or the deadline. An unkeyed one is still an unknown outcome."""
    from computer.client import _connection

    async def never(*args: Any, **kwargs: Any) -> Any:
        return False

    async def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    restarting = ray.exceptions.ActorUnavailableError("restarting", None)  # as a client not yet told sees it
    method = _FailingMethod(restarting, failures=5)
    handle = type("Handle", (), {"call": method, "_actor_id": b"a"})()
    conn = _connection.Connection(handle, name="w", managed=True)
    monkeypatch.setattr(conn, "_did_not_run", never)
    monkeypatch.setattr(conn, "_reresolve", nothing)
    monkeypatch.setattr(conn, "_reresolve_quietly", nothing)
    assert await conn.request("call", "write_file", ("/f", b"x"), {}, keyed=True) is None
    assert method.calls == 6
    unkeyed = _FailingMethod(restarting, failures=1)
    conn.handle = type("Handle", (), {"call": unkeyed, "_actor_id": b"a"})()
    with pytest.raises(OutcomeUnknownError, match="unknown outcome"):
        await conn.request("call", "write_file", ("/f", b"x"), {})
