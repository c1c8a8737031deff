"""Pieces of a pool worker without Ray: the sync limits it forwards, the mirror pool its shell uses."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from computer.actors._pool_context import OwnerExecContext
from computer.actors._pool_worker import BACKENDS, MIRROR_WORKSPACES
from computer.runtime import MirrorPool, ShellBackend, SyncLimits


class _Sent(Exception):
    pass


class _Method:
    def __init__(self, calls: list[tuple[Any, ...]]) -> None:
        self.calls = calls

    def remote(self, *args: Any) -> Any:
        self.calls.append(args)
        raise _Sent


class _Owner:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.pool_sync_push = _Method(self.calls)


async def test_every_sync_limit_reaches_the_owner() -> None:
    owner = _Owner()
    limits = SyncLimits(max_file_bytes=11, max_files=22, max_sync_bytes=33)
    with pytest.raises(_Sent):
        await OwnerExecContext(owner, "ws-id").sync_push(None, "/workspace", limits)
    [(_, _, sent)] = owner.calls
    assert SyncLimits(**sent) == limits


async def test_a_prefetched_push_serves_only_the_mirror_revision_it_was_made_for() -> None:
    from computer.actors._pool_context import MirrorSynced, Prefetched
    from computer.runtime import SyncPush
    from computer.runtime._codec import encode_sync

    limits = SyncLimits()
    ahead = Prefetched(
        MirrorSynced(7, "/workspace", dataclasses.asdict(limits)),
        encode_sync(SyncPush(9, "/workspace", False)),
    )
    for rev, root, other in ((6, "/workspace", limits), (7, "/w", limits), (7, "/workspace", SyncLimits(1))):
        owner = _Owner()
        with pytest.raises(_Sent):  # another revision, root or limits: the worker asks the owner
            await OwnerExecContext(owner, "ws-id", ahead).sync_push(rev, root, other)
        assert len(owner.calls) == 1
    owner = _Owner()
    ctx = OwnerExecContext(owner, "ws-id", ahead)
    push = await ctx.sync_push(7, "/workspace", limits)
    assert (push.rev, owner.calls, ctx.prefetch_used) == (9, [], True)
    with pytest.raises(_Sent):  # good for one push only
        await ctx.sync_push(9, "/workspace", limits)


def test_a_shell_backend_takes_its_mirror_pool_from_the_caller() -> None:
    assert ShellBackend().mirrors.max_workspaces == 64  # the default pool is bounded too
    built: list[tuple[Any, str]] = []

    def bounded(base: Any, root: str) -> MirrorPool:
        built.append((base, root))
        return MirrorPool(base, root, max_workspaces=3)

    shell = ShellBackend(mount_root="/w", mirror_pool=bounded)
    assert shell.mirrors.max_workspaces == 3
    assert built == [(shell.scratch, "/w")]


def test_a_pool_workers_shell_keeps_bounded_mirrors() -> None:
    mirrors = BACKENDS["shell"]().mirrors  # type: ignore[attr-defined]
    assert mirrors.max_workspaces == MIRROR_WORKSPACES


async def test_calls_to_the_owner_wait_until_the_run_was_announced() -> None:
    """A worker starts the backend while ``RunStarted`` travels; nothing reaches the owner before it."""
    import asyncio

    owner = _Owner()
    ctx = OwnerExecContext(owner, "ws-id", announced=False)
    call = asyncio.ensure_future(ctx.sync_push(None, "/workspace", SyncLimits()))
    await asyncio.sleep(0.05)
    assert owner.calls == [] and not call.done()
    ctx.announce()
    with pytest.raises(_Sent):
        await asyncio.wait_for(call, 5)
    assert len(owner.calls) == 1


class _ScriptedBackend:
    """A backend whose run waits ``delay`` s, optionally calls the owner, then exits 0."""

    def __init__(self, delay: float = 0.0, call_owner: bool = False, network: bool = False) -> None:
        from computer.runtime.types import BackendInfo

        self.delay, self.call_owner = delay, call_owner
        self.info = BackendInfo(id="shell", protocol="command", callable=False, network=network)
        self.seen: list[str] = []

    async def run(self, request: Any, ctx: Any) -> Any:
        import asyncio

        from computer.runtime import ExitEvent

        await asyncio.sleep(self.delay)
        if self.call_owner:
            await ctx.sync_push(None, "/workspace", SyncLimits())
        yield ExitEvent(0)


class _RecordingOwner:
    def __init__(self, log: list[str]) -> None:
        from computer.runtime import SyncPush
        from computer.runtime._codec import encode_sync

        reply = ("ok", encode_sync(SyncPush(1, "/workspace", True)))

        class Method:
            def remote(self, *args: Any) -> Any:
                log.append("owner call")

                async def answer() -> Any:
                    return reply

                return answer()

        self.pool_sync_push = Method()


async def _items(backend: _ScriptedBackend) -> list[str]:
    from computer.actors._pool_context import RunOrder
    from computer.actors._pool_worker import PoolWorker
    from computer.runtime import ExecRequest

    worker = PoolWorker(backend, "w", target=4, node_id="n")  # type: ignore[arg-type]
    log: list[str] = []
    request = ExecRequest(id="r1", backend="shell", source="true")
    async for item in worker.run(RunOrder(request, "ws-id", _RecordingOwner(log))):
        log.append(type(item).__name__)
    return log


async def test_a_short_run_needing_no_owner_call_sends_no_run_started_marker() -> None:
    assert await _items(_ScriptedBackend()) == ["ExitEvent"]


async def test_a_run_that_takes_a_while_announces_itself_first() -> None:
    from computer.actors._pool_worker import ANNOUNCE_AFTER

    assert await _items(_ScriptedBackend(delay=ANNOUNCE_AFTER * 4)) == ["RunStarted", "ExitEvent"]


async def test_a_run_announces_itself_before_its_first_owner_call_goes_out() -> None:
    assert await _items(_ScriptedBackend(call_owner=True)) == ["RunStarted", "owner call", "ExitEvent"]


async def test_a_backend_with_network_announces_every_run() -> None:
    assert await _items(_ScriptedBackend(network=True)) == ["RunStarted", "ExitEvent"]


def test_only_a_run_sent_with_outcomes_defers_its_pull() -> None:
    """The deferred pull is a type (a ``DeferringContext``), not a flag read with getattr."""
    from computer.actors._pool_context import DeferringOwnerContext, RunOrder, owner_context
    from computer.runtime import DeferringContext, ExecContext, ExecRequest

    request = ExecRequest(id="r1", backend="python", source="1")
    plain = owner_context(RunOrder(request, "ws-id"), _Owner())
    assert isinstance(plain, ExecContext) and not isinstance(plain, DeferringContext)
    deferring = owner_context(RunOrder(request, "ws-id", outcomes={"r0": (5, ["/workspace/x"])}), _Owner())
    assert isinstance(deferring, DeferringOwnerContext) and isinstance(deferring, DeferringContext)
    assert deferring.pull_outcome("r0") == (5, ["/workspace/x"]) and deferring.pull_outcome("r9") is None
    assert isinstance(owner_context(RunOrder(request, "ws-id", outcomes={}), _Owner()), DeferringContext)


def test_a_dispatcher_sends_the_owner_handle_until_the_worker_holds_it_and_remembers_eight_outcomes() -> None:
    from computer.actors._pool_context import OUTCOMES_KEPT, WorkerMemory
    from computer.runtime import ExecRequest, PullResult

    memory, owner = WorkerMemory(), object()
    request = ExecRequest(id="r1", backend="shell", source="true")
    assert memory.order(request, "ws", owner, "tok", None, False).owner is owner
    memory.introduced = True
    assert memory.order(request, "ws", owner, "tok", None, False).owner is None
    assert memory.order(request, "ws", owner, None, None, False).owner is owner  # no token: always sent
    for k in range(OUTCOMES_KEPT + 3):
        memory.applied(f"r{k}", "/workspace", {}, PullResult(rev=k, skipped=[]))
    order = memory.order(request, "ws", owner, "tok", None, False)
    assert order.outcomes is not None and sorted(order.outcomes) == sorted(
        f"r{k}" for k in range(3, OUTCOMES_KEPT + 3)
    )
    assert memory.synced is not None and memory.synced.rev == OUTCOMES_KEPT + 2
    memory.forget()
    assert memory.order(request, "ws", owner, "tok", None, False).owner is owner and memory.synced is None


def test_a_worker_runs_nothing_for_an_owner_it_does_not_hold_and_keeps_the_newest_handles() -> None:
    from computer.actors._pool_context import RunOrder
    from computer.actors._pool_worker import OwnerHandles
    from computer.runtime import ExecRequest

    request = ExecRequest(id="r1", backend="shell", source="true")
    handles, owner = OwnerHandles(kept=2), object()
    assert handles.resolve(RunOrder(request, "a", None, "tok")) is None  # a new worker process
    assert handles.resolve(RunOrder(request, "a", owner, "tok")) is owner
    assert handles.resolve(RunOrder(request, "a", None, "tok")) is owner
    assert handles.resolve(RunOrder(request, "a", None, "other owner process")) is None
    handles.resolve(RunOrder(request, "b", object(), "tok"))
    handles.resolve(RunOrder(request, "c", object(), "tok"))
    assert handles.resolve(RunOrder(request, "a", None, "tok")) is None  # the least recent went first
    assert handles.received == 3


async def test_a_guests_large_write_goes_to_ray_off_the_workers_loop() -> None:
    """Ray serialises an owner call's arguments in ``.remote()``: a python guest's 60 MiB
    ``write_file`` held the pool worker's loop, every sandbox of the worker, 190-470 ms in that one
    step. A call carrying over a MiB is handed to Ray from a lane's thread, the loop running
    meanwhile (here a neighbour's turn on the loop is what lets the stand-in for Ray finish); a small
    call is handed over on the loop, as before (no thread's hop)."""
    import asyncio
    import threading

    from computer.actors.wire import ok

    loop_thread = threading.get_ident()
    neighbour_ran = threading.Event()
    sent: list[tuple[bool, bool]] = []  # (handed over on the loop's thread, the loop ran meanwhile)

    class _Serialising:
        def remote(self, op: str, args: dict[str, Any]) -> Any:
            on_loop = threading.get_ident() == loop_thread
            big = sum(memoryview(piece).nbytes for piece in args["data"]) > 1 << 20
            sent.append((on_loop, neighbour_ran.wait(10) if big and not on_loop else False))

            async def reply() -> Any:
                return ok(None)

            return reply()

    owner = _Owner()
    owner.pool_fs_call = _Serialising()  # type: ignore[attr-defined]
    ctx = OwnerExecContext(owner, "ws-id")
    pieces = [bytes(32 * 1024)] * 64  # 2 MiB, in the pieces the guest's channel sends
    call = asyncio.ensure_future(ctx.fs_call("write_file", {"path": "/workspace/big", "data": pieces}))
    while not call.done():
        await asyncio.sleep(0)  # the neighbour: any other sandbox's step on the worker's loop
        neighbour_ran.set()
    await call
    await ctx.fs_call("write_file", {"path": "/workspace/small", "data": [b"x"]})
    assert sent == [(False, True), (True, False)]


async def test_a_guests_large_write_reaches_the_owner_out_of_band_and_lands_whole(tmp_path: Any) -> None:
    """Ray unpickled a call's 60 MiB of byte pieces into new bytes on the owner host's loop, ~35-40 ms
    (90-140 under load) in one step, every workspace of the host waiting. The worker sends such pieces
    as ``pickle.PickleBuffer``s (out of band: Ray hands the owner read-only views of its object store,
    nothing copied); the owner takes them as memoryviews and the store writes them whole."""
    import hashlib
    import pickle

    import computer
    from computer.actors._pool_callbacks import unboxed
    from computer.actors._pool_context import boxed

    pieces = [bytes([i % 251]) * (32 * 1024) for i in range(64)]  # 2 MiB as the guest's channel sends it
    args = ("write_file", {"path": "/workspace/big", "data": pieces})
    buffers: list[pickle.PickleBuffer] = []
    wire = pickle.dumps(boxed(args), protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == len(pieces) and len(wire) < 64 * 1024, "the pieces went in band"
    # Ray hands each buffer over as a read-only buffer object of its own (not bytes, not a memoryview).
    op, got = pickle.loads(wire, buffers=[pickle.PickleBuffer(memoryview(b).toreadonly()) for b in buffers])
    data = unboxed(got)["data"]
    assert all(isinstance(piece, memoryview) for piece in data)
    assert unboxed(got)["path"] == "/workspace/big" and op == "write_file"
    async with computer.Workspace(str(tmp_path / "ws.sqlite")) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.runtime.context.fs_call(op, unboxed(got))
        stored = await ws.fs.read_file("/workspace/big")
    assert hashlib.sha256(stored).digest() == hashlib.sha256(b"".join(pieces)).digest()
    small = ("write_file", {"path": "/x", "data": [b"x" * 100]})
    assert boxed(small) == small  # a small piece stays in band
