"""The live sandbox's init (``_live_init``), its pieces run in this process: a job's oom score."""

from __future__ import annotations

import builtins
import os
import subprocess
import time
from typing import Any

import pytest

from computer.runtime import _live_init


def _refusing(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every open of an ``oom_score_adj`` fails as a non-dumpable process's does in the sandbox (its
    ``/proc`` files are root's); the init's sleeps between tries are counted, not slept."""
    real_open = builtins.open

    def refusing_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).endswith("/oom_score_adj"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    slept: list[float] = []
    monkeypatch.setattr(_live_init, "open", refusing_open, raising=False)
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def test_a_job_that_already_ended_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """``true`` can end before the init raises its score: a zombie's files stay root's, and the init
    retried 200 times (~30 ms), holding back the job's ``started`` and ``exit`` (a live ``true`` took
    ~32 ms in about a third of the runs after a pause, ~3 ms otherwise)."""
    child = subprocess.Popen(["true"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: a zombie
    slept = _refusing(monkeypatch)
    assert _live_init.raise_oom_score(child.pid)  # done: nothing to try again
    assert slept == []
    assert _live_init.ended(child.pid)
    assert child.wait(timeout=5) == 0  # still ours to reap: the look took nothing


def test_a_running_job_is_tried_again_by_the_loop_never_in_a_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the job runs, a refused write is the exec's moment of a non-dumpable image: tried again,
    by the init's loop (a 50 µs sleep took 0.8-1.7 ms to come back with the child on the init's CPU,
    holding back the job's ``started`` and, for a command as short as ``echo``, its ``exit``)."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        slept = _refusing(monkeypatch)
        assert not _live_init.raise_oom_score(child.pid)  # to be tried again
        assert slept == []
        assert not _live_init.ended(child.pid)
    finally:
        child.kill()
        child.wait(timeout=5)


def test_a_listed_start_time_is_the_processes_to_a_tick() -> None:
    """``started`` came from ``btime`` in ``/proc/stat``, whole seconds: every start time was early by
    the boot time's fraction (0.14 s on the machine where it was seen, up to a second)."""
    before = time.time()
    child = subprocess.Popen(["sleep", "30"])
    after = time.time()
    try:
        (listed,) = [p for p in _live_init.processes() if p["pid"] == child.pid]
        tick = 1 / os.sysconf("SC_CLK_TCK")
        assert before - 2 * tick <= listed["started"] <= after + 2 * tick, (before, listed["started"], after)
    finally:
        child.kill()
        child.wait()


def test_killing_a_job_reaps_it_between_rounds_and_stops_once_it_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SIGKILL-ed job is a zombie until reaped, and a group of zombies still takes a signal: the init
    signalled it 20 rounds with a sleep each (40 ms), every other run waiting, a run that did not fit the
    shell started ahead (discarded with a SIGKILL) ~50 ms instead of ~7. Now what died is reaped between
    rounds, and the next round finds the group gone."""
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)  # a job: its own group
    reaped: list[int] = []

    def reap() -> None:
        pid, _ = os.waitpid(child.pid, os.WNOHANG)
        if pid:
            reaped.append(pid)

    slept: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda seconds: (slept.append(seconds), real_sleep(0.05)))
    try:
        _live_init.kill_group(child.pid, 9, reap)
    finally:
        child.kill()
        child.wait()
    assert reaped == [child.pid]
    assert len(slept) == 1, slept  # one round, its wait, then the group was gone
