"""Elastic pools without Ray: a worker's admission line, the control loop's decisions, the maximum."""

from __future__ import annotations

import asyncio
import time

import pytest

from computer.actors._pool_admission import Admission, LoadReport, target_runs
from computer.actors._pool_moves import START_PRIOR, MoveCost, RunMeasure
from computer.actors._pool_plan import PoolLimits, WorkerState, limits_from, plan, resolve_max
from computer.config import Settings

LIMITS = PoolLimits("shell", 2, 6, worker_cpus=1.0, worker_memory=0, runs_per_cpu=2.0, idle_after=30.0)


def _report(
    name: str, *, running: int = 0, queued: int = 0, idle_for: float = 0.0, **kw: object
) -> LoadReport:
    fields: dict[str, object] = {
        "name": name, "node_id": "n", "cpus": 1.0, "target": 2, "running": running, "queued": queued,
        "waits": [], "admitted": 0, "idle_for": idle_for, "draining": False,
    }  # fmt: skip
    fields.update(kw)
    return LoadReport(**fields)  # type: ignore[arg-type]


def _ready(name: str, **kw: object) -> WorkerState:
    return WorkerState(name, "ready", 0.0, _report(name, **kw))  # type: ignore[arg-type]


def test_targets_follow_the_cpus_a_worker_holds() -> None:
    assert [target_runs(c, 4.0) for c in (0.0, 0.25, 1.0, 2.0)] == [4, 1, 4, 8]
    assert LIMITS.target == 2


def test_the_elastic_maximum_grows_with_the_cluster_and_a_set_one_is_kept() -> None:
    elastic = PoolLimits("shell", 2, None, 1.0, 0, 4.0, 60.0)
    assert resolve_max(elastic, [2.0]) == 4  # 2 CPUs, plus one more node's worth for the autoscaler
    assert resolve_max(elastic, [4.0, 4.0, 4.0]) == 16
    assert resolve_max(elastic, []) == 2  # no node known: the minimum
    assert resolve_max(PoolLimits("shell", 2, 3, 1.0, 0, 4.0, 60.0), [64.0]) == 3
    assert resolve_max(PoolLimits("shell", 5, 3, 1.0, 0, 4.0, 60.0), [64.0]) == 5  # below the min: the min


def test_settings_give_each_backend_its_own_limits() -> None:
    config = Settings(shell_pool_size=1, shell_pool_max=9, python_pool_size=3, pool_idle_after=5)
    shell, python = limits_from(config, "shell"), limits_from(config, "python")
    assert (shell.min_workers, shell.max_workers, shell.idle_after) == (1, 9, 5.0)
    assert (python.min_workers, python.max_workers) == (3, None)
    assert limits_from(Settings(shell_pool_size=4, shell_pool_max=2), "shell").max_workers == 4


def test_runs_waiting_grow_the_pool_up_to_the_maximum() -> None:
    busy = [_ready("a", running=2, queued=5), _ready("b", running=2, queued=5)]
    decided = plan(LIMITS, 6, busy, now=100.0)
    assert decided.grow == 4 and not decided.drain  # 14 runs want 7 workers; the maximum is 6
    small = plan(LIMITS, 6, [_ready("a", running=2, queued=1), _ready("b", running=2)], now=100.0)
    assert small.grow == 1  # 5 runs at 2 per worker: 3 workers
    pending = [*busy, WorkerState("c", "pending", 99.0), WorkerState("d", "pending", 99.0)]
    assert plan(LIMITS, 6, pending, now=100.0).grow == 2  # the pending ones count


def test_a_long_wait_grows_by_one_even_with_an_empty_line() -> None:
    waited = [_ready("a", running=2, waits=[0.5], movable_wait=0.5), _ready("b", running=1)]
    assert plan(LIMITS, 6, waited, now=100.0).grow == 1


def test_runs_pinned_to_their_live_sandbox_do_not_grow_a_pool_with_a_free_slot() -> None:
    # b has room: the pinned runs' dispatchers send them movable (an idle sandbox moves to b) and new
    # workspaces go to b; one more worker would not serve them sooner.
    pinned = [_ready("a", running=2, queued=4, pinned_queued=4, pinned_wait=3.0), _ready("b")]
    decided = plan(LIMITS, 6, pinned, now=100.0)
    assert (decided.grow, decided.shed, decided.pressure) == (0, [], False)


def test_runs_pinned_to_a_full_worker_grow_a_pool_without_a_free_slot() -> None:
    # Every slot taken, only pinned runs wait: demand all the same (issue 23). 4 running + 3 pinned
    # waiting at 2 per worker want 4 workers.
    full = [_ready("a", running=2, queued=3, pinned_queued=3), _ready("b", running=2)]
    decided = plan(LIMITS, 6, full, now=100.0)
    assert decided.grow == 2 and decided.pressure and decided.shed == []
    assert "live sandbox" in decided.reasons[0]
    # A pinned run that waited (its line already empty) grows by one, as a movable one does.
    waited = [_ready("a", running=2, pinned_wait=0.5), _ready("b", running=2)]
    assert plan(LIMITS, 6, waited, now=100.0).grow == 1
    # The worker coming counts: no second one for the same runs.
    coming = [*waited, WorkerState("c", "pending", 99.0)]
    assert plan(LIMITS, 6, coming, now=100.0).grow == 0
    # A short pinned wait (under GROW_WAIT) is no reason.
    assert (
        plan(LIMITS, 6, [_ready("a", running=2, pinned_wait=0.01), _ready("b", running=2)], now=100.0).grow
        == 0
    )


def test_a_pool_at_its_maximum_does_not_grow_and_sheds_no_line_without_room() -> None:
    full = [_ready(n, running=2, queued=3) for n in "abcdef"]
    decided = plan(LIMITS, 6, full, now=100.0)
    assert (decided.grow, decided.shed, decided.drain, decided.remove) == (0, [], [], [])


def test_lines_are_shed_when_another_worker_has_free_slots() -> None:
    decided = plan(LIMITS, 6, [_ready("a", running=2, queued=3), _ready("b")], now=100.0)
    assert decided.shed == ["a"]


def test_idle_workers_above_the_minimum_are_drained_never_below_it() -> None:
    workers = [_ready(n, idle_for=t) for n, t in (("a", 100.0), ("b", 50.0), ("c", 40.0), ("d", 5.0))]
    decided = plan(LIMITS, 6, workers, now=100.0)
    assert decided.drain == ["a", "b"]  # the most idle first; c is idle too but the minimum is 2
    busy = [_ready("a", running=1, idle_for=0.0), _ready("b", idle_for=100.0), _ready("c", idle_for=100.0)]
    assert plan(LIMITS, 6, busy, now=100.0).drain == ["b"]


def test_a_drained_worker_is_removed_only_once_it_holds_nothing() -> None:
    def drained(**kw: object) -> WorkerState:
        return WorkerState("x", "draining", 0.0, _report("x", draining=True, **kw))  # type: ignore[arg-type]

    base = [_ready("a"), _ready("b")]
    assert plan(LIMITS, 6, [*base, drained(running=1)], now=100.0).remove == []
    assert plan(LIMITS, 6, [*base, drained(live_sandboxes=1)], now=100.0).remove == []
    assert plan(LIMITS, 6, [*base, drained()], now=100.0).remove == ["x"]


def test_a_lowered_maximum_drains_the_least_loaded_even_while_busy() -> None:
    workers = [_ready("a", running=2), _ready("b", running=1), _ready("c", running=2)]
    decided = plan(PoolLimits("shell", 1, 2, 1.0, 0, 2.0, 30.0), 2, workers, now=100.0)
    assert decided.drain == ["b"] and decided.grow == 0


def test_unneeded_pending_workers_go_after_the_idle_time() -> None:
    workers = [_ready("a"), _ready("b"), WorkerState("p", "pending", 10.0)]
    assert plan(LIMITS, 6, workers, pressure_at=50.0, now=60.0).remove == []
    assert plan(LIMITS, 6, workers, pressure_at=50.0, now=81.0).remove == ["p"]


def test_the_minimum_is_kept_and_a_pool_grows_from_zero_for_a_waiting_run() -> None:
    assert plan(LIMITS, 6, [_ready("a")], now=1.0).grow == 1
    zero = PoolLimits("shell", 0, 4, 1.0, 0, 2.0, 30.0)
    assert plan(zero, 4, [], now=1.0).grow == 0
    assert plan(zero, 4, [], waiting=1, now=1.0).grow == 1


async def test_admission_runs_the_target_at_once_and_queues_the_rest_in_order() -> None:
    gate = Admission(2)
    assert await gate.enter() and await gate.enter()
    order: list[int] = []

    async def waiter(i: int) -> None:
        assert await gate.enter()
        order.append(i)

    tasks = [asyncio.create_task(waiter(i)) for i in range(3)]
    await asyncio.sleep(0)
    assert (gate.running, gate.queued) == (2, 3)
    for _ in range(3):
        gate.leave()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    report = gate.report("w", "n", 1.0)
    assert (report.running, report.queued, report.admitted, len(report.waits)) == (2, 0, 5, 5)
    assert gate.report("w", "n", 1.0).admitted == 0  # counted once


async def test_draining_hands_waiting_runs_back_and_admits_only_pinned_ones() -> None:
    gate = Admission(1)
    assert await gate.enter()
    waiting = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    assert gate.drain() == 1
    assert await waiting is False  # handed back: it never ran
    assert await gate.enter() is False
    pinned = asyncio.create_task(gate.enter(pinned=True))  # its live sandbox is here: it waits its turn
    await asyncio.sleep(0)
    assert gate.shed() == 0 and gate.queued == 1
    await asyncio.sleep(0.01)
    gate.leave()
    assert await pinned is True
    report = gate.report("w", "n", 1.0)
    assert report.draining
    assert report.pinned_wait >= 0.01  # its wait is counted as pinned (the hand-back above as movable)


async def test_a_cancelled_waiter_leaves_the_line_and_idle_time_starts_when_all_is_done() -> None:
    gate = Admission(1)
    assert await gate.enter()
    waiting = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert gate.queued == 0 and gate.report("w", "n", 1.0).idle_for == 0.0
    gate.leave()
    assert gate.running == 0 and gate.report("w", "n", 1.0).idle_for >= 0.0
    assert await gate.enter()  # the slot is free again


def test_a_worker_of_the_minimum_stuck_pending_is_replaced_by_one_that_fits() -> None:
    stuck = WorkerState("p", "pending", 0.0, None, 1.0)
    assert plan(LIMITS, 6, [_ready("a"), stuck], now=5.0).remove == []  # not yet: it may still start
    decided = plan(LIMITS, 6, [_ready("a"), stuck], now=20.0)
    assert decided.remove == ["p"] and decided.grow == decided.floor == 1


def test_the_control_loop_rests_only_while_every_pool_is_calm() -> None:
    from computer.actors._pool_scaler import PoolScaler, _Pool, _Worker

    def loop(*workers: _Worker, waiting: int = 0) -> PoolScaler:
        scaler = PoolScaler.__new__(PoolScaler)  # no Ray: no adoption, no loop task
        scaler._viewed_at = -1e9  # no view asked for lately
        shell, python = _Pool("shell"), _Pool("python", waiting=waiting)
        shell.workers = {w.name: w for w in workers}
        scaler._pools = {"shell": shell, "python": python}
        return scaler

    def worker(name: str, state: str = "ready", **kw: object) -> _Worker:
        return _Worker(name, 0, None, state, 0.0, 1.0, 2, "n", _report(name, **kw))

    assert loop(worker("a"), worker("b", idle_for=99.0)).calm()
    assert loop().calm()
    assert not loop(worker("a"), worker("b", running=1)).calm()
    assert not loop(worker("a", queued=1)).calm()
    assert not loop(worker("a", movable_wait=1.0)).calm()
    assert not loop(worker("a", pinned_wait=1.0)).calm()
    assert not loop(worker("a"), worker("b", state="pending")).calm()
    assert not loop(worker("a"), worker("b", state="draining")).calm()  # to be removed soon
    assert not loop(worker("a"), waiting=1).calm()  # a dispatcher waits for a worker
    viewed = loop(worker("a"))
    viewed._viewed_at = time.monotonic()  # a dispatcher asked for a view: its runs are on their way
    assert not viewed.calm()


def test_the_control_loop_wakes_when_an_idle_worker_reaches_the_idle_time() -> None:
    """Its rest ends when the first idle worker above the minimum is due for its drain, so that the
    worker's memory is back at the idle time rather than up to a calm round later."""
    from computer.actors._pool_scaler import IDLE_DUE_MIN, PoolScaler, _Pool, _Worker

    now = time.monotonic()

    def worker(name: str, **kw: object) -> _Worker:
        w = _Worker(name, 0, None, "ready", 0.0, 1.0, 2, "n", _report(name, **kw))
        w.reported_at = now
        return w

    scaler = PoolScaler.__new__(PoolScaler)  # no Ray: no adoption, no loop task
    shell = _Pool("shell", limits=LIMITS)  # minimum 2, idle time 30 s
    scaler._pools = {"shell": shell, "python": _Pool("python")}
    shell.workers = {w.name: w for w in (worker("a", idle_for=25.0), worker("b", running=1), worker("c"))}
    assert 4.9 <= scaler._idle_due() <= 5.0 + IDLE_DUE_MIN  # a: 5 s to go
    shell.workers["a"] = worker("a", idle_for=31.0)  # past it: the usual pace (it may be needed)
    assert scaler._idle_due() > 29.0  # c: idle 0 s so far
    del shell.workers["c"]
    assert scaler._idle_due() == float("inf")  # at the minimum: nothing to drain


async def test_a_worker_drained_holding_nothing_is_removed_in_the_same_round() -> None:
    from computer.actors._pool_scaler import Plan, PoolScaler, _Pool, _Worker

    calls: list[str] = []

    class _Drain:
        @staticmethod
        async def remote() -> LoadReport:
            calls.append("drain")
            return _report("x", draining=True)  # idle: nothing running, waiting or live

    class _Terminate:
        @staticmethod
        def remote() -> None:
            calls.append("terminate")

    class _Handle:
        drain = _Drain
        __ray_terminate__ = _Terminate

    scaler = PoolScaler.__new__(PoolScaler)
    pool = _Pool("shell")
    pool.workers = {"x": _Worker("x", 0, _Handle(), "ready", 0.0, 1.0, 2, "n", _report("x", idle_for=99.0))}
    await scaler._apply(pool, LIMITS, Plan(drain=["x"]), {})
    assert pool.workers == {} and calls == ["drain", "terminate"]
    assert [d for _, d in pool.decisions] == ["remove x: drained, holds nothing"]


def test_a_move_costs_the_measured_sandbox_start_plus_the_mirror_pushed_at_the_measured_rate() -> None:
    moves = MoveCost()
    assert moves.cost("w") == START_PRIOR  # nothing measured: the prior, an empty mirror
    # The workspace's first run here started its sandbox (0.30 s held, 0.10 s of it pushing 1 MiB
    # whole); its next run found the sandbox (0.05 s): a fresh start cost 0.15 s.
    moves.ran(RunMeasure("w", 0.30, fresh=True, push_seconds=0.10, push_bytes=2**20, full_push=True))
    moves.ran(RunMeasure("w", 0.05, warm=True))
    assert moves.start == pytest.approx(0.15) and moves.push_rate == pytest.approx(10 * 2**20)
    assert moves.cost("w") == pytest.approx(0.15 + 0.1)  # 1 MiB at 10 MiB/s
    assert moves.cost("other") == pytest.approx(0.15)  # a mirror of unknown size: the start alone
    moves.ran(RunMeasure("w", 0.05, warm=True, push_bytes=2**19))  # an incremental push adds to it
    assert moves.cost("w") == pytest.approx(0.15 + 0.15)


def test_a_pinned_run_moves_only_when_its_wait_in_line_is_longer_than_a_move() -> None:
    moves = MoveCost()
    moves.hold, moves.start = 0.04, 0.05  # runs hold a slot 40 ms; 4 slots: one comes free every 10 ms
    assert moves.slot_time(4) == pytest.approx(0.01)
    assert not moves.worth_moving("w", ahead=3, target=4)  # 40 ms < 50 ms: it waits
    assert moves.worth_moving("w", ahead=5, target=4)  # 60 ms: it moves
    # Slots held by long runs (their median age 2 s) are known before those runs end.
    assert moves.worth_moving("w", ahead=0, target=4, ages=[2.0, 2.0, 3.0, 0.1])


def test_pinned_runs_that_wait_less_than_a_move_do_not_grow_the_pool() -> None:
    # Every slot taken, pinned runs wait, but a slot comes free sooner than a move would start them
    # elsewhere: they would not move to a new worker, which would idle. A longer wait grows it.
    def full(**kw: object) -> list[WorkerState]:
        return [_ready("a", running=2, **kw), _ready("b", running=2)]

    short = full(queued=1, pinned_queued=1, pinned_wait=0.3, slot_time=0.05, move_cost=0.4)
    assert (plan(LIMITS, 6, short, now=100.0).grow, plan(LIMITS, 6, short, now=100.0).pressure) == (0, False)
    long_line = full(queued=9, pinned_queued=9, slot_time=0.05, move_cost=0.4)
    assert plan(LIMITS, 6, long_line, now=100.0).grow > 0  # 10 x 50 ms: longer than the move
    long_wait = full(pinned_wait=0.5, slot_time=0.05, move_cost=0.4)
    assert plan(LIMITS, 6, long_wait, now=100.0).grow == 1


def test_a_worker_silent_past_silent_after_gets_only_the_runs_pinned_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker stopped (SIGSTOP) or wedged answers no poll and keeps its last report: "ready", free
    slots. Every dispatcher went on sending it new workspaces' runs, each waiting forever (Ray bounds
    no call). Past ``SILENT_AFTER`` without a report the view shows it draining: new runs go to the
    others, runs pinned to it (its live sandboxes) still go there; it is ready again once it answers."""
    from computer.actors import pools
    from computer.actors._pool_scaler import SILENT_AFTER, _Pool, _view, _Worker
    from computer.runtime.types import BackendInfo

    now = time.monotonic()
    pool = _Pool("shell")
    for name, reported in (("a", now - SILENT_AFTER - 1), ("b", now)):
        pool.workers[name] = _Worker(
            name, 0, None, "ready", 0.0, 1.0, 2, "n", _report(name), reported_at=reported
        )
    view = _view(pool)
    assert {w.name: w.draining for w in view.workers} == {"a": True, "b": False}

    monkeypatch.setitem(pools._infos, "shell", BackendInfo(id="shell", protocol="command", callable=False))
    backend = pools.PoolBackend("shell", owner=object(), node="n")  # owner and node given: no Ray
    backend._take_view(view)
    backend._warm = ["a"]  # the worker that ran this owner's workspaces last: preferred when usable
    backend.pin("pinned", "a")
    assert [backend._pick(ws).name for ws in ("new", "other", "pinned")] == ["b", "b", "a"]  # type: ignore[union-attr]

    pool.workers["a"].reported_at = time.monotonic()  # it answers again
    assert not any(w.draining for w in _view(pool).workers)


async def test_what_a_drain_report_counted_reaches_the_pool_status() -> None:
    """A worker resets its counts with every report it gives, a drain's too; the control loop kept a
    drain's report as the worker's state only: the runs it admitted since the last poll, their waits
    and its moves were lost from ``computer status`` (a lowered maximum drains busy workers)."""
    from computer.actors._pool_scaler import Plan, PoolScaler, _Pool, _Worker
    from computer.actors._pool_status import pool_status

    class _Drain:
        @staticmethod
        async def remote() -> LoadReport:
            return _report("x", running=1, draining=True, admitted=3, waits=[0.5, 1.0, 2.0], moved=2)

    class _Handle:
        drain = _Drain

    scaler = PoolScaler.__new__(PoolScaler)
    pool = _Pool("shell")
    pool.workers = {"x": _Worker("x", 0, _Handle(), "ready", 0.0, 1.0, 2, "n", _report("x", running=1))}
    await scaler._apply(pool, LIMITS, Plan(drain=["x"]), {})
    status = pool_status(pool, 60.0, 1.0)
    assert status["waits_counted"] == 3 and status["wait_p99"] == 2.0
    assert status["runs_per_s"] == 3.0 and status["moved"] == 2
