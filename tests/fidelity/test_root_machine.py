"""Stateful property of ``/workspace``'s own mode and time (``computer.runtime._dir_times.RootTime``).

Random sequences of: a shell run's ``chmod`` or ``touch -d`` of ``.``, a python run's ``os.chmod('.')``,
the workspace's change of the root's mode or time (``commit_batch``, as another mirror's pull makes
it), a run's ``chmod .`` meeting a workspace write below the root or a workspace change of the root's
mode while it runs, and a close and reopen (the same backends: warm mirrors; or fresh ones: rebuilt).
The model is the store's mode and time of the root.

Invariants after every step: the workspace (``ws.fs.stat``) holds the model, and the next shell run's
``stat -c '%a %Y' .`` shows it, with the decisions of ``_dir_times``: setuid/setgid never kept (the
store strips them too), the owner's search bit always on in the sandbox, and stored with a mode a run
set (``chmod 000 .`` is 0o100 everywhere); a mode the workspace gave without it keeps it off in the
store only. A run's change of the root's mode meets a workspace change of it: the workspace's wins
(one to the mode the store has is no change: the run's wins), and a run's ``chmod`` to the mode the
sandbox shows already changes nothing (a stored 0o000 stays so after ``chmod 100 .``).

Bounded: few examples and steps, no shrinking, derandomized (each step is a real sandboxed run;
``COMPUTER_HYPOTHESIS_SEED`` runs it randomized: README.md)."""

from __future__ import annotations

import stat
from collections import Counter

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

import computer
from computer.runtime import PythonBackend, ShellBackend

from ._support import PYTHON_LIVE, ROOT, WorkspaceMachine, machine_runner, ok, settle, started

# How many times each rule ran (the test asserts that every one did).
RAN: Counter[str] = Counter()
MODES = st.sampled_from([0o000, 0o100, 0o500, 0o700, 0o711, 0o750, 0o755, 0o2775, 0o1777, 0o4755])
TIMES = st.sampled_from([1_100_000_000, 1_200_000_000, 1_300_000_000])


def seen_by_runs(mode: int) -> int:
    """The mode the sandbox shows for a stored one (``_dir_times.sandbox_mode``)."""
    return (mode & 0o1777) | 0o100


class RootMachine(WorkspaceMachine):
    prefix = "fid-root-"
    live = False

    def __init__(self) -> None:
        super().__init__()
        self.mode, self.time = 0o755, 1_000_000_000
        self.ws = self.call(self._open(fresh=True))
        self.call(self._first())

    async def _open(self, *, fresh: bool) -> computer.Workspace:
        if fresh:
            self.backends = [ShellBackend(live=self.live), PythonBackend(live=self.live)]
        return computer.Workspace(self.db, backends=self.backends)

    async def _first(self) -> None:
        await self.ws.fs.mkdir(f"{ROOT}/s", recursive=True)
        self.ws.fs.commit_batch({}, mtimes={ROOT: self.time * 1000})

    # ------------------------------------------------------------------ rules

    @rule(mode=MODES, meanwhile=st.sampled_from(["nothing", "a write below", "its mode"]), given=MODES)
    def a_run_chmods_the_root(self, mode: int, meanwhile: str, given: int) -> None:
        """The workspace meanwhile (after the run's chmod, before its end): writes below the root (no
        conflict: the run's mode is kept, nothing skipped), or changes the root's mode (the workspace's
        is kept: it came last). A workspace "change" to the mode the store has already is none (the
        store logs nothing): the run's mode is kept, as a three-way merge keeps the one side that
        changed; a live sandbox may have pulled the run's chmod before it, which makes it a change."""
        RAN[f"a run's chmod, meanwhile {meanwhile}"] += 1

        async def step() -> None:
            if meanwhile == "nothing":
                await ok(self.ws, f"chmod {mode:o} .")
                return
            handle = await started(self.ws, f"chmod {mode:o} . && echo ready && sleep 0.3")
            if meanwhile == "a write below":
                await self.ws.fs.write_file(f"{ROOT}/s/from-ws", b"w")
            else:
                self.ws.fs.commit_batch({}, modes={ROOT: given})
            result = await settle(handle)
            assert result.status == "completed" and result.skipped == [], result.skipped_reasons

        before, runs = self.mode, self.after_a_runs_chmod(mode)
        self.call(step())
        self.mode = given & 0o1777 if meanwhile == "its mode" else runs
        if meanwhile == "its mode" and given & 0o1777 == before:  # no change in the store: no conflict
            if not self.live:
                self.mode = runs
            else:  # either, by whether a tick pulled the chmod before the workspace's change
                stored = stat.S_IMODE(self.call(self.ws.fs.stat(ROOT)).mode)
                assert stored in (self.mode, runs), oct(stored)
                self.mode = stored

    def after_a_runs_chmod(self, mode: int) -> int:
        """The store's mode after a run's ``chmod`` to ``mode``: as the sandbox shows it, unless the
        sandbox showed exactly that already (nothing changed there to pull: a stored 0o000 the sandbox
        shows as 0o100 stays 0o000 after a ``chmod 100 .``, and is 0o100 after a ``chmod 000 .``)."""
        return self.mode if mode == seen_by_runs(self.mode) else seen_by_runs(mode)

    @rule(seconds=TIMES)
    def a_run_touches_the_root(self, seconds: int) -> None:
        RAN["a run's touch"] += 1
        self.call(ok(self.ws, f"touch -d @{seconds} ."))
        self.time = seconds

    @rule(mode=MODES)
    def a_python_run_chmods_its_cwd(self, mode: int) -> None:
        RAN["a python run's chmod"] += 1
        self.call(ok(self.ws, f"import os\nos.chmod('.', {mode:#o})", backend="python", timeout=30.0))
        self.mode = self.after_a_runs_chmod(mode)

    @rule(mode=MODES, seconds=TIMES)
    def the_workspace_changes_the_root(self, mode: int, seconds: int) -> None:
        RAN["the workspace's change"] += 1
        self.ws.fs.commit_batch({}, modes={ROOT: mode}, mtimes={ROOT: seconds * 1000})
        self.mode, self.time = mode & 0o1777, seconds

    @rule(fresh=st.booleans())
    def close_and_reopen(self, fresh: bool) -> None:
        RAN["a reopen"] += 1
        self.call(self.ws.close())
        self.ws = self.call(self._open(fresh=fresh))

    # ------------------------------------------------------------------ invariant

    @invariant()
    def the_workspace_and_the_next_run_show_the_model(self) -> None:
        async def check() -> None:
            st_ = await self.ws.fs.stat(ROOT)
            assert (st_.mode & 0o7777, st_.mtime) == (self.mode, self.time * 1000)
            seen = await ok(self.ws, "stat -c '%a %Y' .")
            assert seen.stdout == f"{seen_by_runs(self.mode):o} {self.time}\n"

        self.call(check())


class LiveRootMachine(RootMachine):
    live = True


@pytest.mark.parametrize("machine", [RootMachine, LiveRootMachine], ids=["per-call", "live"])
@pytest.mark.timeout(900)
def test_the_roots_mode_and_time_state_machine(machine: type[RootMachine]) -> None:
    if machine.live and not (PYTHON_LIVE and ShellBackend(live=True).live):
        pytest.skip("no cgroup freezer here")
    runner = machine_runner(machine, 6, 12)
    RAN.clear()
    runner.TestCase().runTest()
    assert len(RAN) == 7, RAN  # every rule and every meanwhile ran


def test_a_workspace_mode_change_to_the_roots_own_mode_during_a_runs_chmod_keeps_the_runs() -> None:
    """Found randomized (COMPUTER_HYPOTHESIS_SEED=2115328822): the model took the workspace's mode as
    the winner when it gave the root the mode the store had already (0o100 after ``chmod 000 .``);
    the store logs no change for it, so the run's ``chmod 500 .`` is no conflict and is kept."""
    machine = RootMachine()
    try:
        machine.the_workspace_and_the_next_run_show_the_model()
        machine.a_python_run_chmods_its_cwd(mode=0o000)
        machine.the_workspace_and_the_next_run_show_the_model()
        machine.a_run_chmods_the_root(mode=0o500, meanwhile="its mode", given=0o100)
        machine.the_workspace_and_the_next_run_show_the_model()
    finally:
        machine.teardown()


def test_a_runs_chmod_to_the_mode_the_sandbox_shows_already_changes_nothing() -> None:
    """Found randomized (COMPUTER_HYPOTHESIS_SEED=1759720192): the model stored a run's
    ``os.chmod('.', 0o100)`` as 0o100 when the workspace had given the root 0o000, which the sandbox
    shows as 0o100 already (its owner's search bit always on): the run changed nothing there, the
    store keeps 0o000."""
    machine = RootMachine()
    try:
        machine.the_workspace_and_the_next_run_show_the_model()
        machine.the_workspace_changes_the_root(mode=0o000, seconds=1_100_000_000)
        machine.the_workspace_and_the_next_run_show_the_model()
        machine.a_python_run_chmods_its_cwd(mode=0o100)
        machine.the_workspace_and_the_next_run_show_the_model()
        # and one that changes the sandbox's 0o100 (seed 1957727126, against the first model's fix)
        machine.the_workspace_changes_the_root(mode=0o000, seconds=1_100_000_000)
        machine.the_workspace_and_the_next_run_show_the_model()
        machine.a_python_run_chmods_its_cwd(mode=0o000)
        machine.the_workspace_and_the_next_run_show_the_model()
    finally:
        machine.teardown()
