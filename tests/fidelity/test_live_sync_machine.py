"""Stateful property of a live sandbox's continuous two-way sync (``computer.runtime._live``).

One live sandbox, one background program in it that runs the commands the workspace hands it (files
``ctl/cmd-N``, pushed by the ticks; ``ctl/done-N`` pulled back when done), so every change of either
side travels by the ticks alone, never by a run's own push or pull. Random sequences of:

- the workspace writes a file of ``d/`` with a mode and a time (``write_file``: ms), or as another
  mirror's pull does (``commit_batch`` with a time finer than the ms, ``sub_ns``), removes it, or
  renames it to another name of ``d/``;
- the program writes a file of ``d/`` whole (made in ``ctl/`` with its mode and a time to the ns, then
  renamed into place) or removes it, without waiting for it to be done;
- the program writes a file past the workspace's quota (``max_bytes``): a tick's pull commits it
  alone and refuses it (the per-file fallback);
- a moment: the event loop turns between two steps (the ticks run only while a step awaits);
- quiescence: every command done, then both sides agree.

Invariant at quiescence: the workspace and the sandbox (its own listing, by the program) hold the same
files of ``d/`` with the same content, mode and time to the ns, and nothing is lost by the sync's
conflict rules: a path only one side changed since the last quiescence holds that side's last
version; one both changed holds one of the two sides' last versions (the workspace's wins a meeting
within one interval); the file past the quota is on neither side, or the same part of it on both (a
tick may pull it while the program writes it, from the empty file the shell's ``>`` makes on, and
the refused write gets the sandbox that part back: ``_pull_commit._left``).

Bounded: few examples and steps, no shrinking, derandomized (``machine_runner``)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

import computer
from computer.runtime import ShellBackend

from ._support import ROOT, WorkspaceMachine, machine_runner, ok

RAN: Counter[str] = Counter()
NAMES = st.sampled_from(["a", "b", "c"])
MODES = st.sampled_from([0o644, 0o600, 0o755])
SECONDS = st.integers(1_500_000_000, 1_500_000_009)
NS = st.sampled_from([0, 1, 999_999, 1_000_000, 123_456_789, 999_999_999])
LIMIT = 256 * 1024
BIG = 300_000  # past the quota alone

# A version of a file: (content, mode, time in ns), or None: no file.
Version = tuple[str, int, int] | None

PROCESSOR = (
    'mkdir -p d ctl; (while [ ! -e ctl/stop ]; do for c in ctl/cmd-*; do [ -e "$c" ] || continue;'
    ' n=${c#ctl/cmd-}; bash "$c" >/dev/null 2>&1; rm -f "$c"; : > ctl/done-$n; done; sleep 0.02; done)'
    " >/dev/null 2>&1 &"
)
LISTING = (
    '(cd d && for f in *; do [ -e "$f" ] || continue;'
    ' printf "%s %s %s\\n" "$f" "$(stat -c "%a %.9Y %s" "$f")" "$(head -c 64 "$f")"; done) > ctl/list.tmp'
)


class LiveSyncMachine(WorkspaceMachine):
    prefix = "fid-livesync-"

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.token = 0
        self.agreed: dict[str, Version] = {}  # as of the last quiescence
        self.ws_last: dict[str, Version] = {}  # each side's last version since then
        self.box_last: dict[str, Version] = {}
        self.ws = self.call(self._open())

    async def _open(self) -> computer.Workspace:
        ws = computer.Workspace(
            str(self.dir / "ws.sqlite"), backends=[ShellBackend(live=True)], max_bytes=LIMIT
        )
        await ws.__aenter__()
        await ws.fs.mkdir(f"{ROOT}/d", recursive=True)
        await ok(ws, PROCESSOR)
        return ws

    def content(self) -> str:
        self.token += 1
        return f"v{self.token}"

    async def _command(self, script: str) -> int:
        """Hand the program ``script``; its number (``ctl/done-N`` once run)."""
        self.n += 1
        await self.ws.fs.write_file(f"{ROOT}/ctl/cmd-{self.n:04d}", script)
        return self.n

    # ------------------------------------------------------------------ rules

    @rule(name=NAMES, mode=MODES, seconds=SECONDS, ns=NS, fine=st.booleans())
    def the_workspace_writes(self, name: str, mode: int, seconds: int, ns: int, fine: bool) -> None:
        """``fine``: as another mirror's pull (``commit_batch``, the ns past the ms kept)."""
        RAN["ws-fine" if fine else "ws-write"] += 1
        text, path = self.content(), f"{ROOT}/d/{name}"
        ms, sub = seconds * 1000 + ns // 1_000_000, ns % 1_000_000 if fine else 0
        fs = self.ws.fs
        if fine:
            fs.commit_batch({path: text.encode()}, modes={path: mode}, mtimes={path: ms}, sub_ns={path: sub})
        else:
            self.call(fs.write_file(path, text, mode=mode, mtime=ms))
        self.ws_last[name] = (text, mode, ms * 1_000_000 + sub)

    @rule(name=NAMES)
    def the_workspace_removes(self, name: str) -> None:
        RAN["ws-rm"] += 1
        path = f"{ROOT}/d/{name}"
        if self.call(self.ws.fs.exists(path)):
            self.call(self.ws.fs.rm(path))
            self.ws_last[name] = None

    @rule(name=NAMES, to=NAMES)
    def the_workspace_renames(self, name: str, to: str) -> None:
        """A rename the mirror follows (``_moves``): the file it held goes to the new name."""
        RAN["ws-mv"] += 1
        src, dst = f"{ROOT}/d/{name}", f"{ROOT}/d/{to}"
        if name == to or not self.call(self.ws.fs.exists(src)):
            return
        had = self.call(self._workspace()).get(name)
        if self.call(self.ws.fs.exists(dst)):  # (``fs.rename`` refuses an existing destination)
            self.call(self.ws.fs.rm(dst))
        self.call(self.ws.fs.rename(src, dst))
        self.ws_last[name], self.ws_last[to] = None, had

    @rule(name=NAMES, mode=MODES, seconds=SECONDS, ns=NS)
    def the_program_writes(self, name: str, mode: int, seconds: int, ns: int) -> None:
        RAN["box-write"] += 1
        text, tmp = self.content(), f"ctl/w{self.token}"
        self.call(
            self._command(
                f"printf %s {text} > {tmp} && chmod {mode:o} {tmp} && touch -d @{seconds}.{ns:09d} {tmp}"
                f" && mv {tmp} d/{name}"
            )
        )
        self.box_last[name] = (text, mode, seconds * 1_000_000_000 + ns)

    @rule(name=NAMES)
    def the_program_removes(self, name: str) -> None:
        RAN["box-rm"] += 1
        self.call(self._command(f"rm -f d/{name}"))
        self.box_last[name] = None

    @rule()
    def the_program_writes_past_the_quota(self) -> None:
        RAN["box-big"] += 1
        self.call(self._command(f"head -c {BIG} /dev/zero | tr '\\0' z > d/big"))

    @rule(seconds=st.sampled_from([0.03, 0.1, 0.2]))
    def a_moment(self, seconds: float) -> None:
        """The event loop turns (ticks sync) between steps: the other steps come within microseconds,
        so without it two sides' changes meet within one interval only by chance."""
        RAN["moment"] += 1
        self.call(asyncio.sleep(seconds))

    @rule()
    def quiescence(self) -> None:
        RAN["quiet"] += 1
        self.call(self._agree())

    # ------------------------------------------------------------------ checks

    async def _done(self, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        while self.n and not await self.ws.fs.exists(f"{ROOT}/ctl/done-{self.n:04d}"):
            assert time.monotonic() < deadline, f"command {self.n} not done"
            await asyncio.sleep(0.05)

    async def _workspace(self) -> dict[str, Version]:
        seen: dict[str, Version] = {}
        for path in await self.ws.fs.ls(f"{ROOT}/d"):
            name = path.rsplit("/", 1)[-1]
            stat = await self.ws.fs.stat(path)
            data = await self.ws.fs.read_file(path)
            text = data[:64].decode() + (f"<{len(data)}>" if len(data) > 64 else "")
            seen[name] = (text, stat.mode & 0o7777, stat.mtime * 1_000_000 + stat.sub_ns)
        return seen

    async def _sandbox(self) -> dict[str, Version]:
        await self._command(f"{LISTING} && mv ctl/list.tmp ctl/list-{self.n + 1:04d}")
        await self._done()
        listing = await self.ws.fs.read_text(f"{ROOT}/ctl/list-{self.n:04d}")
        seen: dict[str, Version] = {}
        for line in listing.splitlines():
            name, mode, when, size, *rest = line.split(" ")
            text = " ".join(rest)
            whole, _, frac = when.partition(".")
            text += f"<{size}>" if int(size) > 64 else ""
            seen[name] = (text, int(mode, 8), int(whole) * 10**9 + int(frac))
        return seen

    async def _agree(self) -> None:
        await self._done()
        deadline = time.monotonic() + 20.0
        while True:  # both sides agree once the ticks caught up (bounded)
            await asyncio.sleep(0.3)
            workspace, sandbox = await self._workspace(), await self._sandbox()
            if workspace == sandbox:
                break
            assert time.monotonic() < deadline, (workspace, sandbox)
        # Past the quota: on neither side, or as a part a tick pulled while the program wrote it (from
        # the empty file ``>`` made on), which the refused write gets the sandbox back.
        big = workspace.get("big")
        assert big is None or set(big[0].partition("<")[0]) <= {"z"}, workspace
        for name in ("a", "b", "c"):
            now = workspace.get(name)
            if name in self.ws_last and name in self.box_last:
                allowed = [self.ws_last[name], self.box_last[name]]
            elif name in self.ws_last:
                allowed = [self.ws_last[name]]
            elif name in self.box_last:
                allowed = [self.box_last[name]]
            else:
                allowed = [self.agreed.get(name)]
            assert now in allowed, (name, now, allowed)
        self.agreed = {n: v for n, v in workspace.items() if n != "big"}
        self.ws_last, self.box_last = {}, {}

    def finish(self) -> None:
        self.call(self._agree())
        self.call(self.ws.fs.write_file(f"{ROOT}/ctl/stop", ""))


@pytest.mark.timeout(900)
def test_a_live_sandboxs_two_way_sync_state_machine() -> None:
    if not ShellBackend(live=True).live:
        pytest.skip("no cgroup freezer here")
    runner = machine_runner(LiveSyncMachine, 6, 16)
    RAN.clear()
    runner.TestCase().runTest()
    assert len(RAN) == 9, RAN  # every rule ran
