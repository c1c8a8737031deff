"""Blocking teardown on a thread of its own (``_tasks.in_thread``): it needs no running loop, so a
loop closed before the work ends leaves nothing pending ("Task was destroyed but it is pending" at
exit, with ``in_background(asyncio.to_thread(...))``), and a failure is logged, never raised."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from computer.runtime._tasks import in_thread


def test_the_work_outlives_the_loop_that_asked_for_it() -> None:
    release, done = threading.Event(), threading.Event()

    def work() -> None:
        release.wait(10)
        done.set()

    async def ask() -> None:
        in_thread(work, "a slow clean-up")

    asyncio.run(ask())  # the loop is closed here, the work still going
    release.set()
    assert done.wait(10)


def test_a_failure_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    finished = threading.Event()

    def fails() -> None:
        try:
            raise OSError(16, "busy", "/sys/fs/cgroup/x")
        finally:
            finished.set()

    with caplog.at_level(logging.WARNING, logger="computer.runtime._tasks"):
        in_thread(fails, "removing a run's cgroups")
        assert finished.wait(10)
        for thread in threading.enumerate():  # the log line is written just after ``finished``
            if thread.name.startswith("computer: removing"):
                thread.join(10)
    assert "removing a run's cgroups failed" in caplog.text and "busy" in caplog.text
