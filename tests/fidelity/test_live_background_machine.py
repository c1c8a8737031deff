"""Stateful property of a live sandbox's two-way sync with *background processes* (SPEC 10): a writer
started in the background (``setsid ... &``, python or bash) creates, appends, renames and deletes files
every few ms across calls, while the workspace (``ws.fs``) changes the same and neighbouring paths and
removes or renames the writer's directory; foreground runs change files, and one appending lines
every few ms is killed (``handle.kill()``: what it wrote is kept, whole lines in order); the writer is
killed (the processes API, ``kill`` in a run, ``end_sandbox``) or ends; the workspace is closed right
after its changes (a tick's push in flight) and reopened (warm or fresh backend).
``p/`` is the writers', ``g/`` the runs', ``n/`` the workspace's; ``d/``, ``e/``, ``sN`` are shared.
Every line written is unique and names its writer (``bgN i``, ``ws K``, ``fg K``).

Invariants once settled (no writer left, a no-op run): the sandbox's view (a run's ``find | sha256sum``)
equals the workspace's; ``n/``, ``g/`` equal the model; a writer that ended left exactly its ``p/``, a
killed one a prefix (its log: rounds ``0..m-1``, each with its end time); a shared path's workspace
change made while no writer ran holds, one made while a writer ran may be replaced only by a round that
ended after it began (same clock); every line was written by someone, a writer's in order in d/log;
no path of ``n/`` or ``g/`` (no background process writes there) is ever listed as skipped.

Two defects this machine found, each reproduced alone below (both lost data with nothing in
``skipped``): a live pull right after another (a run's end, then the tick) took the first's commits
for workspace changes and dropped the sandbox's newer writes there as conflicts (fixed: the pull
leaves out every revision the mirror's own pulls committed, ``MirrorSync.pull``); a pull refusing a
directory the sandbox made anew removed it whole from the mirror, and the next push sent only what
changed, never the workspace's older files below it (fixed: ``Mirror.refetch``, sent whole).
:class:`QuietRunsMachine` makes the workspace's changes between runs only, the other during them too.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import re
import shlex
import shutil
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import computer
from computer.runtime import ShellBackend

from ._support import (
    MARGIN,
    ROOT,
    WorkspaceMachine,
    ok,
    opened,
    reasons_cover_skipped,
    run,
    sandbox_view,
    workspace_view,
)

pytestmark = pytest.mark.skipif(not ShellBackend().live, reason="no live sandboxes here (cgroup freezer)")

T = TypeVar("T")
SHARED = ["d/f0", "d/f1", "d/f3", "d/log", "d/save", "e/f0", "e/f3", "s0", "s1"]
OWN = ["n/a", "n/b", "n/c/d"]  # the workspace's own
NAMES = [f"{d}/f{i}" for d in "de" for i in range(5)]  # what a writer writes in d/ (moves to e/)
KINDS = st.sampled_from(["write", "write", "append", "delete", "rename", "rmdir", "mvdir"])
PATHS, PAUSES = st.sampled_from(SHARED + OWN), st.sampled_from([0.0, 0.0, 0.003, 0.02])
WS_OPS = st.lists(st.tuples(KINDS, PATHS, PATHS, PAUSES), min_size=1, max_size=12)
HEALTH = list(HealthCheck)
Op = tuple[str, str, str, float]  # kind, path, other path, pause after
LINE = re.compile(r"(?:(bg\d+) (\d+)(?: \d+)?|ws \d+|fg \d+|done|\d+)\n")

# What the machine exercised (checked after the run: a machine that never raced proves nothing).
stats = {
    "writers": 0,
    "finished": 0,
    "killed": 0,
    "ws_ops": 0,
    "fg_runs": 0,
    "fg_killed": 0,
    "ends": 0,
    "reopens": 0,
    "raced": 0,
}
# One writer, in python or bash: ``n`` rounds over its own files (p/TAG.*) and the shared ones.
PY_WRITER = r"""
import os, sys, time
from contextlib import suppress
n, tag = int(sys.argv[1]), sys.argv[2]
def put(path, text, mode="w"):
    with suppress(OSError), open(path, mode) as f:
        f.write(text)
def move(a, b):
    with suppress(OSError):
        os.replace(a, b)
os.makedirs("p", exist_ok=True)
put(f"p/{tag}.pid", f"{os.getpid()}\n")
for i in range(n):
    line = f"{tag} {i}\n"
    put(f"p/{tag}.f{i % 3}", line)
    put(f"p/{tag}.tmp", line)
    move(f"p/{tag}.tmp", f"p/{tag}.save")
    if i % 4 == 0:
        with suppress(OSError):
            os.remove(f"p/{tag}.f{(i + 1) % 3}")
    os.makedirs("d", exist_ok=True)
    put(f"d/f{i % 5}", line)
    put("d/log", line, "a")
    put(f"s{i % 3}", line)
    if i % 9 == 0 and os.path.isdir("e"):
        move(f"d/f{i % 5}", f"e/f{i % 5}")
    put(f"p/{tag}.log", f"{tag} {i} {time.time_ns() // 1000}\n", "a")
    time.sleep(0.004)
put(f"p/{tag}.done", "done\n")
"""
SH_WRITER = (
    'mkdir -p p; echo $$ > p/TAG.pid; i=0; while [ $i -lt N ]; do l="TAG $i"; '
    'echo "$l" > p/TAG.f$((i % 3)); echo "$l" > p/TAG.tmp; mv -f p/TAG.tmp p/TAG.save; '
    "[ $((i % 4)) = 0 ] && rm -f p/TAG.f$(((i + 1) % 3)); "
    'mkdir -p d 2>/dev/null; echo "$l" > d/f$((i % 5)); echo "$l" >> d/log; echo "$l" > s$((i % 3)); '
    "[ $((i % 9)) = 0 ] && [ -d e ] && mv -f d/f$((i % 5)) e/f$((i % 5)) 2>/dev/null; "
    'echo "$l ${EPOCHREALTIME/./}" >> p/TAG.log; sleep 0.004; i=$((i + 1)); done; echo done > p/TAG.done'
)


def of_writer(process: Any, marker: str, run: str | None) -> bool:
    """Whether ``process`` is a writer's: its command holds ``marker``, or it is of the writer's run
    ``run`` (a child of the writer that runs ``mv`` or ``sleep``, and any of them for the instant of
    its ``exec``, when the kernel shows no command line: ``[bash]``, missed by the marker alone)."""
    return marker in process.command or (run is not None and process.exec_id == run)


async def until_quiet(ws: Any, within: float, marker: str = "", run: str | None = None) -> bool:
    """Wait (bounded) until no process (whose command holds ``marker``, or of the run ``run``) runs;
    whether none does. Polled: the processes API has nothing to await for "no process left" (a
    background process's end has no event a caller can wait on)."""
    for _ in range(int(within / 0.05) + 1):
        if not [p for p in await ws.runtime.processes() if of_writer(p, marker, run)]:
            return True
        await asyncio.sleep(0.05)
    return False


def writer_result(tag: str, rounds: int) -> dict[str, bytes]:
    """What a writer of ``rounds`` rounds leaves in its own files (``p/``), the pid file left out."""
    files: dict[str, bytes] = {}
    for i in range(rounds):
        line = f"{tag} {i}\n".encode()
        files[f"p/{tag}.f{i % 3}"] = line
        files[f"p/{tag}.save"] = line
        if i % 4 == 0:
            files.pop(f"p/{tag}.f{(i + 1) % 3}", None)
    return files


def check_race(
    path: str, wrote: bytes | None, got: bytes | None, began: int, tag: str, ended: list[int], rounds: int
) -> None:
    """``path`` holds ``got``; the workspace's change begun at ``began`` (ns) left ``wrote`` while writer
    ``tag`` of ``rounds`` rounds ran (its rounds ended at ``ended``, us). Only its rounds that ended later
    (or the one it was killed in) may have replaced that, as it writes: ``d/fI`` and ``sI`` in round I,
    moved to ``e/`` in rounds I % 9 == 0, ``d/log`` appended to. The round it was killed in may have
    left its ``d/fI`` or ``sI`` empty: killed between the open that truncated it and the write."""

    def later(i: int) -> bool:
        return i == len(ended) or (i < len(ended) and ended[i] * 1000 + 1000 >= began)

    def written_by(text: bytes) -> list[int]:  # the writer's rounds whose lines ``text`` is
        return [int(line.split()[1]) for line in text.decode().splitlines() if line.split()[0] == tag]

    killed_in = len(ended) if len(ended) < rounds else None
    torn = killed_in is not None and path in (f"d/f{killed_in % 5}", f"s{killed_in % 3}")
    if got == wrote or (got == b"" and torn):
        return
    name, x = path.split("/")[-1], int(path[-1]) if path[-1].isdigit() else -1
    moves = [j for j in range(len(ended) + 1) if j % 9 == 0 and j % 5 == x and later(j)]
    why = f"the workspace's change to {path} ({wrote!r}) was undone: {got!r} ({tag}: {len(ended)} rounds)"
    if path == "d/log":
        assert wrote is None or (got or b"").startswith(wrote), why
        rest = (got or b"")[len(wrote or b"") :]
        assert len(written_by(rest)) == rest.count(b"\n") and all(map(later, written_by(rest))), why
        return
    assert got is None or len(written_by(got)) == 1 == got.count(b"\n"), why
    if path.startswith("e/"):  # only moved in by the writer
        assert got is not None and any(j >= written_by(got)[0] for j in moves), why
    elif name.startswith("f"):
        assert (got is None and moves) or (got is not None and later(written_by(got)[0])), why
    else:
        assert path.startswith("s") and got is not None and later(written_by(got)[0]), why


class LiveBackgroundMachine(WorkspaceMachine):
    prefix = "fid-bg-"
    bound = MARGIN
    DURING_RUNS = True  # whether the workspace changes files while a run starts or ends

    def __init__(self) -> None:
        super().__init__()
        self.shell = ShellBackend()
        self.ws: computer.Workspace = self.call(self._open())
        self.own: dict[str, bytes] = {}  # n/ and g/: exact
        # Shared paths known (None: absent; left out: unknown); ``racy``: changed while a writer ran;
        # ``last``: of those, when the change began (ns) and what it left (see ``check_race``).
        self.shared: dict[str, bytes | None] = {}
        self.racy: set[str] = set()
        self.last: dict[str, tuple[int, bytes | None]] = {}
        self.writer: str | None = None  # the tag of the writer running
        self.writer_run: str | None = None  # the id of the run that started it
        self.writers: dict[str, int] = {}  # tag -> its rounds
        self.k = 0

    async def _open(self) -> computer.Workspace:
        ws = computer.Workspace(self.db, backends=[self.shell])
        if not await ws.fs.exists(ROOT):
            await ws.fs.mkdir(ROOT)
        return ws

    def next_line(self, who: str) -> bytes:
        self.k += 1
        return f"{who} {self.k}\n".encode()

    def _removed(self, path: str) -> None:
        """The model after the workspace removed ``path`` (a file or a directory)."""
        for p in [p for p in self.own if p == path or p.startswith(path + "/")]:
            del self.own[p]
        for p in [*SHARED, *NAMES, *self.shared]:
            if p == path or p.startswith(path + "/"):
                self.shared[p] = None

    def _moved(self, src: str, dst: str) -> None:
        """The model after the workspace renamed ``src`` to ``dst`` (which it replaced)."""
        model: dict[str, Any] = self.own if src.startswith("n/") else self.shared
        unknown = object()  # (so is a racy path's content: a writer may have written it since)
        moving = {
            p: unknown if p in self.racy else model.get(p, unknown) for p in [*SHARED, *NAMES, *OWN, *model]
        }
        moving = {p: c for p, c in moving.items() if p == src or p.startswith(src + "/")}
        self._removed(dst)
        for p, content in moving.items():
            target = dst + p[len(src) :]
            if model is self.shared:
                model[p] = None
            else:
                model.pop(p, None)
            if content is unknown:
                model.pop(target, None)
            elif content is not None:
                model[target] = content

    async def _ws_op(self, kind: str, path: str, other: str) -> None:
        """One workspace change, taken into the model (racy while a writer runs). A path it removed
        that the workspace did not hold was no change of the workspace's: a writer's file there that
        the workspace had not yet seen is not undone by it (it arrives with a later pull)."""
        racing = self.writer is not None
        held = {p[len(ROOT) + 1 :] for p in await self.ws.fs.ls(ROOT)} if racing else set()
        before, began = dict(self.shared), time.time_ns()
        await self._change(kind, path, other)
        changed = {p for p in {*before, *self.shared} if before.get(p, b"?") != self.shared.get(p, b"?")}
        self.racy = self.racy | changed if racing else self.racy - changed
        for p in changed:
            if racing and p in self.shared and self.shared[p] is None and p not in held:
                continue  # (what ``last`` held for it still holds)
            if racing and p in self.shared:
                self.last[p] = (began, self.shared[p])
            else:
                self.last.pop(p, None)
        stats["ws_ops"] += 1
        stats["raced"] += racing

    async def _change(self, kind: str, path: str, other: str) -> None:
        fs, full = self.ws.fs, f"{ROOT}/{path}"
        if kind in ("write", "append"):
            line = self.next_line("ws")
            # An append: the workspace's copy and a line (a writer's later appends are kept too).
            with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
                line = (await fs.read_file(full) if kind == "append" else b"") + line
            try:
                await fs.mkdir(posixpath.dirname(full), recursive=True)
                await fs.write_file(full, line)
            except (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError):
                return  # a path of it is not a directory or is one (a writer's moves): nothing written
            (self.own if path.startswith("n/") else self.shared)[path] = line
        elif kind == "delete":
            await fs.rm(full, force=True, recursive=True)
            self._removed(path)
        elif kind == "rename" and path != other and (path in OWN) == (other in OWN) and await fs.exists(full):
            try:
                await fs.mkdir(posixpath.dirname(f"{ROOT}/{other}"), recursive=True)
                await fs.rename(full, f"{ROOT}/{other}", overwrite=True)
            except (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError):
                return  # moved or removed by a writer's sync meanwhile
            self._moved(path, other)
        elif kind == "rmdir":
            top = path.split("/")[0] if "/" in path else "e"
            await fs.rm(f"{ROOT}/{top}", recursive=True, force=True)
            self._removed(top)
        elif kind == "mvdir" and await fs.exists(f"{ROOT}/d"):
            await fs.rm(f"{ROOT}/e", recursive=True, force=True)
            try:
                await fs.rename(f"{ROOT}/d", f"{ROOT}/e")
            except FileExistsError:  # a pull brought e back meanwhile
                self._removed("e")
                return
            self._moved("d", "e")

    @precondition(lambda self: self.writer is None)
    @rule(shell=st.booleans(), rounds=st.sampled_from([60, 150, 250]), ops=st.none() | WS_OPS)
    def start_a_writer(self, shell: bool, rounds: int, ops: list[Op] | None) -> None:
        """Start a writer (its run returns once it wrote its pid), with workspace changes meanwhile."""
        tag = f"bg{len(self.writers)}"
        if shell:
            source = f"setsid bash -c {shlex.quote(SH_WRITER.replace('TAG', tag).replace('N', str(rounds)))}"
        else:
            source = f"setsid python3 -c {shlex.quote(PY_WRITER)} {rounds} {tag}"
        wait = f"for i in $(seq 300); do [ -s p/{tag}.pid ] && break; sleep 0.01; done"
        self.writer = tag
        self.writers[tag] = rounds
        for known in (self.shared, self.racy, self.last):  # it writes them all from now on
            known.clear()
        started: list[computer.ExecResult] = []

        async def start() -> None:
            started.append(await ok(self.ws, f"{source} > /dev/null 2>&1 & {wait}", timeout=30))

        self.call(self._with_ops(start(), ops, True))
        self.writer_run = started[0].id
        stats["writers"] += 1

    async def _ops(self, ops: list[Op] | None) -> None:
        for kind, path, other, pause in ops or []:
            await self._ws_op(kind, path, other)
            await asyncio.sleep(pause)

    async def _with_ops(self, work: Coroutine[Any, Any, Any], ops: list[Op] | None, run: bool) -> None:
        """``work`` with the workspace changes ``ops`` meanwhile (before it: a run, not DURING_RUNS)."""
        if run and not self.DURING_RUNS:
            await self._ops(ops)
            await work
        else:
            await asyncio.gather(work, self._ops(ops))

    @rule(ops=WS_OPS)
    def workspace_changes(self, ops: list[Op]) -> None:
        self.call(self._ops(ops))

    @rule(name=st.sampled_from(["g/x", "g/y/z"]), shared=st.sampled_from(SHARED), ops=WS_OPS)
    def a_foreground_run_with_workspace_changes_in_flight(
        self, name: str, shared: str, ops: list[Op]
    ) -> None:
        mine, other = self.next_line("fg"), self.next_line("fg")
        source = (
            f'echo ready; sleep 0.3; mkdir -p {posixpath.dirname(name)} && printf %s "$A" >> {name}; '
            f'mkdir -p {posixpath.dirname(shared) or "."} 2>/dev/null; printf %s "$B" > {shared} 2>&-; '
            "mv -f g/x g/w 2>/dev/null; true"
        )

        async def step() -> computer.ExecResult:
            if not self.DURING_RUNS:
                await self._ops(ops)
            handle = await self.ws.runtime.exec(
                source, env={"A": mine.decode(), "B": other.decode()}, timeout=30
            )
            async for snapshot in handle:
                if "ready" in snapshot.stdout or snapshot.done:
                    break
            await self._ops(ops if self.DURING_RUNS else None)
            result: computer.ExecResult = await asyncio.wait_for(handle.result(), 30 + MARGIN)
            return result

        result = self.call(step())
        assert result.status == "completed", (result.stdout, result.stderr, result.error)
        reasons_cover_skipped(result)
        assert not [p for p in result.skipped if p.startswith(f"{ROOT}/g")], result.skipped_reasons
        self.own[name] = self.own.get(name, b"") + mine
        if "g/x" in self.own:
            self.own["g/w"] = self.own.pop("g/x")
        # Its line may or may not be the last (the workspace's wins a race); a writer may move it.
        for p in (shared, "e/" + shared[2:]) if shared.startswith("d/") else (shared,):
            self.shared.pop(p, None)
            self.last.pop(p, None)
        stats["fg_runs"] += 1

    @precondition(lambda self: self.writer is not None)
    @rule(from_a_run=st.booleans(), ops=st.none() | WS_OPS)
    def kill_the_writer(self, from_a_run: bool, ops: list[Op] | None) -> None:
        """Kill the writer (from a run, or the processes API), with workspace changes meanwhile."""
        assert self.writer is not None
        tag = self.writer

        async def kill() -> None:
            if from_a_run:
                await ok(self.ws, f"kill -KILL $(cat p/{tag}.pid) 2>/dev/null; true", timeout=30)
            else:  # every process of the writer's (its children too: one may be in an ``exec``)
                for process in await self.ws.runtime.processes():
                    if of_writer(process, "bg", self.writer_run):
                        with contextlib.suppress(ProcessLookupError):  # it ended by itself meanwhile
                            await self.ws.runtime.kill_process(process.pid)
            assert await until_quiet(self.ws, 10, "bg", self.writer_run), "the killed writer still runs"

        self.call(self._with_ops(kill(), ops, from_a_run))
        self.writer = None
        stats["killed"] += 1

    @rule(pause=st.sampled_from([0.0, 0.03, 0.2]), ops=st.none() | WS_OPS)
    def kill_a_foreground_run(self, pause: float, ops: list[Op] | None) -> None:
        """A run appending a line to ``g/k`` every few ms is killed (``handle.kill()``) ``pause`` after
        it started writing, with workspace changes meanwhile: what it wrote is kept, whole lines in
        order, and stays so (``own``) across later syncs, ends and reopens."""
        base, count = self.k + 1, 400
        self.k += count
        source = (
            'mkdir -p g; echo ready; i=0; while [ $i -lt 400 ]; do echo "fg $((B + i))" >> g/k; '
            "i=$((i + 1)); sleep 0.005; done"
        )

        async def step() -> computer.ExecResult:
            handle = await self.ws.runtime.exec(source, env={"B": str(base)}, timeout=30)
            async for snapshot in handle:
                if "ready" in snapshot.stdout or snapshot.done:
                    break
            await self._ops(ops)
            await asyncio.sleep(pause)
            await handle.kill()
            result: computer.ExecResult = await asyncio.wait_for(handle.result(), 30 + MARGIN)
            return result

        result = self.call(step())
        assert result.status in ("cancelled", "completed"), (result.status, result.error)
        reasons_cover_skipped(result)
        assert not [p for p in result.skipped if p.startswith(f"{ROOT}/g")], result.skipped_reasons
        before = self.own.get("g/k", b"")
        got = self.call(self.ws.fs.read_file(f"{ROOT}/g/k"))
        assert got.startswith(before), "the killed run's file lost what it held"
        lines = got[len(before) :].decode().splitlines()
        assert lines == [f"fg {base + i}" for i in range(len(lines))], f"the killed run's lines: {lines[-3:]}"
        self.own["g/k"] = got
        stats["fg_killed"] += 1

    @rule(ops=st.none() | WS_OPS)
    def end_the_sandbox(self, ops: list[Op] | None) -> None:
        """``end_sandbox`` (the writer, if any, is killed with it), with workspace changes meanwhile."""
        if self.writer is not None:
            self.writer = None
            stats["killed"] += 1

        async def end() -> None:
            await self.ws.runtime.end_sandbox()

        self.call(self._with_ops(end(), ops, False))
        stats["ends"] += 1

    @rule(fresh=st.booleans(), ops=st.none() | WS_OPS)
    def close_and_reopen(self, fresh: bool, ops: list[Op] | None) -> None:
        """Close (the workspace's changes ``ops`` just before: a tick's push may be in flight as the
        sandbox ends) and open again (the same backend's warm mirror, or a fresh backend)."""
        self.call(self._ops([(kind, path, other, 0.0) for kind, path, other, _ in ops or []]))
        if self.writer is not None:  # closing ends the sandbox: the writer is killed with it
            self.writer = None
            stats["killed"] += 1
        self.call(self.ws.close())
        if fresh:
            self.shell = ShellBackend()
        self.ws = self.call(self._open())
        stats["reopens"] += 1

    @rule()
    def settle_and_check(self) -> None:
        self.call(self._settle())

    async def _settle(self) -> None:
        if self.writer is not None:
            assert await until_quiet(self.ws, 20, "bg", self.writer_run), "a writer did not end"
            stats["finished"] += 1
            self.writer = None
        settled = await ok(self.ws, "true")
        # No background process writes n/ or g/: none of them is a process's change refused (a close
        # racing a tick's push listed a file the push was writing so).
        own = [p for p in settled.skipped if p.startswith((f"{ROOT}/n/", f"{ROOT}/g/"))]
        assert not own, settled.skipped_reasons
        files = {p[len(ROOT) + 1 :]: await self.ws.fs.read_file(p) for p in await self.ws.fs.ls(ROOT)}
        assert await sandbox_view(self.ws) == await workspace_view(self.ws), "the sandbox's view differs"
        own = {p: c for p, c in files.items() if p.startswith(("n/", "g/"))}
        assert own == self.own, "the workspace's or a run's own files differ from the model"
        rounds_ended: dict[str, list[int]] = {}  # a writer's rounds: when each ended (us)
        for tag, rounds in self.writers.items():
            mine = {p: c for p, c in files.items() if p.startswith(f"p/{tag}.") and not p.endswith(".pid")}
            done = mine.pop(f"p/{tag}.done", None)
            log = mine.pop(f"p/{tag}.log", b"").decode().splitlines()
            rounds_ended[tag] = [int(line.split()[2]) for line in log]
            assert log == [f"{tag} {i} {t}" for i, t in enumerate(rounds_ended[tag])], f"{tag}'s log: {log}"
            if done is not None:  # it ran to its end
                assert (mine, len(log)) == (writer_result(tag, rounds), rounds), f"writer {tag} lost work"
        for path, (began, content) in self.last.items():  # (a writer ran since the last settle)
            tag = list(self.writers)[-1]
            check_race(path, content, files.get(path), began, tag, rounds_ended[tag], self.writers[tag])
        for path, content in self.shared.items():
            if path not in self.racy:
                assert files.get(path) == content, f"the workspace's change to {path} was lost"
        for path, content in files.items():
            order: dict[str, int] = {}
            for line in content.decode(errors="replace").splitlines(keepends=True):
                match = LINE.fullmatch(line)
                assert match, f"{path} holds a line nobody wrote: {line!r}"
                if path == "d/log" and match.group(1):
                    tag, i = match.group(1), int(match.group(2))
                    assert order.get(tag, -1) < i, f"{tag}'s lines in d/log go back: {content!r}"
                    order[tag] = i
        # No writer runs now: the shared paths are what the workspace holds.
        self.shared = {p: files.get(p) for p in {*SHARED, *files} if not p.startswith(("n/", "g/", "p/"))}
        self.racy, self.last = set(), {}

    def finish(self) -> None:
        self.call(self._settle())


class QuietRunsMachine(LiveBackgroundMachine):
    DURING_RUNS = False  # the workspace's changes made between runs only


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("machine", [QuietRunsMachine, LiveBackgroundMachine])
def test_live_sync_with_background_writers(machine: Any, record_property: Any) -> None:
    """Run ``machine`` (derandomized, bounded, no shrinking) and check it exercised every rule."""
    for key in stats:
        stats[key] = 0
    bounded = settings(max_examples=10, stateful_step_count=12, phases=[Phase.explicit, Phase.generate])
    runner = settings(bounded, deadline=None, derandomize=True, database=None, suppress_health_check=HEALTH)
    runner(machine).TestCase().runTest()
    for key, value in stats.items():
        record_property(f"{machine.__name__}_{key}", value)
    assert all(stats.values()), stats


def test_a_writer_killed_between_truncating_a_shared_file_and_writing_it_may_leave_it_empty() -> None:
    """The model, alone (seen randomized: ``QuietRunsMachine``, seed 202): the workspace wrote ``s0``
    while writer ``bg1`` (60 rounds) ran; the sandbox was ended in its round 9, just after that round's
    ``open(s0, "w")`` (or ``echo > s0``) truncated it and before the write, and both sides then held
    ``s0`` empty. That is what the writer left (the sync lost nothing): the model took it for the
    workspace's change undone. Only the killed round's own ``d/fI``/``sI`` may be so."""
    ended = [1_000 + i for i in range(9)]  # rounds 0..8 ended (us); killed in round 9: s0, d/f4
    check_race("s0", b"ws 14\n", b"", 0, "bg1", ended, 60)
    check_race("d/f4", b"ws 14\n", b"", 0, "bg1", ended, 60)
    for path, rounds in (("s1", 60), ("d/f3", 60), ("s0", 9)):  # not its round's, or it ran to its end
        with pytest.raises(AssertionError, match="was undone"):
            check_race(path, b"ws 14\n", b"", 0, "bg1", ended, rounds)


def test_a_workspace_delete_of_a_path_it_does_not_hold_is_no_change_for_the_model() -> None:
    """The model, alone (seen randomized: ``LiveBackgroundMachine``, seed 404, 3 runs of 3): writer
    ``bg1`` started while the workspace renamed ``d`` to ``e`` and deleted ``e/f0``, which it did not
    hold: the writer's ``d/f0`` (round 5, or round 0's move to ``e/f0``) had not reached it yet, and
    came with a later pull (after the push moved the sandbox's ``d``, or as the writer's move). The
    model took the no-op delete for the workspace's change and its file for that change undone."""
    machine = LiveBackgroundMachine()
    try:
        machine.writer = "bg0"  # a writer runs: every workspace change is checked against its rounds
        machine.call(machine._ws_op("delete", "e/f0", "d/f0"))
        assert "e/f0" not in machine.last  # nothing the workspace held was removed
        machine.call(machine._ws_op("write", "e/f0", "d/f0"))
        machine.call(machine._ws_op("delete", "e/f0", "d/f0"))
        assert machine.last["e/f0"][1] is None  # a delete of what it held is checked
    finally:
        machine.writer = None
        try:
            machine.call(machine.ws.close())
        finally:
            machine.loop.close()
            shutil.rmtree(machine.dir, ignore_errors=True)


COUNT = "for i in $(seq 0 299); do echo $i >> {}; sleep 0.004; done"


async def test_a_pull_after_a_run_never_takes_an_earlier_pull_for_a_workspace_change() -> None:
    """A background process appends to ``log`` and a long run to ``mine`` (nothing else touches either)
    while short runs come and go and the workspace writes another file: every line is kept (a pull
    right after another lost ~half of them, unreported)."""
    async with opened(None, python=False) as ws:
        await ok(ws, f"setsid bash -c {shlex.quote(COUNT.format('log'))} > /dev/null 2>&1 &")
        long = asyncio.ensure_future(run(ws, COUNT.format("mine"), timeout=30))
        for _ in range(3):
            result = asyncio.ensure_future(run(ws, "sleep 0.25", timeout=30))
            while not result.done():  # a workspace change after the run's last sync, before its end
                await ws.fs.write_file(f"{ROOT}/other", f"{time.time_ns()}\n")
                await asyncio.sleep(0.01)
            assert (await result).skipped == []
        assert (await long).skipped == []
        assert await until_quiet(ws, 10)
        await ok(ws, "true")
        counted = "".join(f"{i}\n" for i in range(300))
        assert [await ws.fs.read_text(f"{ROOT}/{name}") for name in ("log", "mine")] == [counted, counted]


PING = "for i in $(seq 50); do mv -T d d2; sleep 0.003; mv -T d2 d; sleep 0.003; done 2> /dev/null"


@pytest.mark.slow
async def test_a_workspace_write_below_a_directory_a_process_renames_reaches_the_sandbox() -> None:
    """A background process renames ``d`` to ``d2`` and back while the workspace writes files in
    both, creates ``d`` and removes ``d2``: once it ended, the next runs see what the workspace holds
    (a directory a pull refused was removed whole, and the workspace's older files below it never came
    back to the sandbox)."""
    async with opened(None, python=False) as ws:
        await ok(ws, "mkdir d && for k in 0 1 2 3; do echo w > d/w$k; done")
        for _ in range(8):
            await ok(ws, f"setsid bash -c {shlex.quote(PING)} > /dev/null 2>&1 &")
            k = 0
            while not await until_quiet(ws, 0) and k < 2000:
                k += 1
                with contextlib.suppress(OSError):
                    if k % 5 == 1:
                        await ws.fs.mkdir(f"{ROOT}/d", recursive=True)
                    elif k % 5 == 4:
                        await ws.fs.rm(f"{ROOT}/d2", recursive=True, force=True)
                    else:
                        await ws.fs.write_file(f"{ROOT}/{'d2' if k % 5 == 3 else 'd'}/x{k % 3}", f"{k}\n")
                await asyncio.sleep((0, 0.005, 0.02)[k % 3])
            await ok(ws, "true")
            assert await sandbox_view(ws) == await workspace_view(ws)
