"""The dispatcher's half of moving a pinned run (issue 23), without Ray: ``PoolBackend.run`` over
fake worker handles that record the orders they get. Counted: which worker got which order, with
``movable`` or not, and where the workspace is pinned after."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from computer.actors import pools
from computer.actors._pool_admission import Requeue
from computer.actors._pool_context import RunOrder
from computer.actors._pool_scaler import PoolView, WorkerView
from computer.runtime import ExecRequest, ExitEvent
from computer.runtime.types import BackendInfo

from .pool_helpers import ScriptedWorker


class _Ctx:
    workspace_id = "ws"


def _live(_: RunOrder) -> list[Any]:
    return [ExitEvent(0, live=True)]


def _moves_when_movable(order: RunOrder) -> list[Any]:
    """A full worker whose live sandbox of the workspace runs nothing."""
    return [Requeue("a", "moved")] if order.movable else [ExitEvent(0, live=True)]


def _dispatcher(monkeypatch: pytest.MonkeyPatch, b_load: int, **workers: ScriptedWorker) -> Any:
    monkeypatch.setattr(pools, "VIEW_TTL", 1e9)  # the view given here stays (no control loop)
    monkeypatch.setitem(pools._infos, "shell", BackendInfo(id="shell", protocol="command", callable=False))
    # Owner and node given: nothing asks Ray (which would join whatever cluster runs on this machine).
    backend = pools.PoolBackend("shell", owner=object(), node="n")
    view = PoolView(
        "shell",
        (WorkerView("a", "n", 4, 4, False), WorkerView("b", "n", 4, b_load, False)),
        pending=0,
    )
    backend._take_view(view)
    for name, worker in workers.items():
        backend._slots[name].handle = worker
    backend.pin("ws", "a")
    return backend


async def _run(backend: Any) -> list[Any]:
    request = ExecRequest(id="r1", backend="shell", source="true")
    return [event async for event in backend.run(request, _Ctx())]


async def test_a_pinned_run_moves_to_a_worker_with_room_when_its_worker_hands_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = ScriptedWorker("a", _moves_when_movable), ScriptedWorker("b", _live)
    backend = _dispatcher(monkeypatch, b_load=0, a=a, b=b)
    assert await _run(backend) == [ExitEvent(0, live=True)]
    assert [o.movable for o in a.orders] == [True] and [o.movable for o in b.orders] == [False]
    assert backend.pinned("ws") == "b" and (backend.moved, backend.requeued) == (1, 0)


async def test_a_pinned_run_that_fills_the_last_slot_of_its_worker_is_not_movable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = ScriptedWorker("a", _moves_when_movable), ScriptedWorker("b", _live)
    backend = _dispatcher(monkeypatch, b_load=0, a=a, b=b)
    backend._slots["a"].load = 3  # three of its four slots taken: this run takes the last one
    await _run(backend)
    assert [o.movable for o in a.orders] == [False] and b.orders == []


async def test_without_room_anywhere_a_pinned_run_is_not_movable_and_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = ScriptedWorker("a", _moves_when_movable), ScriptedWorker("b", _live)
    backend = _dispatcher(monkeypatch, b_load=4, a=a, b=b)
    assert await _run(backend) == [ExitEvent(0, live=True)]
    assert [o.movable for o in a.orders] == [False] and b.orders == []
    assert backend.pinned("ws") == "a" and backend.moved == 0


async def test_a_worker_that_no_longer_holds_the_sandbox_unpins_the_workspace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def draining(_: RunOrder) -> list[Any]:
        return [Requeue("a", "draining")]

    async def no_control_loop(*_: Any, **__: Any) -> None:
        return None

    a, b = ScriptedWorker("a", draining), ScriptedWorker("b", _live)
    backend = _dispatcher(monkeypatch, b_load=0, a=a, b=b)
    monkeypatch.setattr(backend, "_refresh", no_control_loop)
    assert await _run(backend) == [ExitEvent(0, live=True)]
    assert (len(a.orders), len(b.orders), backend.pinned("ws"), backend.requeued) == (1, 1, "b", 1)


async def test_a_calm_pool_is_viewed_less_often_than_a_busy_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted: control-loop view calls a dispatcher makes for runs one after another."""
    monkeypatch.setitem(pools._infos, "shell", BackendInfo(id="shell", protocol="command", callable=False))
    calls: list[float] = []

    async def refresh(*_: Any, **__: Any) -> None:
        calls.append(0.0)

    for busy_load, expected in ((0, 0), (4, 1)):
        backend = pools.PoolBackend("shell", owner=object(), node="n")
        backend._take_view(PoolView("shell", (WorkerView("a", "n", 4, busy_load, False),), pending=0))
        backend._slots["a"].handle = ScriptedWorker("a", _live)
        monkeypatch.setattr(backend, "_refresh", refresh)
        calls.clear()
        backend._view_at -= pools.VIEW_TTL + 0.5  # older than the busy TTL, younger than the calm one
        await _run(backend)
        await asyncio.sleep(0)  # the background refresh, when one was started
        assert len(calls) == expected, busy_load


async def test_runs_handed_back_from_a_line_spread_instead_of_all_taking_the_free_worker_of_their_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Owners on one node, a run each in the line of worker ``a`` when capacity appears on b, c, d."""
    monkeypatch.setitem(pools._infos, "shell", BackendInfo(id="shell", protocol="command", callable=False))
    monkeypatch.setattr(pools, "VIEW_TTL", 1e9)
    workers = {"a": ScriptedWorker("a", lambda _: [Requeue("a", "shed")])} | {
        n: ScriptedWorker(n, _live) for n in "bcd"
    }

    def view(a_load: int) -> PoolView:
        nodes = {"a": "n", "b": "n", "c": "m", "d": "m"}  # b is on the owners' node
        return PoolView(
            "shell", tuple(WorkerView(w, nodes[w], 1, a_load if w == "a" else 0, False) for w in "abcd"), 0
        )

    for k in range(6):
        backend = pools.PoolBackend("shell", owner=object(), node="n")
        backend._take_view(view(a_load=0))
        backend._warm = ["a"]  # its mirror is warm there: the first choice
        for name, worker in workers.items():
            backend._slots[name].handle = worker

        async def refresh(*_: Any, backend: Any = backend, **__: Any) -> None:
            backend._take_view(view(a_load=1))  # the line it came from: a is full now

        monkeypatch.setattr(backend, "_refresh", refresh)

        class Ctx:
            workspace_id = f"ws-{k}"

        request = ExecRequest(id="r", backend="shell", source="true")
        assert [e async for e in backend.run(request, Ctx())] == [ExitEvent(0, live=True)]
    assert len(workers["a"].orders) == 6
    taken = {name: len(workers[name].orders) for name in "bcd"}
    assert sum(taken.values()) == 6 and taken["b"] < 6 and taken["c"] + taken["d"] > 0, taken


async def test_dispatchers_of_one_process_share_a_fresh_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted: control-loop view calls of two dispatchers in one process (an owner host's workspaces),
    each with a stale view of a busy pool: the first asks, the second takes what it got."""
    monkeypatch.setitem(pools._infos, "shell", BackendInfo(id="shell", protocol="command", callable=False))
    monkeypatch.setattr(pools, "_views", {})
    calls: list[str] = []
    busy = PoolView("shell", (WorkerView("a", "n", 4, 4, False),), pending=0)

    class _Loop:
        class view:  # a Ray actor method's shape: ``view.remote(...)``
            @staticmethod
            async def remote(backend: str, *_: Any) -> PoolView:
                calls.append(backend)
                return busy

    monkeypatch.setattr(pools, "_scaler", _Loop())
    backends = []
    for _ in range(2):
        backend = pools.PoolBackend("shell", owner=object(), node="n")
        backend._take_view(busy)
        backend._slots["a"].handle = ScriptedWorker("a", _live)
        backend._view_at -= pools.VIEW_TTL + 0.5  # stale for a busy pool
        backends.append(backend)
    await _run(backends[0])
    await asyncio.sleep(0)  # its background refresh
    assert calls == ["shell"]
    await _run(backends[1])
    await asyncio.sleep(0)
    assert calls == ["shell"]  # the second took the first one's view
    assert backends[1]._view_at == backends[0]._view_at


async def test_a_workspace_that_just_moved_is_not_sent_movable_again_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Owners that see a new worker's free slots at once all move there and fill it: a workspace
    moves at most once per MOVE_HOLD, instead of chasing free slots from worker to worker."""
    a, b = ScriptedWorker("a", _moves_when_movable), ScriptedWorker("b", _moves_when_movable)
    backend = _dispatcher(monkeypatch, b_load=0, a=a, b=b)
    await _run(backend)
    assert backend.pinned("ws") == "b" and backend.moved == 1
    backend._slots["a"].load, backend._slots["b"].load = 0, 4  # now b is full and a has room
    await _run(backend)
    assert [o.movable for o in b.orders] == [False, False] and backend.pinned("ws") == "b"
    monkeypatch.setattr(pools, "MOVE_HOLD", 0.0)  # once the hold is over it may move again
    await _run(backend)
    assert b.orders[-1].movable and backend.pinned("ws") == "a" and backend.moved == 2


class _Remote:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def remote(self, *_: Any) -> Any:
        raise self.error


class _FailingWorker:
    def __init__(self, error: BaseException) -> None:
        self.live_processes = _Remote(error)


async def test_a_listing_the_sandbox_refuses_is_its_error_and_a_dead_worker_is_no_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through a pool, a listing the live sandbox failed (its init could not answer) came back as ``[]``
    ("no processes") where embedded it raises; a worker that died still means no processes."""
    from ray.exceptions import ActorDiedError, RayTaskError

    from computer.runtime._live_jobs import LiveSandboxError

    backend = _dispatcher(monkeypatch, 0)
    cause = LiveSandboxError("the live sandbox's init could not answer: Message too long")
    backend._slots["a"].handle = _FailingWorker(RayTaskError("live_processes", "traceback", cause))
    with pytest.raises(LiveSandboxError, match="could not answer"):
        await backend.processes("ws")
    backend._slots["a"].handle = _FailingWorker(ActorDiedError())
    assert await backend.processes("ws") == []
    assert backend.pinned("ws") == "a"  # the next run says the sandbox was lost


async def test_a_run_goes_to_a_ready_worker_while_the_one_it_found_restarting_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker killed under a run is restarted by Ray in place; calls to it meanwhile raise
    ``ActorUnavailableError``. Every retry of the next run went back to it (the warm worker, then the
    same hash) and waited there, about 2 s a try: the next command after a worker was killed mid-run
    took 23-29 s (3 of 9 trials on a live pool) while the other worker was ready. Counted: the orders
    each worker got, for the run that found the worker restarting and the run after it."""
    from ray.exceptions import ActorUnavailableError

    def restarting(_: RunOrder) -> list[Any]:
        raise ActorUnavailableError("the actor is restarting", None)

    async def no_control_loop(*_: Any, **__: Any) -> None:
        return None

    monkeypatch.setattr(pools, "DISPATCH_RETRIES", 8)
    monkeypatch.setattr(pools, "RESTART_WAIT", 5.0)  # bounded: a run tries a restarting worker that long
    monkeypatch.setattr(pools, "_views", {})  # no view another test left
    a, b = ScriptedWorker("a", restarting), ScriptedWorker("b", _live)
    backend = _dispatcher(monkeypatch, b_load=1, a=a, b=b)  # both free, "a" the less loaded
    monkeypatch.setattr(backend, "_refresh", no_control_loop)
    backend._slots["a"].load = 0
    backend.unpin("ws")
    backend._warm = ["a"]  # the worker that ran the workspace last
    assert await _run(backend) == [ExitEvent(0, live=True)]
    assert await _run(backend) == [ExitEvent(0, live=True)]
    assert (len(a.orders), len(b.orders)) == (1, 2)


class _Silent:
    """A worker's ``live_processes``/``live_kill`` that never answer (a worker SIGSTOPped or wedged)."""

    def __init__(self) -> None:
        self.live_processes = self.live_kill = self
        self.calls = 0

    def remote(self, *_: Any) -> Any:
        self.calls += 1
        return asyncio.get_running_loop().create_future()  # never done


async def test_processes_and_kill_on_a_worker_that_never_answers_fail_within_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker holding the workspace's live sandbox is stopped (SIGSTOP) or wedged: Ray bounds no
    call, and ``processes``/``kill_process`` (``computer ps``, the processes and kill tools) waited
    forever (a stopped worker on a live pool: still waiting after 20 s of 20). Now each fails within
    ``LIVE_CALL_TIMEOUT`` with a ``TimeoutError`` naming the worker; the pin stays."""
    monkeypatch.setattr(pools, "LIVE_CALL_TIMEOUT", 0.2)
    backend = _dispatcher(monkeypatch, b_load=0, a=ScriptedWorker("a", _live))
    silent = _Silent()
    backend._slots["a"].handle = silent
    with pytest.raises(TimeoutError, match=r"\(a\) did not answer within 0.2 s"):
        await asyncio.wait_for(backend.processes("ws"), 10)
    with pytest.raises(TimeoutError, match=r"\(a\) did not answer within 0.2 s"):
        await asyncio.wait_for(backend.kill_process("ws", 7), 10)
    assert silent.calls == 2 and backend.pinned("ws") == "a"


async def test_a_worker_that_hands_runs_back_as_draining_is_avoided_while_the_view_lags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The control loop's view still shows ``a`` ready and the least loaded (drained outside its
    view, or its view not yet fresh): before, every re-dispatch went back to ``a``, which handed the
    run back again, and the run failed "handed back 101 times" while ``b`` was free."""
    monkeypatch.setitem(pools._infos, "shell", BackendInfo(id="shell", protocol="command", callable=False))
    view = PoolView("shell", (WorkerView("a", "n", 4, 0, False), WorkerView("b", "n", 4, 1, False)), 0)
    backend = pools.PoolBackend("shell", owner=object(), node="n")
    backend._take_view(view)

    async def lagging_control_loop(*_: Any, **__: Any) -> None:
        backend._take_view(view)

    a, b = ScriptedWorker("a", lambda _: [Requeue("a", "draining")]), ScriptedWorker("b", _live)
    for name, worker in (("a", a), ("b", b)):
        backend._slots[name].handle = worker
    monkeypatch.setattr(backend, "_refresh", lagging_control_loop)
    assert await _run(backend) == [ExitEvent(0, live=True)]
    assert (len(a.orders), len(b.orders)) == (1, 1)


async def test_what_a_worker_kept_for_the_next_run_comes_with_the_run_it_hands_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lost sandbox's note and an ended sandbox's refusals, kept on ``a``, are said by the run that
    ``a`` handed back and ``b`` ran (once: the next run says nothing)."""
    from computer.runtime import OutputChunk

    async def no_control_loop(*_: Any, **__: Any) -> None:
        return None

    a = ScriptedWorker("a", lambda _: [Requeue("a", "draining", "lost: why\n", {"big.bin": "too big"})])
    b = ScriptedWorker(
        "b", lambda _: [ExitEvent(0, live=True, skipped=["x"], skipped_reasons={"x": "why x"})]
    )
    backend = _dispatcher(monkeypatch, b_load=0, a=a, b=b)
    monkeypatch.setattr(backend, "_refresh", no_control_loop)
    first = await _run(backend)
    assert first == [
        OutputChunk("stderr", b"lost: why\n"),
        ExitEvent(
            0, live=True, skipped=["big.bin", "x"], skipped_reasons={"big.bin": "too big", "x": "why x"}
        ),
    ]
    assert await _run(backend) == [ExitEvent(0, live=True, skipped=["x"], skipped_reasons={"x": "why x"})]


async def test_a_lost_sandbox_is_said_by_the_first_run_that_runs_when_the_run_before_failed_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker holding the workspace's live sandbox dies under ``end_sandbox``: the workspace's
    next run is to say so first (``LOST_SANDBOX``: its background processes ended, what they wrote
    after their last sync is gone). That run failed before anything ran ("exec worker failed"):
    before, the note went with it, and no run ever said the sandbox was lost."""
    from ray.exceptions import RayActorError, RayTaskError

    from computer.runtime import OutputChunk

    async def no_control_loop(*_: Any, **__: Any) -> None:
        return None

    class _DiesEnding:  # ``live_end`` of a worker that dies under the call
        def remote(self, *_: Any) -> Any:
            async def died() -> None:
                raise RayActorError()

            return died()

    orders: list[RunOrder] = []

    def fails_first(order: RunOrder) -> list[Any]:
        orders.append(order)
        if len(orders) == 1:
            raise RayTaskError("run", "worker bug", ValueError("boom"))
        return [ExitEvent(0, live=True)]

    a, b = ScriptedWorker("a", _live), ScriptedWorker("b", fails_first)
    a.live_end = _DiesEnding()  # type: ignore[attr-defined]
    backend = _dispatcher(monkeypatch, b_load=0, a=a, b=b)  # pinned to a, which is full: runs go to b
    monkeypatch.setattr(backend, "_refresh", no_control_loop)
    assert await backend.end_sandbox("ws") is True
    [failed] = await _run(backend)
    assert isinstance(failed, ExitEvent) and failed.error is not None and "failed" in failed.error
    said, ended = await _run(backend)
    assert isinstance(said, OutputChunk) and said.stream == "stderr", said
    assert said.data.decode().startswith(
        "computer: the exec worker holding this workspace's live sandbox died (a: "
    )
    assert ended == ExitEvent(0, live=True)
    assert await _run(backend) == [ExitEvent(0, live=True)]  # said once


async def test_a_first_run_that_failed_on_its_worker_leaves_no_pin_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A workspace's first run is pinned ahead to its worker (``Pins.pin_ahead``), and its exit says
    whether a live sandbox stays. A run that failed there ("exec worker failed": the worker raised)
    never exits: before, the pin stayed, pointing at a worker known to hold no sandbox, and the next
    run went there although that worker was full and ``b`` free (it waited in ``a``'s line, and
    failed again on a worker whose backend is broken); ``kill_process`` said that worker held the
    live sandbox."""
    from ray.exceptions import RayTaskError

    def broken(_: RunOrder) -> list[Any]:
        raise RayTaskError("run", "worker bug", ValueError("boom"))

    a, b = ScriptedWorker("a", broken), ScriptedWorker("b", _live)
    backend = _dispatcher(monkeypatch, b_load=1, a=a, b=b)
    backend.unpin("ws")
    backend._slots["a"].load = 0  # the least loaded: the first run goes there
    [failed] = await _run(backend)
    assert isinstance(failed, ExitEvent) and failed.error is not None and "failed" in failed.error
    assert backend.pinned("ws") is None
    backend._slots["a"].load = 4  # full now, ``b`` has room
    backend._warm = []
    assert await _run(backend) == [ExitEvent(0, live=True)]
    assert (len(a.orders), len(b.orders), backend.pinned("ws")) == (1, 1, "b")


async def test_a_first_run_cancelled_before_its_worker_answered_leaves_no_pin_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The caller gives up on a workspace's first run before its worker sent anything (and the kill
    finds no run there): before, its pin made ahead stayed, and the workspace's next runs all went to
    that worker, full or not, and ``processes``/``kill_process`` asked it of a sandbox never made."""
    sent = asyncio.Event()

    class _NeverAnswers(ScriptedWorker):
        def remote(self, order: Any) -> Any:
            self.orders.append(order)
            sent.set()

            async def items() -> Any:
                await asyncio.Event().wait()  # never: cancelled with the run
                yield None

            return items()

    class _NoRun:
        async def remote(self, *_: Any) -> bool:
            return False  # no such run there to kill

    a, b = _NeverAnswers("a", _live), ScriptedWorker("b", _live)
    a.kill_run = _NoRun()  # type: ignore[attr-defined]
    backend = _dispatcher(monkeypatch, b_load=1, a=a, b=b)
    backend.unpin("ws")
    backend._slots["a"].load = 0
    task = asyncio.ensure_future(_run(backend))
    await asyncio.wait_for(sent.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert backend.pinned("ws") is None
    backend._slots["a"].load = 4
    assert await asyncio.wait_for(_run(backend), 10) == [ExitEvent(0, live=True)]
    assert (len(a.orders), len(b.orders), backend.pinned("ws")) == (1, 1, "b")


async def test_a_pin_made_ahead_stays_while_another_run_sent_under_it_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two first runs of a workspace go to ``a`` under one pin made ahead; the one that fails does not
    drop the pin while the other may still leave a live sandbox there (its exit pins or unpins)."""
    backend = _dispatcher(monkeypatch, b_load=1)
    backend.unpin("ws")
    pins = backend._pins
    pins.pin_ahead("ws", "a")
    pins.pin_ahead("ws", "a")
    pins.give_up_ahead("ws", "a")
    assert backend.pinned("ws") == "a"
    pins.give_up_ahead("ws", "a")
    assert backend.pinned("ws") is None
    pins.pin_ahead("ws", "a")
    pins.pin("ws", "a")  # the run's exit: a live sandbox is there now
    pins.give_up_ahead("ws", "a")
    assert backend.pinned("ws") == "a"
