"""Stateful property: what ``find -printf`` shows inside the sandbox is the workspace's view.

Steps: a program's writes, renames, removals, ``chmod``s, ``touch``es, hard links and symlinks (each
its own exec call),
workspace writes (with a mode), renames and removals, and a close and reopen with fresh backends (the
mirror rebuilt from the SQLite file). Invariant after every step: the listing of the tree below
``/workspace`` inside the sandbox (kind, permission bits, size and sha256 of files, mtime) equals the
workspace's (``readdir`` + ``stat`` + ``read_file`` + ``readlink``), files' mtimes compared to the millisecond (SPEC section
3). Per call (``ShellBackend(live=False)``) and in a live sandbox.

Decisions:
- Files only ever at file names (``a``, ``b``, ``d/c``, ``d/e``), ``d`` only a directory (made by the
  first program): every step is valid on every state, so no model is needed, only the two views.
- Directories' own mtimes are left out: by decision (computer/runtime/README.md, "Fidelity decisions")
  a workspace write never moves its directory's time while the mirror's ``d`` keeps the newer time the
  push's write gave it, so the two differ until a reopen (``test_dir_mtimes.py`` covers their round
  trips). Their modes are compared.
- Links point at names of the tree (never at their own name: ``ln -sfn`` refuses it; two may point at
  each other, and a workspace write through them is then ``ELOOP``), absolute or relative, or nowhere: never out of the mount (a link to
  ``/etc/hostname`` is a read-only file in the sandbox and a missing ``/etc`` in the workspace, so a
  ``chmod`` or a workspace write through it fails, as it should, on one side).
- A file's modes include ``000`` and ``444`` (a program's and the workspace's writes still go through:
  the sync's process is not held by a file's own bits); ``d``'s modes keep its owner's ``rwx``, so
  later programs can still write below it.
"""

from __future__ import annotations

import errno
import hashlib
import posixpath
from typing import TypeVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

import computer
from computer.runtime import ShellBackend
from computer.runtime._live_census import LiveCensus

from ._support import ROOT, Large, WorkspaceMachine, machine_runner, ok

T = TypeVar("T")

FILES = ["a", "b", "d/c", "d/e"]
FILE_MODES = [0o644, 0o600, 0o755, 0o444, 0o000, 0o1644]
DIR_MODES = [0o755, 0o700, 0o750, 0o1777]
CONTENT = st.sampled_from([b"", b"x", b"hello\n", Large(b"y" * 70_000)])
# Times a program gives with ``touch -d @s.ns``: whole seconds, ms and sub-ms fractions, the epoch.
TIMES = st.sampled_from(["0", "1000000000.5", "1700000000.123456789", "1800000000.000999999"])

# Every entry below /workspace: kind, octal mode, size, mtime (s.ns), relative path; then the sha256 of
# each file the program's user may read (its owner: mode 000 is not).
LISTING = (
    "cd /workspace && find . -mindepth 1 -printf '%y %m %s %T@ %P %l\\n' | sort -k5 && echo -- && "
    "find . -type f -readable -print0 | sort -z | xargs -0r sha256sum"
)

stats = {"runs": 0, "workspace": 0, "reopens": 0}


def _ms(stamp: str) -> int:
    """``find``'s ``%T@`` (seconds, a dot, up to 10 fraction digits) in whole milliseconds."""
    whole, _, fraction = stamp.partition(".")
    return int(whole) * 1000 + int((fraction + "000")[:3])


class ListingMachine(WorkspaceMachine):
    prefix = "fid-lm-"
    live = False

    def __init__(self) -> None:
        super().__init__()
        self.ws: computer.Workspace = self.call(self._open())
        self.call(ok(self.ws, "mkdir -p d && printf a > a"))

    async def _open(self) -> computer.Workspace:
        shell = ShellBackend(live=self.live)
        if self.live and not shell.live:
            pytest.skip("no cgroup freezer here")
        ws = computer.Workspace(self.db, backends=[shell])
        if not await ws.fs.exists(ROOT):
            await ws.fs.mkdir(ROOT)
        return ws

    def program(self, source: str) -> None:
        stats["runs"] += 1
        result = self.call(ok(self.ws, source))
        assert result.skipped == [], result.skipped_reasons

    # ------------------------------------------------------------------ a program's steps

    @rule(path=st.sampled_from(FILES), content=CONTENT, append=st.booleans())
    def program_writes(self, path: str, content: bytes, append: bool) -> None:
        size = len(content)
        head = f"head -c {size} /dev/zero | tr '\\0' y" if size > 100 else f"printf %s '{content.decode()}'"
        # A file with mode 000 or 444 is replaced (the program's user cannot open it for writing).
        self.program(f"[ -w {path} ] || rm -f {path}; {head} {'>>' if append else '>'} {path}")

    @rule(src=st.sampled_from(FILES), dst=st.sampled_from(FILES))
    def program_renames(self, src: str, dst: str) -> None:
        if src != dst:
            # Not when both names are one file (``program_hard_links``): GNU mv refuses ("are the same
            # file", exit 1) on a local disk too; ``stat`` without ``-L`` looks at the names themselves.
            same = f'[ "$(stat -c %d:%i {src})" = "$(stat -c %d:%i {dst} 2>/dev/null)" ]'
            self.program(f"if [ -e {src} ] && ! {same}; then mv -f {src} {dst}; fi")

    @rule(path=st.sampled_from(FILES))
    def program_removes(self, path: str) -> None:
        self.program(f"rm -f {path}")

    @rule(path=st.sampled_from(FILES), mode=st.sampled_from(FILE_MODES))
    def program_chmods_a_file(self, path: str, mode: int) -> None:
        self.program(f"if [ -e {path} ]; then chmod {mode:o} {path}; fi")

    @rule(mode=st.sampled_from(DIR_MODES))
    def program_chmods_the_directory(self, mode: int) -> None:
        self.program(f"chmod {mode:o} d")

    @rule(path=st.sampled_from(FILES), stamp=TIMES)
    def program_touches(self, path: str, stamp: str) -> None:
        self.program(f"if [ -e {path} ]; then touch -d @{stamp} {path}; fi")

    @rule(src=st.sampled_from(FILES), dst=st.sampled_from(FILES))
    def program_hard_links(self, src: str, dst: str) -> None:
        if src != dst:
            self.program(f"if [ -f {src} ] && [ ! -L {src} ]; then ln -f {src} {dst}; fi")

    @rule(path=st.sampled_from(FILES), points=st.sampled_from(["a", "../b", "nowhere", "/workspace/a"]))
    def program_symlinks(self, path: str, points: str) -> None:
        if posixpath.normpath(posixpath.join(ROOT, posixpath.dirname(path), points)) != f"{ROOT}/{path}":
            self.program(f"ln -sfn {points} {path}")

    @rule(umask=st.sampled_from(["077", "022", "002"]), path=st.sampled_from(FILES))
    def program_makes_under_a_umask(self, umask: str, path: str) -> None:
        self.program(f"umask {umask}; rm -f {path}; echo u > {path}")

    # ------------------------------------------------------------------ the workspace's steps

    @rule(path=st.sampled_from(FILES), content=CONTENT, mode=st.sampled_from([None, *FILE_MODES]))
    def workspace_writes(self, path: str, content: bytes, mode: int | None) -> None:
        stats["workspace"] += 1
        try:
            self.call(self.ws.fs.write_file(f"{ROOT}/{path}", content, mode=mode))
        except OSError as error:  # through two links that point at each other (b -> d/e -> b)
            assert error.errno == errno.ELOOP, error

    @rule(src=st.sampled_from(FILES), dst=st.sampled_from(FILES))
    def workspace_renames(self, src: str, dst: str) -> None:
        async def step() -> None:
            if src != dst and await self.ws.fs.exists(f"{ROOT}/{src}"):
                await self.ws.fs.rename(f"{ROOT}/{src}", f"{ROOT}/{dst}", overwrite=True)

        stats["workspace"] += 1
        self.call(step())

    @rule(path=st.sampled_from(FILES))
    def workspace_removes(self, path: str) -> None:
        stats["workspace"] += 1
        self.call(self.ws.fs.rm(f"{ROOT}/{path}", force=True))

    @rule()
    def close_and_reopen(self) -> None:
        stats["reopens"] += 1
        self.call(self.ws.close())
        self.ws = self.call(self._open())

    # ------------------------------------------------------------------ the invariant

    async def _workspace_view(self) -> dict[str, tuple[str, ...]]:
        view: dict[str, tuple[str, ...]] = {}

        async def walk(directory: str, prefix: str) -> None:
            for entry in await self.ws.fs.readdir(directory):
                path = f"{directory}/{entry.name}"
                if entry.is_symlink:
                    target = await self.ws.fs.readlink(path)
                    view[prefix + entry.name] = ("l", "777", str(len(target.encode())), "-", target)
                    continue
                info = await self.ws.fs.stat(path)
                kind = "d" if info.is_directory else "f"
                size = str(info.size) if info.is_file else "-"
                when = str(info.mtime) if info.is_file else "-"
                row = (kind, f"{info.mode & 0o7777:o}", size, when)
                if info.is_file and info.mode & 0o400:
                    row += (hashlib.sha256(await self.ws.fs.read_file(path)).hexdigest(),)
                view[prefix + entry.name] = row
                if info.is_directory:
                    await walk(path, f"{prefix}{entry.name}/")

        await walk(ROOT, "")
        return view

    async def _sandbox_view(self) -> dict[str, tuple[str, ...]]:
        result = await ok(self.ws, LISTING)
        rows, _, sums = result.stdout.partition("--\n")
        view: dict[str, tuple[str, ...]] = {}
        for line in rows.splitlines():
            kind, mode, size, stamp, rest = line.split(" ", 4)
            path, _, target = rest.partition(" ")
            file = kind == "f"
            view[path] = (kind, mode, size if kind != "d" else "-", str(_ms(stamp)) if file else "-")
            if kind == "l":
                view[path] += (target,)
        for line in sums.splitlines():
            checksum, path = line.split("  ", 1)
            view[path[2:]] += (checksum,)
        return view

    @invariant()
    def the_sandbox_lists_what_the_workspace_holds(self) -> None:
        # The workspace's view before and after the listing run: the run may change a file's time
        # alone, to a later one (a live sandbox's delivery time, ``runtime/_deliver.py``: its start's
        # push gives a file the workspace wrote the time the sandbox was given it, in the mirror and in
        # the store; whether it does depends on whether a process, the run's shell started ahead among
        # them, counted as running then, which a loaded machine decides: CI saw it once). Nothing else.
        before = self.call(self._workspace_view())
        seen = self.call(self._sandbox_view())
        expected = self.call(self._workspace_view())
        assert before.keys() == expected.keys()
        for path, row in before.items():
            now = expected[path]
            if row != now:  # a file's time alone, moved on
                assert row[0] == "f" and row[:3] == now[:3] and row[4:] == now[4:], (path, row, now)
                assert int(now[3]) > int(row[3]), (path, row, now)
        differing = {p for p in {*seen, *expected} if seen.get(p) != expected.get(p)}
        assert seen == expected, {p: (seen.get(p), expected.get(p)) for p in sorted(differing)}


class LiveListingMachine(ListingMachine):
    live = True


class StirringListingMachine(LiveListingMachine):
    """Live, a process of the sandbox always counted as running (``stirring``): every push of a file
    the workspace wrote gives it its delivery time (``_deliver``), which a loaded machine gives now
    and then (CI, once: a time 4 ms on in the sandbox, the invariant read the workspace's first)."""


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize(
    "machine",
    [ListingMachine, LiveListingMachine, StirringListingMachine],
    ids=["per-call", "live", "live-stirring"],
)
def test_the_sandbox_listing_equals_the_workspace(
    machine: type[ListingMachine], monkeypatch: pytest.MonkeyPatch
) -> None:
    if machine is StirringListingMachine:
        monkeypatch.setattr(LiveCensus, "stirring", lambda self: True)
    for key in stats:
        stats[key] = 0
    machine_runner(machine, 4, 14).TestCase().runTest()
    assert all(stats.values()), stats
