"""The live sandbox's init (``_live_init``), its pieces run in this process: a job's oom score."""

from __future__ import annotations

import builtins
import io
import os
import subprocess
import time
from typing import Any

import pytest

from computer.runtime import _live_init, _live_ps


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
        (listed,) = [p for p in _live_ps.processes() if p["pid"] == child.pid]
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


def _shown_as(monkeypatch: pytest.MonkeyPatch, hidden: dict[int, str]) -> None:
    """``/proc`` as the init reads it: for each pid of ``hidden``, its environment ``"refused"`` (memory
    not dumpable), ``"empty"`` with its command line (an ``exec``'s first instant) or ``"exec"``: empty
    while its command line is the new one, its ``env_end`` (``stat`` field 51) still 0 (the instant
    after, ``create_elf_tables`` between the two)."""
    real_open = builtins.open

    def opening(path: Any, *args: Any, **kwargs: Any) -> Any:
        parts = str(path).split("/")
        if len(parts) == 4 and parts[2].isdigit() and int(parts[2]) in hidden:
            how = hidden[int(parts[2])]
            if parts[3] == "environ" and how == "refused":
                raise PermissionError(13, "Permission denied", str(path))
            if (parts[3] in ("environ", "cmdline") and how == "empty") or (parts[3], how) == (
                "environ",
                "exec",
            ):
                return io.BytesIO(b"")
            if (parts[3], how) == ("stat", "exec"):
                with real_open(path, "rb") as f:
                    stat = f.read()
                head, fields = stat[: stat.rindex(b")") + 2], stat[stat.rindex(b")") + 2 :].split()
                fields[48] = b"0"
                return io.BytesIO(head + b" ".join(fields) + b"\n")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(_live_ps, "open", opening, raising=False)


def _settled(pid: int) -> None:
    """Wait (bounded) until ``pid`` runs ``sleep`` with its environment in place: in the middle of its
    exec the kernel may show its command line before its environment (an empty one: no run)."""
    for _ in range(500):
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline, open(f"/proc/{pid}/environ", "rb") as environ:
            if cmdline.read().startswith(b"sleep\0") and environ.read():
                return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never ran sleep")


def test_a_process_whose_environment_cannot_tell_is_listed_with_its_jobs_or_its_parents_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process whose environment is unreadable (not dumpable) or, with its command line, empty (the
    instant of an ``exec``) is listed with the run of the job whose session it is in, else its
    parent's. Before, with none: a run's shell inside the ``exec`` of its command was ``[bash]`` of no
    run, and a background writer's child in that instant was missed by a kill of the run's processes."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "COMPUTER_EXEC_ID": "exec-writer"}
    job = subprocess.Popen(["sleep", "30"], start_new_session=True)  # a job: its own session
    writer = subprocess.Popen(  # a background writer that left the job's session (``setsid``)
        ["bash", "-c", "sleep 30 & echo $! ; wait"], env=env, start_new_session=True, stdout=subprocess.PIPE
    )
    try:
        assert writer.stdout is not None
        child = int(writer.stdout.readline())
        _settled(child)  # past its exec (bash prints $! before the child's exec of sleep)
        leaders = {job.pid: "ahead-7"}
        assert _live_ps.run_of(child, leaders) == "exec-writer"  # (its own environment)
        for how in ("refused", "empty", "exec"):
            _shown_as(monkeypatch, {job.pid: how, child: how})
            runs = {p["pid"]: p["exec_id"] for p in _live_ps.processes(0, leaders)}
            assert (runs[job.pid], runs[child]) == ("ahead-7", "exec-writer"), how
            assert _live_ps.run_of(child, {}) == "exec-writer"
            assert _live_ps.run_of(job.pid, {}) is None  # no job known: its parent is no run's
        _shown_as(monkeypatch, {})
        with_none = subprocess.Popen(["sleep", "30"], env={})  # an empty environment of its own: no run
        try:
            assert _live_ps.run_of(with_none.pid, {with_none.pid: "ahead-7"}) is None
        finally:
            with_none.kill()
            with_none.wait()
    finally:
        for process in (job, writer):
            process.kill()
            process.wait()
