"""The sandbox's descriptor budget (``SandboxLimits.max_open_files``, ``_fd_budget``): what it resolves
to, and what programs in a sandbox see of it (per call and live, shell and python)."""

from __future__ import annotations

import dataclasses
import errno
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.runtime import _fd_budget as budget
from computer.runtime._fd_budget import NOFILE_FLOOR, PIDS_FLOOR, descriptor_limit, in_force
from computer.runtime._limits import SandboxLimits, rlimits

HOST_HARD = 20000  # the hard descriptor limit the process started with, in the property below


def _resolved(monkeypatch: pytest.MonkeyPatch, file_max: int | None, **fields: Any) -> SandboxLimits:
    monkeypatch.setattr(budget, "host_file_max", lambda: file_max)
    monkeypatch.setattr(budget, "started_nofile", lambda: (1024, HOST_HARD))
    return in_force(SandboxLimits(**fields))


def test_the_default_is_a_tenth_of_the_hosts_table_at_the_floors(monkeypatch: pytest.MonkeyPatch) -> None:
    here = _resolved(monkeypatch, 2_466_239)  # this machine: a tenth is 246,623, below 256 x 1,024
    assert (here.max_processes, here.max_open_files) == (PIDS_FLOOR, PIDS_FLOOR * NOFILE_FLOOR)
    assert descriptor_limit(here) == (1024, NOFILE_FLOOR)
    big = _resolved(monkeypatch, 64_000_000)  # a tenth is 6.4 million: 25,000 a process, capped at 20,000
    assert (big.max_processes, big.max_open_files) == (256, 256 * HOST_HARD)
    assert _resolved(monkeypatch, None).max_open_files is None  # file-max unlimited: no table to guard
    assert _resolved(monkeypatch, 2_466_239, max_processes=8).max_processes == 8
    assert _resolved(monkeypatch, 2_466_239, max_open_files=None) == SandboxLimits(max_open_files=None)


def test_an_explicit_budget_is_kept_processes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    small = _resolved(monkeypatch, 2_466_239, max_open_files=10_000)  # 9 processes of NOFILE_FLOOR at least
    assert (small.max_processes, descriptor_limit(small)) == (9, (1024, 1111))
    wide = _resolved(monkeypatch, 2_466_239, max_open_files=256 * 8192)
    assert (wide.max_processes, descriptor_limit(wide)) == (256, (1024, 8192))
    with pytest.raises(ValueError, match="max_open_files"):
        _resolved(monkeypatch, 2_466_239, max_open_files=0)


@settings(max_examples=300, deadline=None)
@given(
    file_max=st.one_of(st.none(), st.integers(1, 10**9)),
    wanted=st.one_of(st.none(), st.integers(1, 5000)),
    explicit=st.one_of(st.none(), st.integers(1, 10**8)),
)
def test_the_budget_holds_and_resolves_once(
    file_max: int | None, wanted: int | None, explicit: int | None
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        limits = _resolved(
            mp, file_max, max_processes=wanted, max_open_files="host" if explicit is None else explicit
        )
        assert in_force(limits) == limits
        nofile = descriptor_limit(limits)
        if limits.max_open_files is None:
            assert nofile is None and limits.max_processes == wanted
            return
        assert nofile is not None and nofile[0] <= nofile[1] <= HOST_HARD
        tasks = limits.max_processes or 1
        assert nofile[1] * tasks <= limits.max_open_files  # what the kernel lets the sandbox hold
        assert wanted is None or tasks <= wanted
        if explicit is not None:
            assert limits.max_open_files <= explicit
        elif file_max is not None and wanted is not None:
            assert nofile[1] == min(max(NOFILE_FLOOR, file_max // 10 // tasks), HOST_HARD)
            assert tasks >= min(wanted, PIDS_FLOOR)
            within = max(file_max // 10, min(wanted, PIDS_FLOOR) * NOFILE_FLOOR)
            assert limits.max_open_files <= within


def test_the_rlimits_carry_the_share() -> None:
    limits = in_force(SandboxLimits())
    nofile = descriptor_limit(limits)
    assert nofile is not None and nofile[1] >= min(NOFILE_FLOOR, budget.started_nofile()[1])
    assert (7, *nofile) in rlimits(SandboxLimits())  # RLIMIT_NOFILE


# Raises the soft limit to the hard one (as node and bundlers do), opens 900 files, then on until refused.
OPEN_PAST_THE_SHARE = """
import os, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(900)]
try:
    while len(fds) < hard + 10:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    print(soft, hard, hard - 32 <= len(fds) < hard, exc.errno)
"""


@pytest.mark.parametrize("live", [False, True])
async def test_a_program_gets_its_share_and_emfile_past_it(live: bool) -> None:
    """``ulimit -n`` and python's ``getrlimit`` report the share; 900 files open; past the hard
    limit ``open`` fails EMFILE and the run goes on (shell and python, per call and live)."""
    backends = [ShellBackend(live=live), PythonBackend(live=live)]
    async with computer.Workspace(backends=backends) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/open.py", OPEN_PAST_THE_SHARE.encode())
        shell = await (await ws.runtime.exec("ulimit -Sn; ulimit -Hn; python3 open.py", timeout=60)).result()
        python = await (await ws.runtime.exec(OPEN_PAST_THE_SHARE, backend="python", timeout=60)).result()
        infos = ws.runtime.backends()
    nofile = descriptor_limit(in_force(SandboxLimits()))
    assert nofile is not None
    refused = f"{nofile[1]} True {errno.EMFILE}"  # the hard limit, then EMFILE within it
    assert shell.status == "completed" and shell.stdout.split()[:2] == [str(n) for n in nofile], shell
    assert shell.stdout.splitlines()[2] == f"{nofile[0]} {refused}", shell
    assert python.status == "completed" and python.stdout.strip() == f"{nofile[0]} {refused}", python
    assert all(f"open files ({nofile[1]:,} a process" in info.isolation for info in infos), infos


async def test_a_backend_takes_a_budget_of_its_own() -> None:
    shell = ShellBackend(live=False)
    processes = shell.sandbox.limits.max_processes or 1
    shell.sandbox.limits = dataclasses.replace(shell.sandbox.limits, max_open_files=processes * 8000)
    async with computer.Workspace(backends=[shell]) as ws:
        await ws.fs.mkdir("/workspace")
        got = await (await ws.runtime.exec("ulimit -Hn")).result()
    assert got.stdout.split() == [str(min(8000, budget.started_nofile()[1]))], got
    assert shell.sandbox.limits.max_processes == processes
