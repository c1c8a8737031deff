"""Stateful property: the sandbox keeps a file's identity through workspace renames, as any machine does.

Random sequences of workspace writes, deletes, hard links, file renames (onto existing names too,
into directories not there yet) and directory renames, and of runs that write in place, replace by
tmp-and-rename, hard-link (``ln -f``), rename files and directories (``mv``) and delete; contents
small or over 1 MiB (synced as chunks); close and reopen. After every step one run lists every file's inode and content. The model is
``path -> identity`` and ``identity -> bytes``: an in-place write (a program's or the workspace's)
changes the file every name of that identity shows, a replacement makes a new identity for its name
alone, a link gives an identity one more name, a workspace rename carries it.

Invariants after every step:
- the run's view equals the workspace (``ws.fs``) equals the model;
- names of one identity are one file, names of two are two, in the sandbox (inodes) and in the
  workspace (``stat().ino``);
- a file whose identity the sandbox was seen holding has the same inode now: a workspace rename
  (of it or of a directory above it) moved the file and a workspace write wrote into it, neither made
  a copy (before: both made a new file, so a program holding it open wrote into a removed one);
- likewise in the workspace (``stat().ino``, across reopens too), a run's directory rename too (a pull
  sends it as a rename, ``_pull_moves``: every file below keeps its node), except after a run's rename
  of a file, link or write into a file of several names: a pull carries no file renames and writes a
  changed file of several names as a new file with its other names linked to it, so the workspace gets
  the new name's content and the old name's removal (decision: the bytes are cheap, a large file's
  travel as chunks the store holds; which name is unchanged is not trusted to an mtime a program can
  set back; what a user sees is the same but ``ino``).

Decisions: file names never double as directory names; a reopen forgets what inodes were seen (a
fresh backend rebuilds the mirror); both sandbox kinds (a sandbox per run and a live sandbox);
derandomized, few examples, no shrinking (each step costs real sandboxed runs; ``COMPUTER_HYPOTHESIS_SEED``
runs it randomized: README.md).
"""

from __future__ import annotations

import itertools
import posixpath
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

import computer
from computer.runtime import ShellBackend

from ._support import ROOT, Large, WorkspaceMachine, digest, machine_runner, ok, workspace_view

FILES = st.sampled_from(["a", "b", "d/c", "d/e", "f/g/h", "m/c"])
# Directory renames (old, new): taken only when the old one holds a file and the new one is not there.
DIR_MOVES = [("d", "m"), ("m", "d"), ("f/g", "m/g"), ("m/g", "f/g"), ("f", "k"), ("k", "f")]
SMALL = st.binary(min_size=0, max_size=16)
LARGE = st.sampled_from([Large(b"L" * 1_100_000), Large(b"M" * 1_600_000)])
CONTENT = st.one_of(SMALL, SMALL, LARGE)
# A directory rename of ``DIR_MOVES`` is drawn only when some old one holds a file.
DIR_MOVABLE = precondition(lambda self: any(p.startswith(o + "/") for o, _ in DIR_MOVES for p in self.model))
stats = {
    "renames": 0,
    "dir_renames": 0,
    "run_renames": 0,
    "run_dir_renames": 0,
    "claims": 0,
    "reopens": 0,
    "links": 0,
    "shared": 0,
}


def _q(path: str) -> str:
    return "'" + path + "'"


class RenameMachine(WorkspaceMachine):
    prefix = "fid-rm-"
    live = False

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, int] = {}  # path -> identity
        self.content: dict[int, bytes] = {}  # identity -> bytes (every name of it shows them)
        self.ids = itertools.count()
        self.seen: dict[int, str] = {}  # identity -> the inode the sandbox held it as
        self.stored: dict[int, int] = {}  # identity -> the inode the workspace holds it as (kept on reopen)
        self.ws = self.call(self._open())

    async def _open(self) -> computer.Workspace:
        ws = computer.Workspace(self.db, backends=[ShellBackend(live=self.live)])
        if not await ws.fs.exists(ROOT):
            await ws.fs.mkdir(ROOT)
        return ws

    def _run(self, source: str, content: bytes = b"") -> None:
        result = self.call(
            ok(self.ws, source, stdin=bytes(content))
        )  # plain bytes: a client pickles it for Ray
        assert result.skipped == [], result.skipped

    # ------------------------------------------------------------------ runs

    @rule(path=FILES, content=CONTENT)
    def run_writes_in_place(self, path: str, content: bytes) -> None:
        self._run(f"mkdir -p {_q(posixpath.dirname(path) or '.')} && cat > {_q(path)}", content)
        self._write(path, content)
        if list(self.model.values()).count(self.model[path]) > 1:
            self.stored.pop(self.model[path], None)  # a file of several names: new in the workspace

    def _write(self, path: str, content: bytes) -> None:
        """A write into the file at ``path`` (every name of it shows it), or a new file."""
        identity = self.model.setdefault(path, next(self.ids))
        self.content[identity] = content

    @rule(path=FILES, content=CONTENT)
    def run_replaces(self, path: str, content: bytes) -> None:
        self._run(
            f"mkdir -p {_q(posixpath.dirname(path) or '.')} && cat > .tmp && mv -f .tmp {_q(path)}", content
        )
        self.model[path] = identity = next(self.ids)
        self.content[identity] = content

    @precondition(lambda self: self.model)
    @rule(data=st.data(), other=FILES)
    def run_links(self, data: st.DataObject, other: str) -> None:
        path = data.draw(st.sampled_from(sorted(self.model)))
        if path == other:
            return
        self._run(f"mkdir -p {_q(posixpath.dirname(other) or '.')} && ln -f {_q(path)} {_q(other)}")
        self.model[other] = self.model[path]
        self.stored.pop(self.model[path], None)  # may be a new file in the workspace (module doc)
        stats["links"] += 1

    @precondition(lambda self: self.model)
    @rule(data=st.data(), other=FILES)
    def run_renames_a_file(self, data: st.DataObject, other: str) -> None:
        path = data.draw(st.sampled_from(sorted(self.model)))
        if self.model.get(other) == self.model[path]:
            return  # the same file (or two names of it): mv's own rules, not rename(2)'s
        self._run(f"mkdir -p {_q(posixpath.dirname(other) or '.')} && mv -f {_q(path)} {_q(other)}")
        self.model[other] = self.model.pop(path)
        self.stored.pop(self.model[other], None)  # a new file in the workspace (see the module's doc)
        stats["run_renames"] += 1

    def _dir_move(self, data: st.DataObject) -> tuple[str, str] | None:
        """A directory rename of ``DIR_MOVES`` whose old one holds a file, None when the new one is there."""
        possible = [(old, new) for old, new in DIR_MOVES if any(p.startswith(old + "/") for p in self.model)]
        old, new = data.draw(st.sampled_from(possible))
        return None if self.call(self.ws.fs.exists(f"{ROOT}/{new}")) else (old, new)

    def _moved(self, old: str, new: str) -> list[int]:
        """The model after ``old`` was renamed ``new``: the identities it moved."""
        moved = []
        for path in [p for p in self.model if p.startswith(old + "/")]:
            moved.append(identity := self.model.pop(path))
            self.model[new + path[len(old) :]] = identity
        return moved

    @DIR_MOVABLE
    @rule(data=st.data())
    def run_renames_a_directory(self, data: st.DataObject) -> None:
        if (move := self._dir_move(data)) is None:
            return
        old, new = move
        self._run(f"mkdir -p {_q(posixpath.dirname(new) or '.')} && mv {_q(old)} {_q(new)}")
        self._moved(old, new)  # one rename in the workspace too: each file keeps its node (``stored``)
        stats["run_renames"] += 1
        stats["run_dir_renames"] += 1

    @rule(path=FILES)
    def run_deletes(self, path: str) -> None:
        self._run(f"rm -f {_q(path)}")
        self.model.pop(path, None)

    # ------------------------------------------------------------------ workspace

    @rule(path=FILES, content=CONTENT)
    def workspace_writes(self, path: str, content: bytes) -> None:
        async def step() -> None:
            await self.ws.fs.mkdir(f"{ROOT}/{posixpath.dirname(path)}".rstrip("/"), recursive=True)
            await self.ws.fs.write_file(f"{ROOT}/{path}", bytes(content))

        self.call(step())
        self._write(path, content)  # into the file there (in place, as on any machine)

    def _onto(self, data: st.DataObject, other: str, kind: str) -> str | None:
        """A file of the model (not ``other``) given the name ``other`` by the workspace: renamed
        (``kind`` "rename") or linked, ``other``'s parents made first; None when drawn onto itself."""
        path = data.draw(st.sampled_from(sorted(self.model)))
        if path == other:
            return None
        fs, source, target = self.ws.fs, f"{ROOT}/{path}", f"{ROOT}/{other}"

        async def step() -> None:
            await fs.mkdir(f"{ROOT}/{posixpath.dirname(other)}".rstrip("/"), recursive=True)
            if kind == "rename":
                await fs.rename(source, target, overwrite=True)
            else:
                await fs.rm(target, force=True)
                await fs.link(source, target)

        self.call(step())
        return path

    @precondition(lambda self: self.model)
    @rule(data=st.data(), other=FILES)
    def workspace_links(self, data: st.DataObject, other: str) -> None:
        path = self._onto(data, other, "link")
        if path is not None:
            self.model[other] = self.model[path]
            stats["links"] += 1

    @rule(path=FILES)
    def workspace_deletes(self, path: str) -> None:
        self.call(self.ws.fs.rm(f"{ROOT}/{path}", force=True))
        self.model.pop(path, None)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), other=FILES)
    def workspace_renames_a_file(self, data: st.DataObject, other: str) -> None:
        path = self._onto(data, other, "rename")
        if path is None or self.model.get(other) == self.model[path]:
            return  # two names of one file: rename(2) does nothing, the store neither
        self.model[other] = self.model.pop(path)
        stats["renames"] += 1

    @DIR_MOVABLE
    @rule(data=st.data())
    def workspace_renames_a_directory(self, data: st.DataObject) -> None:
        if (move := self._dir_move(data)) is None:
            return
        old, new = move

        async def step() -> None:
            await self.ws.fs.mkdir(f"{ROOT}/{posixpath.dirname(new)}".rstrip("/"), recursive=True)
            await self.ws.fs.rename(f"{ROOT}/{old}", f"{ROOT}/{new}")

        self.call(step())
        self._moved(old, new)
        stats["dir_renames"] += 1

    @rule(dice=st.integers(0, 3))
    def close_and_reopen(self, dice: int) -> None:
        if dice != 3:  # a rule without arguments is drawn far more often than the others
            return
        self.call(self.ws.close())
        self._restart()
        self.ws = self.call(self._open())
        self.seen.clear()
        stats["reopens"] += 1

    def _restart(self) -> None:
        """Between a close and the reopen: nothing here (closing an embedded workspace ends it)."""

    # ------------------------------------------------------------------ invariants

    @invariant()
    def files_keep_their_identity_and_every_view_equals_the_model(self) -> None:
        listed = self.call(
            ok(
                self.ws,
                "find . -type f -printf '%i %P\\n' | sort -k2; find . -type f -print0 | xargs -0r sha256sum",
            )
        )
        lines = listed.stdout.splitlines()
        inodes = {name: inode for inode, name in (line.split(" ", 1) for line in lines if "  " not in line)}
        sums = {
            f"{ROOT}/{name[2:]}": checksum
            for checksum, name in (line.split("  ", 1) for line in lines if "  " in line)
        }
        expected = {f"{ROOT}/{path}": digest(self.content[identity]) for path, identity in self.model.items()}
        assert self.call(workspace_view(self.ws)) == expected, "the workspace lost or kept a change"
        assert sums == expected, "the run's view differs from the workspace"
        in_workspace = {path: self.call(self.ws.fs.stat(f"{ROOT}/{path}")).ino for path in self.model}
        for view, where in ((inodes, "sandbox"), (in_workspace, "workspace")):
            files: dict[Any, int] = {}
            for path, identity in sorted(self.model.items()):
                file = view[path]
                assert files.setdefault(file, identity) == identity, (
                    f"{path} shares a file it should not ({where})"
                )
            assert len(files) == len(set(self.model.values())), f"names of one file are apart ({where})"
        stats["shared"] += len(self.model) - len(set(self.model.values()))
        for path, identity in self.model.items():
            if identity in self.seen:
                stats["claims"] += 1
                assert inodes[path] == self.seen[identity], f"{path} is a new file: a rename made a copy"
            self.seen[identity] = inodes[path]
            ino = in_workspace[path]
            assert self.stored.setdefault(identity, ino) == ino, f"{path} is a new file in the workspace"


class LiveRenameMachine(RenameMachine):
    live = True


def exercise(machine: type[RenameMachine], record_property: Any) -> None:
    """Run ``machine`` (15 examples of 20 steps, derandomized unless ``COMPUTER_HYPOTHESIS_SEED``); its
    counts go in ``record_property``."""
    for key in stats:
        stats[key] = 0
    machine_runner(machine, 15, 20).TestCase().runTest()
    for key, value in stats.items():
        record_property(f"{machine.__name__}_{key}", value)
    print(machine.__name__, stats)
    # It renamed in the workspace and in runs, linked, reopened and checked what it claims (which
    # rules the derandomized draws favour moves with the file's source: no one rule is required).
    renamed = stats["renames"] + stats["dir_renames"]
    assert renamed and stats["run_renames"] and stats["links"] and stats["reopens"] and stats["claims"], stats


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_sandbox_per_run_keeps_files_through_workspace_renames(record_property: Any) -> None:
    exercise(RenameMachine, record_property)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")
def test_a_live_sandbox_keeps_files_through_workspace_renames(record_property: Any) -> None:
    exercise(LiveRenameMachine, record_property)
