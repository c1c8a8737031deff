"""``delete_workspace`` racing runs (the contract: ``computer/actors/README.md``, "Deleting a workspace
racing its runs"): either the deletion is refused (EBUSY) and the run lives on, or the deletion wins and
the run is refused before it starts (EBUSY "being deleted", or "moved" to the next owner); never a
killed run *and* a failed deletion. Each race is forced, never timed: the deletion is held at the
step in question (a ``threading.Event``), the run sent meanwhile, the deletion let go.
"""

from __future__ import annotations

import asyncio
import errno
import faulthandler
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.actors import WorkspaceHost, _delete
from computer.runtime import BackendInfo, ExecContext, ExecRequest, ExitEvent, OutputChunk

_DEADLINE = 60.0  # seconds any single wait of these tests may take
# A run that ends once the test writes /workspace/go (a live sandbox pulls it in), bounded (30 s).
_WAITS_FOR_GO = "echo started; for i in $(seq 600); do [ -e go ] && break; sleep 0.05; done; echo ended"


class _Held:
    """A step of the deletion held until the test lets it go (``reached`` once it is held)."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()

    def hold(self) -> None:
        self.reached.set()
        if not self.go.wait(_DEADLINE):
            raise AssertionError("the test never let the deletion go")

    async def wait_reached(self) -> None:
        assert await asyncio.to_thread(self.reached.wait, _DEADLINE), "the deletion never reached the step"


@pytest.fixture
def owners_init(request: pytest.FixtureRequest, ray_session: Any, tmp_path: Path) -> Iterator[str]:
    owners = request.param
    computer.init(data_dir=tmp_path / "data", owners=owners, shell_pool_size=1, python_pool_size=0)
    yield owners
    computer.init(data_dir=tmp_path / "data")


def _delete_in_a_thread(name: str) -> asyncio.Future[Any]:
    """``delete_workspace(name)`` on an event loop of its own (a thread): a step held there (a blocking
    wait inside the deletion's loop) leaves the test's loop free to send runs."""
    return asyncio.ensure_future(asyncio.to_thread(asyncio.run, computer.delete_workspace(name)))


@pytest.mark.parametrize("owners_init", ["dedicated", "hosted"], indirect=True)
async def test_a_run_started_between_the_deletions_check_and_the_close_lives_and_the_deletion_is_busy(
    owners_init: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deletion checks the owner idle (its ``stats``), is held, a run starts, the deletion goes
    on: it is refused EBUSY naming the run, and the run lives on to complete; the workspace is whole.
    Before, the close killed the run (cancelled, 137) and the deletion went through (both models, this
    test on the old code; the stress test below saw it too: round 10 of 20, dedicated)."""
    held = _Held()
    checked = _delete._refuse_if_in_use

    def check_then_hold(workspace: str, stats: dict[str, Any], *, force: bool) -> None:
        checked(workspace, stats, force=force)
        held.hold()

    monkeypatch.setattr(_delete, "_refuse_if_in_use", check_then_hold)
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/seed", b"seed")
        deletion = _delete_in_a_thread(name)
        await held.wait_reached()
        run = await ws.runtime.exec(_WAITS_FOR_GO)
        held.go.set()
        with pytest.raises(OSError) as refused:
            await asyncio.wait_for(deletion, _DEADLINE)
        assert refused.value.errno == errno.EBUSY, refused.value
        assert "run(s) going" in str(refused.value), refused.value
        await ws.fs.write_file("/workspace/go", b"")
        result = await asyncio.wait_for(run.result(), _DEADLINE)
        assert (result.status, result.stdout) == ("completed", "started\nended\n"), result
        assert await ws.fs.read_file("/workspace/seed") == b"seed"


@pytest.mark.parametrize("owners_init", ["dedicated", "hosted"], indirect=True)
async def test_a_run_sent_once_the_deletion_closed_the_owner_is_refused_before_it_starts(
    owners_init: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deletion closed the owner and is held before it removes the file; a run sent then, through
    a client opened before, is refused EBUSY ("being deleted") with nothing started; the deletion then
    completes, and the name opens empty. Before, the run's client woke a new owner in the gap between
    the owner's close and the deletion's lease: the run started on the old file, and the deletion
    killed or fenced it."""
    held = _Held()
    remove = _delete._remove

    def hold_then_remove(*args: Any, **kwargs: Any) -> Any:
        held.hold()
        return remove(*args, **kwargs)

    monkeypatch.setattr(_delete, "_remove", hold_then_remove)
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/seed", b"seed")
        deletion = asyncio.ensure_future(computer.delete_workspace(name))
        await held.wait_reached()
        try:
            with pytest.raises(OSError) as refused:
                run = await asyncio.wait_for(ws.runtime.exec("echo ran > /workspace/ran"), _DEADLINE)
                await asyncio.wait_for(run.result(), _DEADLINE)
            assert refused.value.errno == errno.EBUSY, refused.value
            assert "being deleted" in str(refused.value), refused.value
        finally:
            held.go.set()
            deleted = await asyncio.wait_for(deletion, _DEADLINE)
        assert deleted.owner_stopped
    async with computer.get_workspace(name) as ws:
        assert await ws.fs.ls("/") == [], "the deleted workspace came back, or the run wrote into it"


# -- embedded: an owner in this process (a WorkspaceHost outside Ray), its backend a fake one ----------


class _GatedBackend:
    """A backend whose runs print ``started`` and end once ``release`` is set; ``closing`` is held at
    the owner's close (``close_workspace``) until ``let_close`` is set."""

    info = BackendInfo("gated", "command", False)

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.closing = asyncio.Event()
        self.let_close = asyncio.Event()
        self.let_close.set()
        self.runs = 0

    async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[Any]:
        self.runs += 1
        yield OutputChunk("stdout", b"started\n")
        await self.release.wait()
        yield ExitEvent(0)

    async def close_workspace(self, workspace_id: str) -> None:
        self.closing.set()
        await self.let_close.wait()


class _EmbeddedHost(WorkspaceHost):
    managed = True  # answers "moved" as an owner clients re-create does

    def _backends(self) -> list[Any]:
        self.gated = _GatedBackend()
        return [self.gated]


async def test_embedded_a_run_going_refuses_the_deletions_close_and_lives_on(
    ray_session: Any, tmp_path: Path
) -> None:
    """The owner's own check and close (``close_for_deletion``) with a run going, started after the
    deleter's early check: busy (the run named), the owner open, the run completes."""
    conf = computer.init(data_dir=tmp_path / "data", shell_pool_size=0, python_pool_size=0)
    try:
        host = _EmbeddedHost("embedded-busy", config=conf)
        try:
            assert (await host.stats())["runs"] == 0  # the deleter's early check: idle
            started = await host.exec_start("x", {})
            assert started[0] == "ok", started
            exec_id = started[1][0]
            reply = await host.close_for_deletion(False, 60.0)
            assert reply == ("ok", {"busy": ["1 run(s) going"]}), reply
            assert not host._closing
            host.gated.release.set()
            result = await host.exec_result(exec_id)
            assert (result[1].status, result[1].stdout) == ("completed", "started\n"), result
        finally:
            await host.close_workspace()
    finally:
        computer.init(data_dir=tmp_path / "data")


async def test_embedded_a_run_arriving_while_the_deletion_closes_the_owner_is_moved_unstarted(
    ray_session: Any, tmp_path: Path
) -> None:
    """The owner's close for a deletion is held inside (its backends closing); a run that arrives then
    is answered "moved" and never reaches the backend; the close hands the deletion its lease (node
    ``deleting``), so no owner can take the workspace until the deletion is done."""
    from computer.actors.directory import DELETING, open_directory

    conf = computer.init(data_dir=tmp_path / "data", shell_pool_size=0, python_pool_size=0)
    try:
        host = _EmbeddedHost("embedded-wins", config=conf)
        host.gated.let_close.clear()
        closing = asyncio.ensure_future(host.close_for_deletion(False, 60.0))
        await asyncio.wait_for(host.gated.closing.wait(), _DEADLINE)
        assert (await host.exec_start("x", {}))[0] == "moved"
        assert host.gated.runs == 0
        host.gated.let_close.set()
        reply = await asyncio.wait_for(closing, _DEADLINE)
        assert reply[0] == "ok" and set(reply[1]) == {"lease"}, reply
        owner, epoch = reply[1]["lease"]
        directory = open_directory(conf)
        try:
            record = directory.get("embedded-wins")
            assert record is not None and (record.node, record.owner, record.epoch) == (
                DELETING,
                owner,
                epoch,
            )
            with pytest.raises(OSError) as refused:
                WorkspaceHost("embedded-wins", config=conf)
            assert refused.value.errno == errno.EBUSY and "being deleted" in str(refused.value)
        finally:
            directory.close()
    finally:
        computer.init(data_dir=tmp_path / "data")


# -- stress: many runs racing one deletion -------------------------------------------------------------

_RUNS = 8  # runs racing each deletion
_ROUNDS = int(os.environ.get("COMPUTER_DELETE_ROUNDS", "3"))  # deletions per test (20+ to hunt a hang)


async def _run_or_refusal(ws: Any, index: int) -> str:
    """One racing run: ``completed``, or the refusal it met before it started."""
    try:
        run = await ws.runtime.exec(f"echo {index} > /workspace/r{index}; echo {index}")
        result = await run.result()
    except OSError as exc:
        return f"refused: {exc}" if exc.errno == errno.EBUSY and "being deleted" in str(exc) else repr(exc)
    return result.status if result.stdout == f"{index}\n" else f"{result.status}: {result!r}"


async def _deletion(workspace: str) -> str:
    try:
        await computer.delete_workspace(workspace)
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            raise
        return "busy"
    return "deleted"


async def _race(workspace: str, first: int) -> tuple[list[str], str]:
    """One round: the runs' outcomes, and the deletion's, which starts once ``first`` runs were sent."""
    async with computer.get_workspace(workspace) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()  # warm: the race is the runs', not a start's
        runs: list[asyncio.Future[str]] = []
        deletion: asyncio.Future[str] | None = None
        for index in range(_RUNS + 1):
            if index == first:
                deletion = asyncio.ensure_future(_deletion(workspace))
            if index < _RUNS:
                runs.append(asyncio.ensure_future(_run_or_refusal(ws, index)))
            await asyncio.sleep(0.06)  # a stagger, not a wait for anything: the race goes either way
        assert deletion is not None
        outcomes = list(await asyncio.gather(*runs))
        return outcomes, await deletion


def _dump_tasks() -> None:
    """Every asyncio task's stack, to stderr; and with ``py-spy`` (on the PATH, or ``PY_SPY``), every
    owner's and pool worker's Python stacks (Ray names their processes ``ray::OwnerHost...``)."""
    for task in asyncio.all_tasks():
        print(f"--- {task!r}", file=sys.stderr)
        task.print_stack(file=sys.stderr)
    import ray

    for row in ray._private.state.actors().values():  # the actors not dead: pending creation?
        if row.get("State") != "DEAD":
            print(f"actor {row.get('Name')!r} {row.get('State')} pid={row.get('Pid')}", file=sys.stderr)
    spy = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if spy is None:
        return
    for entry in os.listdir("/proc"):
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].decode()
        except (OSError, ValueError):
            continue
        if title.startswith(("ray::OwnerHost", "ray::OwnerActor", "ray::PoolWorker")):
            dumped = subprocess.run(
                [spy, "dump", "--pid", entry], capture_output=True, text=True, timeout=30, check=False
            )
            print(f"=== {entry} {title}\n{dumped.stdout}{dumped.stderr}", file=sys.stderr)


@pytest.mark.timeout(
    60 + _ROUNDS * _DEADLINE * 2
)  # each round bounded on its own (300 s: 20 rounds under load)
@pytest.mark.parametrize("owners_init", ["dedicated", "hosted"], indirect=True)
async def test_runs_racing_a_deletion_each_complete_or_are_refused_and_nothing_hangs(
    owners_init: str, name: str
) -> None:
    """``_RUNS`` runs sent (60 ms apart) while ``delete_workspace`` runs (from the first run, the
    second... after the last: one more each round), for ``_ROUNDS`` rounds: the deletion succeeds or is refused EBUSY; every run completed (in the
    workspace's old life before a refusal, or its next life) or was refused "being deleted" before it
    started; none killed, none "unknown outcome". Every wait is bounded; a round that hangs dumps
    every thread's stack (``faulthandler``) before it fails, to say where."""
    seen = []
    for round_ in range(_ROUNDS):
        faulthandler.dump_traceback_later(_DEADLINE, exit=False)
        race = asyncio.ensure_future(_race(f"{name}-{round_}", round_ % (_RUNS + 1)))
        try:
            outcomes, deleted = await asyncio.wait_for(asyncio.shield(race), _DEADLINE * 2)
        except TimeoutError:
            _dump_tasks()  # where each of the round's tasks waits (the threads' stacks say only "select")
            race.cancel()
            raise
        finally:
            faulthandler.cancel_dump_traceback_later()
        odd = [o for o in outcomes if o != "completed" and not o.startswith("refused: ")]
        assert not odd, (round_, deleted, outcomes)
        if deleted == "busy":
            assert all(o == "completed" for o in outcomes), outcomes
        seen.append((deleted, sum(o == "completed" for o in outcomes)))
    print("rounds (deletion, runs completed):", seen)
