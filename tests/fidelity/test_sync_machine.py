"""Stateful property of the shell sync bracket (issue 16, "Correct sync under concurrency").

Random interleavings of shell runs that create, modify, delete and rename files and directories;
workspace writes, renames and deletes made *while a run is in flight*; two concurrent runs of one
workspace; eviction of the workspace's mirror (a mirror pool keeping one workspace, taken over by
another workspace's run); close and reopen (with the same backend: a warm mirror; or a fresh one: a
rebuilt mirror). The model is ``path -> bytes`` of the regular files below ``/workspace``, and
``path -> Link(target)`` of its symlinks (to a file, a directory, nowhere, out of the mount): a run
or the workspace makes them where files were, and files where they were.

Invariants after every settled step:
- the next run's view (``find -type f | sha256sum``) equals the workspace (``ws.fs``) equals the model;
- no acknowledged workspace write is lost (the model takes every workspace operation as it returns);
- each change a run made is either in the workspace or listed in that run's ``skipped`` (with a reason):
  the model applies a run's change to a path unless the run skipped that path (or an ancestor of it).

Decisions:
- File names never double as directory names (``a``, ``b``, ``d/c``, ``d/e``, ``f/g/h``), so every
  operation is valid on every state and the model needs no error cases. A symlink is only ever made
  at a file name; a write where one is replaces it (``rm`` first: writing through a link is the
  shell's business, not the sync's), and a rename moves the link itself.
- An in-flight run waits 1 s after printing ``ready`` before acting; the workspace operation happens
  in that window (checked: the run must still be running when the operation returns).
- Two concurrent runs: the model applies them in the order their results arrived (a pull is one
  transaction); a path both runs changed to different contents may be applied by at most one of them.
- Contents are small text or, one time in three, over 1 MiB (made by the run with ``head | tr``: too
  large for ``$C``), so large files go through every rule as chunks; one rule makes a file, removes it
  and makes it again with the same bytes in three runs (it caught the mirror naming chunks the store
  had freed, within 12 s).
- Bounded: few examples and steps, no shrinking (each step costs real sandboxed runs; the unshrunk
  failing program is still printed). Deterministic (``derandomize``): a failure is reproducible.
  ``COMPUTER_HYPOTHESIS_SEED`` runs it randomized (README.md).
"""

from __future__ import annotations

import asyncio
import posixpath
from decimal import Decimal
from typing import Any, TypeVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

import computer
from computer.runtime import MirrorPool, ShellBackend
from computer.runtime.types import ExecResult

from ._support import (
    MARGIN,
    ROOT,
    Large,
    WorkspaceMachine,
    digest,
    machine_runner,
    ok,
    reasons_cover_skipped,
    sandbox_view,
    workspace_view,
)

T = TypeVar("T")
FILES = ["a", "b", "d/c", "d/e", "f/g/h"]
DIRS = ["d", "f", "f/g"]
PATHS = st.sampled_from(FILES)
# A run's directory rename (``mv -T d k`` or back): one rename in the workspace (``_pull_moves``), or,
# a workspace change at either name in flight, a removal and the new tree under the conflict rule.
DIR_MOVE = (st.sampled_from(["d", "k"]), st.sampled_from(["k", "d"]))
# Symlink targets: a file, a directory, a relative one, nowhere, out of the mount root.
TARGETS = st.sampled_from(["a", "d", "../a", "nowhere", "/secret/x"])


class Link(str):
    """A symlink's target in the model (a file's bytes are ``bytes``)."""


SMALL = st.text(alphabet="abxyz \n", max_size=24).map(lambda s: s.encode())


# Over 1 MiB: synced as chunks both ways (two share a letter, so a file made again with the bytes of
# one removed before names the same chunks). A run makes one with ``head | tr``, not from ``$C``.
LARGE = st.sampled_from([Large(b"X" * 1_100_000), Large(b"Y" * 1_600_000), Large(b"X" * 1_600_000)])
CONTENT = st.one_of(SMALL, SMALL, LARGE)

# One run operation: (kind, path, other path, content).
RUN_OPS = st.one_of(
    st.tuples(st.just("write"), PATHS, PATHS, CONTENT),
    st.tuples(st.just("append"), PATHS, PATHS, CONTENT),
    st.tuples(st.just("linkappend"), PATHS, PATHS, CONTENT),
    st.tuples(st.just("delete"), PATHS, PATHS, CONTENT),
    st.tuples(st.just("rename"), PATHS, PATHS, CONTENT),
    st.tuples(st.just("rmdir"), st.sampled_from(DIRS), PATHS, CONTENT),
    st.tuples(st.just("symlink"), PATHS, TARGETS, CONTENT),
    st.tuples(st.just("nothing"), PATHS, PATHS, CONTENT),
    st.tuples(st.just("dirmove"), *DIR_MOVE, CONTENT),
)
WS_OPS = st.one_of(
    st.tuples(st.just("write"), PATHS, PATHS, CONTENT),
    st.tuples(st.just("delete"), PATHS, PATHS, CONTENT),
    st.tuples(st.just("rename"), PATHS, PATHS, CONTENT),
    st.tuples(st.just("symlink"), PATHS, TARGETS, CONTENT),
)

Op = tuple[str, str, str, bytes]

# What the machine exercised (checked after the run, so a machine that never raced proves nothing).
stats = {
    "runs": 0,
    "in_flight": 0,
    "concurrent": 0,
    "skipped": 0,
    "dir_moves": 0,
    "evictions": 0,
    "reopens": 0,
    "fresh": 0,
    "links": 0,
}


def _q(path: str) -> str:
    return "'" + path + "'"


def _large(content: bytes) -> bool:
    return len(content) > 1024 * 1024


def env_of(op: Op) -> dict[str, str]:
    """The run's ``$C``: the content, or nothing for a large one (made by the run itself)."""
    return {"C": "" if _large(op[3]) else op[3].decode()}


Model = dict[str, "bytes | Link"]


def shell_of(op: Op, model: Model) -> tuple[str, dict[str, bytes | Link | None]]:
    """The bash for ``op`` and what it does to the files, as seen from ``model`` (the run's mirror)."""
    kind, path, other, content = op
    made = (
        f"head -c {len(content)} /dev/zero | tr '\\0' {content[:1].decode()}"
        if _large(content)
        else 'printf %s "$C"'
    )
    unlinked = f"mkdir -p {_q(posixpath.dirname(path) or '.')} && {{ [ ! -L {_q(path)} ] || rm {_q(path)}; }}"
    held = model.get(path)
    if kind == "write":
        return f"{unlinked} && {made} > {_q(path)}", {path: content}
    if kind == "append":
        if isinstance(held, bytes) and not content:  # nothing appended to a file: nothing changed
            return f"{unlinked} && {made} >> {_q(path)}", {}
        return f"{unlinked} && {made} >> {_q(path)}", {
            path: (held if isinstance(held, bytes) else b"") + content
        }
    if kind == "linkappend":  # through a hard link removed at once: the events name only the link
        source = (
            f"if [ -f {_q(path)} ] && [ ! -L {_q(path)} ]; then "
            f"ln -f {_q(path)} .lnk && {made} >> .lnk; rm -f .lnk; fi"
        )
        # (nothing appended changes nothing: not even a workspace write made during the run)
        return source, ({path: held + content} if isinstance(held, bytes) and content else {})
    if kind == "symlink":
        return (
            f"mkdir -p {_q(posixpath.dirname(path) or '.')} && rm -f {_q(path)} && ln -s {_q(other)} {_q(path)}",
            {path: Link(other)},
        )
    if kind == "delete":
        return f"rm -f {_q(path)}", ({path: None} if path in model else {})
    if kind == "rename":
        if path == other:
            return "true", {}
        # Conditional in the shell too: a live run may act on a tree changed after it was planned.
        # ``other`` removed first: mv refuses a symlink onto the file it names ("the same file").
        source = (
            f"if [ -f {_q(path)} ] || [ -L {_q(path)} ]; then mkdir -p {_q(posixpath.dirname(other) or '.')} "
            f"&& rm -f {_q(other)} && mv -fT {_q(path)} {_q(other)}; fi"
        )
        if path not in model:
            return source, {}
        return source, {path: None, other: model[path]}
    if kind == "rmdir":
        return f"rm -rf {_q(path)}", {p: None for p in model if p.startswith(path + "/")}
    if kind == "dirmove":  # ``d`` and ``k`` hold files (or links) only: ``k`` with one, mv fails
        source = f"if [ -d {path} ]; then mv -T {path} {other} 2>/dev/null || true; fi"
        if path == other or any(p.startswith(other + "/") for p in model):
            return source, {}
        moving = [p for p in model if p.startswith(path + "/")]
        stats["dir_moves"] += bool(moving)
        return source, {**dict.fromkeys(moving), **{other + p[len(path) :]: model[p] for p in moving}}
    return "true", {}


def skipped_covers(result: ExecResult, path: str) -> bool:
    """Whether the run left ``path`` alone: it is skipped, or below a skipped directory and not pulled
    itself (``rm -rf d`` while the workspace removed ``d/c``: ``d`` is refused, its descendant changed
    in the workspace, while the removal of ``d/e`` is applied and listed in ``pulled``)."""
    absolute = f"{ROOT}/{path}"
    if absolute in result.skipped:
        return True
    return absolute not in result.pulled and any(
        absolute.startswith(s.rstrip("/") + "/") for s in result.skipped
    )


class SyncMachine(WorkspaceMachine):
    prefix = "fid-sm-"

    def __init__(self) -> None:
        super().__init__()
        self.model: Model = {}
        self.shell = self._shell()
        self.ws: computer.Workspace = self.call(self._open())
        self.other: computer.Workspace = self.call(self._open_other())

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _shell() -> ShellBackend:
        # A sandbox per run: the rules below are the per-run sync bracket's (LiveSyncMachine: live).
        return ShellBackend(
            live=False, mirror_pool=lambda base, root: MirrorPool(base, root, max_workspaces=1)
        )

    async def _open(self) -> computer.Workspace:
        ws = computer.Workspace(self.db, backends=[self.shell])
        if not await ws.fs.exists(ROOT):
            await ws.fs.mkdir(ROOT)
        return ws

    async def _open_other(self) -> computer.Workspace:
        other = computer.Workspace(None, backends=[self.shell])
        await other.fs.mkdir(ROOT)
        return other

    def apply_run(self, result: ExecResult, effects: dict[str, bytes | Link | None]) -> None:
        """Take a settled run's effects into the model, except for the paths it skipped."""
        assert result.status == "completed", (result.stdout, result.stderr, result.error)
        reasons_cover_skipped(result)
        stats["runs"] += 1
        stats["skipped"] += bool(result.skipped)
        for path, content in effects.items():
            if skipped_covers(result, path):
                continue
            if content is None:
                self.model.pop(path, None)
            else:
                self.model[path] = content

    async def _ws_op(self, op: Op) -> None:
        kind, path, other, content = op
        fs = self.ws.fs
        if kind == "write":
            await fs.mkdir(f"{ROOT}/{posixpath.dirname(path)}".rstrip("/"), recursive=True)
            if isinstance(self.model.get(path), Link):  # replaced, not written through
                await fs.rm(f"{ROOT}/{path}")
            await fs.write_file(f"{ROOT}/{path}", content)
            self.model[path] = content
        elif kind == "symlink":
            await fs.mkdir(f"{ROOT}/{posixpath.dirname(path)}".rstrip("/"), recursive=True)
            await fs.rm(f"{ROOT}/{path}", force=True)
            await fs.symlink(other, f"{ROOT}/{path}")
            self.model[path] = Link(other)
            stats["links"] += 1
        elif kind == "delete":
            await fs.rm(f"{ROOT}/{path}", force=True)
            self.model.pop(path, None)
        elif kind == "rename" and path in self.model and path != other:
            await fs.mkdir(f"{ROOT}/{posixpath.dirname(other)}".rstrip("/"), recursive=True)
            await fs.rename(f"{ROOT}/{path}", f"{ROOT}/{other}", overwrite=True)
            self.model[other] = self.model.pop(path)

    # ------------------------------------------------------------------ rules

    @rule(op=RUN_OPS)
    def shell_run(self, op: Op) -> None:
        stats["links"] += op[0] == "symlink"
        source, effects = shell_of(op, self.model)
        result = self.call(ok(self.ws, source, env=env_of(op)))
        assert result.skipped == [], result.skipped  # nothing raced it: nothing may be left out
        self.apply_run(result, effects)

    @rule(path=PATHS, content=CONTENT)
    def made_removed_and_made_again(self, path: str, content: bytes) -> None:
        """Three runs: a file made, removed, then made again with the same bytes (an archive
        restored, a file gunzipped): a large one names chunks the store freed in between."""
        for kind in ("write", "delete", "write"):
            self.shell_run((kind, path, path, content))

    @rule(run_op=RUN_OPS, ws_op=WS_OPS)
    def workspace_change_during_a_run(self, run_op: Op, ws_op: Op) -> None:
        self._in_flight(run_op, ws_op)

    @precondition(lambda self: any(p.startswith(("d/", "k/")) for p in self.model))
    @rule(ws_op=WS_OPS)
    def workspace_change_during_a_runs_directory_move(self, ws_op: Op) -> None:
        """The run renames the directory of ``d`` and ``k`` that holds files to the other one while the
        workspace changes a path (below ``d`` at times: the owner refuses the rename, sent again whole)."""
        old = "d" if any(p.startswith("d/") for p in self.model) else "k"
        self._in_flight(("dirmove", old, "k" if old == "d" else "d", b""), ws_op)

    def _in_flight(self, run_op: Op, ws_op: Op) -> None:
        source, effects = shell_of(run_op, self.model)

        async def step() -> ExecResult:
            handle = await self.ws.runtime.exec(
                # 3 s for the workspace's change once "ready" shows: 1 s was not always enough for a
                # 1.6 MB write under load ~15 on 2 cores (the run ended first: the step proved nothing).
                f"echo ready; sleep 3; {source}",
                env=env_of(run_op),
                timeout=60,
            )
            ready = asyncio.Event()

            async def follow() -> None:
                async for snapshot in handle:
                    if "ready" in snapshot.stdout:
                        ready.set()

            follower = asyncio.ensure_future(follow())
            await asyncio.wait_for(ready.wait(), MARGIN)
            await self._ws_op(ws_op)
            assert not follower.done(), "the run ended before the workspace change: the step proves nothing"
            result: ExecResult = await asyncio.wait_for(handle.result(), 60 + MARGIN)
            await asyncio.wait_for(follower, MARGIN)
            return result

        self.apply_run(self.call(step()), effects)
        stats["in_flight"] += 1

    @rule(first=RUN_OPS, second=RUN_OPS)
    def two_concurrent_runs(self, first: Op, second: Op) -> None:
        plans = [shell_of(first, self.model), shell_of(second, self.model)]

        async def step() -> list[tuple[ExecResult, dict[str, bytes | Link | None]]]:
            handles = [
                await self.ws.runtime.exec(f"sleep {0.6 * i}; {source}", env=env_of(op), timeout=60)
                for i, ((source, _), op) in enumerate(zip(plans, (first, second), strict=True))
            ]
            tasks = [asyncio.ensure_future(h.result()) for h in handles]
            pending: set[asyncio.Future[ExecResult]] = set(tasks)
            order: list[asyncio.Future[ExecResult]] = []
            while pending:
                done, pending = await asyncio.wait(
                    pending, timeout=60 + MARGIN, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    raise TimeoutError("concurrent runs did not end")
                order += sorted(done, key=tasks.index)
            return [(t.result(), plans[tasks.index(t)][1]) for t in order]

        settled = self.call(step())
        stats["concurrent"] += 1
        applied: dict[str, bytes | Link | None] = {}
        for result, effects in settled:
            for path, content in effects.items():
                if skipped_covers(result, path):
                    continue
                assert path not in applied or applied[path] == content, (
                    f"both concurrent runs applied {path}: the later one overwrote the other's change"
                )
                applied[path] = content
            self.apply_run(result, effects)

    @rule()
    def evict_the_mirror(self) -> None:
        self.call(ok(self.other, "echo other > o.txt"))
        stats["evictions"] += 1

    @rule(fresh=st.booleans())
    def close_and_reopen(self, fresh: bool) -> None:
        self.call(self.ws.close())
        self.call(self.other.close())
        stats["reopens"] += 1
        if fresh:
            self.shell = self._shell()
            stats["fresh"] += 1
        self.ws = self.call(self._open())
        self.other = self.call(self._open_other())
        if fresh:
            self.call(self._directory_times_match())

    async def _directory_times_match(self) -> None:
        """A mirror built from the SQLite file shows each directory with the workspace's time (what the
        runs' pulls kept of the program's times, SPEC section 10: mtimes round-trip)."""
        listing = await ok(self.ws, "find . -mindepth 1 -type d -printf '%P %T@\\n'")
        shown = {}
        for line in listing.stdout.splitlines():
            path, when = line.rsplit(" ", 1)
            shown[path] = int(Decimal(when) * 1000)
        kept = {p: (await self.ws.fs.stat(f"{ROOT}/{p}")).mtime for p in shown}
        assert shown == kept, "a rebuilt mirror shows other directory times than the workspace holds"

    # ------------------------------------------------------------------ invariants

    @invariant()
    def every_view_equals_the_model(self) -> None:
        expected = {f"{ROOT}/{p}": digest(c) for p, c in self.model.items() if isinstance(c, bytes)}
        links = {p: str(c) for p, c in self.model.items() if isinstance(c, Link)}
        assert self.call(workspace_view(self.ws)) == expected, "the workspace lost or kept a change"
        assert self.call(self._workspace_links()) == links, "the workspace lost or kept a symlink"
        assert self.call(sandbox_view(self.ws)) == expected, "the next run's view differs from the workspace"
        assert self.call(self._sandbox_links()) == links, (
            "the next run's symlinks differ from the workspace's"
        )

    async def _workspace_links(self, directory: str = ROOT) -> dict[str, str]:
        """Every symlink below ``directory`` in the workspace (by ``readdir``: a pool's client has no
        manifest): relative path -> target."""
        links: dict[str, str] = {}
        for entry in await self.ws.fs.readdir(directory):
            path = f"{directory}/{entry.name}"
            if entry.is_symlink:
                links[path[len(ROOT) + 1 :]] = await self.ws.fs.readlink(path)
            elif entry.is_directory:
                links.update(await self._workspace_links(path))
        return links

    async def _sandbox_links(self) -> dict[str, str]:
        listing = await ok(self.ws, "find . -type l -printf '%P\\t%l\\n'")
        return dict(line.split("\t", 1) for line in listing.stdout.splitlines())

    def finish(self) -> None:
        self.call(self.other.close())


class LiveSyncMachine(SyncMachine):
    """The same machine over live sandboxes (the default): runs of the workspace share one sandbox
    whose files sync both ways while anything runs. A workspace change made while a run sleeps reaches
    it before it acts (so the run acts on the changed tree), and two overlapping runs act on one tree
    one after the other: in both cases the model is the sequential one, and nothing is skipped."""

    @staticmethod
    def _shell() -> ShellBackend:
        return ShellBackend(mirror_pool=lambda base, root: MirrorPool(base, root, max_workspaces=1))

    def _in_flight(self, run_op: Op, ws_op: Op) -> None:
        source, _ = shell_of(run_op, self.model)

        async def step() -> tuple[ExecResult, dict[str, bytes | Link | None]]:
            handle = await self.ws.runtime.exec(
                f"echo ready; sleep 1.5; {source}", env=env_of(run_op), timeout=60
            )
            async for snapshot in handle:
                if "ready" in snapshot.stdout:
                    break
            await self._ws_op(ws_op)  # the model takes it now; the run acts on the changed tree
            effects = shell_of(run_op, self.model)[1]
            result: ExecResult = await asyncio.wait_for(handle.result(), 60 + MARGIN)
            return result, effects

        result, effects = self.call(step())
        assert result.skipped == [], result.skipped
        self.apply_run(result, effects)
        stats["in_flight"] += 1

    @rule(first=RUN_OPS, second=RUN_OPS)
    def two_concurrent_runs(self, first: Op, second: Op) -> None:
        async def step() -> None:
            source, effects = shell_of(first, self.model)
            one = await self.ws.runtime.exec(source + "; echo acted; sleep 1", env=env_of(first), timeout=60)
            async for snapshot in one:  # the first acted (its sleep keeps it running): 0.3 s after the
                if "acted" in snapshot.stdout:  # call was not always so on a loaded machine
                    break
            self_model_after_first = dict(self.model)
            for path, content in effects.items():
                if content is None:
                    self_model_after_first.pop(path, None)
                else:
                    self_model_after_first[path] = content
            source2, effects2 = shell_of(second, self_model_after_first)
            two = await self.ws.runtime.exec(source2, env=env_of(second), timeout=60)
            results = [await asyncio.wait_for(h.result(), 60 + MARGIN) for h in (one, two)]
            for result in results:
                assert result.skipped == [], result.skipped
            self.apply_run(results[0], effects)
            self.apply_run(results[1], effects2)

        self.call(step())
        stats["concurrent"] += 1


def exercise(machine: type[SyncMachine], examples: int, steps: int, label: str, record_property: Any) -> None:
    """Run ``machine`` (derandomized unless ``COMPUTER_HYPOTHESIS_SEED``) and record what it exercised."""
    for key in stats:
        stats[key] = 0
    machine_runner(machine, examples, steps).TestCase().runTest()
    for key, value in stats.items():
        record_property(f"{label}_{key}", value)
    print(f"{label}:", stats)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_live_sandbox_state_machine(record_property: Any) -> None:
    """Live sandboxes under the same rules (sequential model): nothing lost, nothing skipped."""
    exercise(LiveSyncMachine, 10, 15, "live_machine", record_property)
    assert all(stats[k] for k in ("runs", "in_flight", "concurrent", "evictions", "reopens")), stats


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_sync_bracket_state_machine(record_property: Any) -> None:
    exercise(SyncMachine, 15, 20, "sync_machine", record_property)
    # the machine did race: runs skipped paths, ran in flight, concurrently, after evictions and reopens
    assert all(stats.values()), stats
