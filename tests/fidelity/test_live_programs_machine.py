"""Stateful property of a live sandbox's sync with *real programs* left running in the background
(SPEC 10): a writer started from a shell or a python run keeps a repository busy every few ms, each
round appending a line to a log, saving a config the atomic way (a temporary file renamed over it),
inserting a row with the ``sqlite3`` CLI into a database in ``journal_mode=DELETE`` and, every third
round, ``git add -A && git commit``; meanwhile the workspace edits the config with the ``edit`` tool,
rewrites it atomically (a temporary name renamed over it), appends to the log, writes, renames and
removes its own files beside them (their directory too: renamed out and back, a write between),
and removes a file the writer made once. Writers are stopped (a
file they look for), killed (``end_sandbox``) or ended with the workspace's close and reopen (a fresh
backend: a rebuilt mirror). :mod:`test_live_background_machine` drives writers of plain files; this
one the programs an agent leaves running.

Invariants once settled (no writer left, a no-op run), and after every reopen: the sandbox's view
(a run's ``find | sha256sum``, written to a file: a run's output is cut at 2,000 lines) equals the
workspace's; the workspace's own files (``r/n/``) are exactly the model (nothing lost, nothing
resurrected); a file the workspace removed and no program wrote again stays removed; the config is
whole, one writer's save (never a mix of two); every log line is whole and someone's, a writer's in
order; ``pragma integrity_check`` is ``ok`` and the rows are a writer's rounds, each once; ``git fsck
--full`` reports nothing broken (dangling objects aside: a refused working-tree change leaves its blob).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import shlex
import shutil
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.tools import create_tools

from ._support import MARGIN, ROOT, ok

pytestmark = pytest.mark.skipif(not ShellBackend().live, reason="no live sandboxes here (cgroup freezer)")

T = TypeVar("T")
# Round i of writer TAG (bash, started in r/): log, atomic config save, a row, a commit every third.
WRITER = (
    "echo once > once.txt; i=0; while [ ! -e ../stop ] && [ $i -lt N ]; do "
    'echo "TAG $i" >> log; '
    "printf 'v = TAG %s\\nend\\n' $i > .cfg.tmp && mv -f .cfg.tmp cfg; "
    "sqlite3 ../t.db \"insert into t values('TAG', $i)\" 2>/dev/null; "
    '[ $((i % 3)) = 2 ] && { git add -A && git commit -qm "TAG $i"; } > /dev/null 2>&1; '
    "i=$((i + 1)); sleep 0.00$((i % 4)); done; echo $i > ../TAG.done"
)
PY_START = (
    "import subprocess, sys\n"
    "subprocess.Popen(['bash', '-c', sys.argv[1]], cwd='r', start_new_session=True,\n"
    "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
)
SETUP = (
    "mkdir -p r/n && cd r && git init -q && git config user.email a@b.c && git config user.name a && "
    "printf 'v = init\\nend\\n' > cfg && : > log && git add -A && git commit -qm init && "
    "sqlite3 ../t.db 'pragma journal_mode=delete; create table t(who, i)' > /dev/null"
)
CFG = re.compile(r"v = (?:init|(?:bg\d+|ws) \d+)\n(?:end)(?: ws)*\n")
LOG = re.compile(r"(bg\d+|ws) (\d+)")
VIEW = (
    "find . -path ./.view -prune -o -type f -print0 | sort -z | xargs -0r sha256sum > /tmp/.view "
    "&& mv /tmp/.view .view"
)
WS_KINDS = st.sampled_from(
    ["edit", "save", "append", "own", "own", "mv_own", "rm_own", "rm_once", "rm_cfg", "mvdir"]
)
WS_OPS = st.lists(
    st.tuples(WS_KINDS, st.integers(0, 2), st.sampled_from([0.0, 0.0, 0.005, 0.03])), max_size=10
)
stats = {"writers": 0, "python_writers": 0, "stopped": 0, "ended": 0, "reopens": 0, "ws_ops": 0, "raced": 0}


class LiveProgramsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="fid-progs-"))
        self.db = str(self.dir / "ws.sqlite")
        self.ws = self.call(self._open())
        self.call(ok(self.ws, SETUP))
        self.own: dict[str, bytes] = {}  # r/n/: exact
        self.gone: set[str] = set()  # removed by the workspace, written by no program since
        self.writer: str | None = None  # a running writer's tag
        self.backend = "shell"  # where the running writer was started
        self.tags = 0
        self.k = 0

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, MARGIN))

    async def _open(self) -> computer.Workspace:
        ws = computer.Workspace(self.db, backends=[ShellBackend(), PythonBackend()])
        if not await ws.fs.exists(ROOT):
            await ws.fs.mkdir(ROOT)
        self.tools = create_tools(ws)
        return ws

    async def _op(self, kind: str, n: int) -> None:
        fs, r = self.ws.fs, f"{ROOT}/r"
        self.k += 1
        line = f"ws {self.k}\n".encode()
        with contextlib.suppress(FileNotFoundError, FileExistsError):
            if kind == "edit":  # the tool's errors (the text gone meanwhile) are results, not raised
                await self.tools["edit"].run({"path": f"{r}/cfg", "old_text": "end", "new_text": "end ws"})
            elif kind == "save":
                await fs.write_file(f"{r}/.cfg.ws", f"v = ws {self.k}\nend\n")
                await fs.rename(f"{r}/.cfg.ws", f"{r}/cfg", overwrite=True)
            elif kind == "append":
                await fs.write_file(f"{r}/log", await fs.read_file(f"{r}/log") + line)
            elif kind == "own":
                await fs.write_file(f"{r}/n/f{n}", line)
                self.own[f"n/f{n}"] = line
                self.gone.discard(f"n/f{n}")
            elif kind == "mv_own" and f"n/f{n}" in self.own:
                target = f"n/f{(n + 1) % 3}"
                await fs.rename(f"{r}/n/f{n}", f"{r}/{target}", overwrite=True)
                self.own[target] = self.own.pop(f"n/f{n}")
                self.gone.discard(target)
                self.gone.add(f"n/f{n}")
            elif kind == "rm_own":
                await fs.rm(f"{r}/n/f{n}", force=True)
                self.own.pop(f"n/f{n}", None)
                self.gone.add(f"n/f{n}")
            elif kind == "mvdir":  # out and back with a write between: the mirror follows both renames
                await fs.write_file(f"{r}/n/f{n}", line)
                await fs.rename(f"{r}/n", f"{r}/m")
                await fs.write_file(f"{r}/m/f{(n + 1) % 3}", line)
                await fs.rename(f"{r}/m", f"{r}/n")
                for name in (f"n/f{n}", f"n/f{(n + 1) % 3}"):
                    self.own[name] = line
                    self.gone.discard(name)
            elif kind == "rm_once":
                await fs.rm(f"{r}/once.txt", force=True)
                if self.writer is None:  # a running writer wrote it at its start, maybe not synced yet
                    self.gone.add("once.txt")
            elif kind == "rm_cfg":
                await fs.rm(f"{r}/cfg", force=True)
        stats["ws_ops"] += 1
        stats["raced"] += self.writer is not None

    async def _ops(self, ops: list[tuple[str, int, float]]) -> None:
        for kind, n, pause in ops:
            await self._op(kind, n)
            await asyncio.sleep(pause)

    @precondition(lambda self: self.writer is None)
    @rule(python=st.booleans(), rounds=st.sampled_from([40, 120]), ops=WS_OPS)
    def start_a_writer(self, python: bool, rounds: int, ops: list[tuple[str, int, float]]) -> None:
        tag = f"bg{self.tags}"
        self.tags += 1
        self.gone.discard("once.txt")
        script = WRITER.replace("TAG", tag).replace("N", str(rounds))

        async def start() -> None:
            with contextlib.suppress(FileNotFoundError):
                await self.ws.fs.rm(f"{ROOT}/stop")
            if python:
                handle = await self.ws.runtime.exec(
                    f"import sys; sys.argv[1:] = [{script!r}]\n{PY_START}", backend="python", timeout=30
                )
            else:
                source = f"cd r && setsid bash -c {shlex.quote(script)} > /dev/null 2>&1 &"
                handle = await self.ws.runtime.exec(source, timeout=30)
            result = await asyncio.wait_for(handle.result(), 30 + MARGIN)
            assert result.status == "completed", (result.stdout, result.stderr, result.error)
            await self._ops(ops)

        self.writer, self.backend = tag, "python" if python else "shell"
        self.call(start())
        stats["writers"] += 1
        stats["python_writers"] += python

    async def _quiet(self, within: float) -> bool:
        for _ in range(int(within / 0.05) + 1):
            if not [p for p in await self.ws.runtime.processes(backend=self.backend) if "bash" in p.command]:
                return True
            await asyncio.sleep(0.05)
        return False

    @precondition(lambda self: self.writer is not None)
    @rule(ops=WS_OPS)
    def stop_the_writer(self, ops: list[tuple[str, int, float]]) -> None:
        async def stop() -> None:
            await self._ops(ops)
            await self.ws.fs.write_file(f"{ROOT}/stop", "")
            assert await self._quiet(30), "the writer did not stop"

        self.call(stop())
        self.writer = None
        stats["stopped"] += 1

    @precondition(lambda self: self.writer is not None)
    @rule(ops=WS_OPS)
    def end_the_sandbox(self, ops: list[tuple[str, int, float]]) -> None:
        async def end() -> None:
            await asyncio.gather(self._ops(ops), self.ws.runtime.end_sandbox(backend=self.backend))

        self.call(end())
        self.writer = None
        stats["ended"] += 1

    @rule(ops=WS_OPS)
    def workspace_changes(self, ops: list[tuple[str, int, float]]) -> None:
        self.call(self._ops(ops))

    @rule(ops=WS_OPS)
    def close_and_reopen(self, ops: list[tuple[str, int, float]]) -> None:
        self.call(self._ops([(kind, n, 0.0) for kind, n, _ in ops]))
        self.writer = None  # ended with the sandbox
        self.call(self.ws.close())
        self.ws = self.call(self._open())
        stats["reopens"] += 1
        self.call(self._check())

    @rule()
    def settle_and_check(self) -> None:
        self.call(self._check())

    async def _check(self) -> None:
        if self.writer is not None:
            await self.ws.fs.write_file(f"{ROOT}/stop", "")
            assert await self._quiet(30), "the writer did not stop"
            self.writer = None
        # A writer's last round is pulled by its sandbox's run (a tick's pull may still be to come).
        await ok(self.ws, "pass", backend="python")
        settled = await ok(self.ws, "true")
        assert not [p for p in settled.skipped if p.startswith(f"{ROOT}/r/n/")], settled.skipped_reasons
        await ok(self.ws, VIEW)
        sandbox = {}
        for line in (await self.ws.fs.read_text(f"{ROOT}/.view")).splitlines():
            checksum, name = line.split("  ", 1)
            sandbox[name[2:]] = checksum
        await self.ws.fs.rm(f"{ROOT}/.view")
        files = {p[len(ROOT) + 1 :]: await self.ws.fs.read_file(p) for p in await self.ws.fs.ls(ROOT)}
        assert sandbox == {p: hashlib.sha256(c).hexdigest() for p, c in files.items()}, "the views differ"
        own = {p[2:]: c for p, c in files.items() if p.startswith("r/n/")}
        assert own == self.own, "the workspace's own files differ from the model"
        back = [p for p in self.gone if f"r/{p}" in files]
        assert not back, f"removed by the workspace, back again: {back}"
        if "r/cfg" in files:
            assert CFG.fullmatch(files["r/cfg"].decode()), f"a torn config: {files['r/cfg']!r}"
        order: dict[str, int] = {}
        for line in files.get("r/log", b"").decode().splitlines():
            match = LOG.fullmatch(line)
            assert match, f"a torn log line: {line!r}"
            if match.group(1) != "ws":
                assert order.get(match.group(1), -1) < int(match.group(2)), "a writer's lines go back"
                order[match.group(1)] = int(match.group(2))
        checked = await ok(
            self.ws,
            "sqlite3 t.db 'pragma integrity_check; select count(*) = count(distinct who || char(45) || i) from t' && "
            "cd r && git fsck --full --no-dangling 2>&1 && git log --oneline | wc -l",
        )
        assert checked.stdout.splitlines()[:2] == ["ok", "1"], checked.stdout
        assert len(checked.stdout.splitlines()) == 3, f"git fsck: {checked.stdout}"

    def teardown(self) -> None:
        try:
            self.call(self._check())
            self.call(self.ws.close())
            self.ws = self.call(self._open())
            self.call(self._check())  # after a reopen with a fresh backend
        finally:
            try:
                self.call(self.ws.close())
            finally:
                self.loop.close()
                shutil.rmtree(self.dir, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_live_sync_with_real_programs_in_the_background(record_property: Any) -> None:
    """Run the machine (derandomized, bounded, no shrinking) and check it exercised every rule."""
    for key in stats:
        stats[key] = 0
    bounded = settings(max_examples=10, stateful_step_count=10, phases=[Phase.explicit, Phase.generate])
    runner = settings(
        bounded, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
    )
    runner(LiveProgramsMachine).TestCase().runTest()
    for key, value in stats.items():
        record_property(key, value)
    assert all(stats.values()), stats
