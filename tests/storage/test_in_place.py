"""``commit_batch(in_place=)``: a pull's write through the node of a file of several names (hard links),
checked against every name of it (``_names``), and the index by node that finds them (schema 6)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from computer.storage import FileSystem
from computer.storage._names import names_of
from computer.storage._schema import SCHEMA_VERSION


async def _linked(fs: FileSystem, names: list[str], data: bytes = b"a") -> int:
    """``/w/f`` with the other ``names`` (paths) as hard links of it; the revision after."""
    await fs.mkdir("/w/d", recursive=True)
    await fs.write_file("/w/f", data)
    for name in names:
        await fs.link("/w/f", name)
    return fs.rev


async def test_a_write_through_the_node_changes_every_name_and_logs_one_change(fs: FileSystem) -> None:
    base = await _linked(fs, [f"/w/l{i}" for i in range(50)] + ["/w/d/x"])
    batch = fs.commit_batch({"/w/f": b"ab"}, mtimes={"/w/f": 5_000}, in_place={"/w/f": base})
    assert batch.applied == ["/w/f"] and batch.skipped == []
    assert [(c.path, c.op) for c in fs.changes_since(base).changes] == [("/w/f", "write")]
    for name in ("/w/f", "/w/l7", "/w/d/x"):
        st_ = await fs.stat(name)
        assert (await fs.read_file(name), st_.nlink, st_.mtime) == (b"ab", 52, 5_000)
    assert fs.stats()["files"] == 1  # one node: no name split off


async def test_without_in_place_a_write_still_gives_its_name_a_new_file(fs: FileSystem) -> None:
    """The batch's rule for a program that replaced the file (``sed -i``): unchanged."""
    base = await _linked(fs, ["/w/g"])
    fs.commit_batch({"/w/f": b"new"}, base_rev=base)
    assert (await fs.read_file("/w/f"), await fs.read_file("/w/g")) == (b"new", b"a")
    assert (await fs.stat("/w/g")).nlink == 1


@pytest.mark.parametrize(
    "change",
    ["write", "write_then_rename_dir", "rename_onto", "link_new", "chmod_dir"],
)
async def test_a_workspace_change_of_another_name_after_the_revision_refuses_the_write(
    fs: FileSystem, change: str
) -> None:
    """The race: the workspace changed another name of the node between the pull's plan (its
    revision) and its commit. The write through the node would overwrite it: refused (skipped), the
    workspace's version kept under every name, and a link to the refused path refused with it."""
    base = await _linked(fs, ["/w/l1", "/w/d/x"])
    kept = b"a"
    if change == "write":
        await fs.write_file("/w/l1", b"W")
        kept = b"W"
    elif change == "write_then_rename_dir":  # the name written is no longer a path: its directory moved
        await fs.write_file("/w/d/x", b"W")
        await fs.rename("/w/d", "/w/d2")
        kept = b"W"
    elif change == "rename_onto":
        await fs.write_file("/w/other", b"O")
        await fs.rename("/w/other", "/w/l1", overwrite=True)  # l1 is another file now: f's node has f and d/x
        await fs.write_file("/w/d/x", b"W")
        kept = b"W"
    elif change == "link_new":
        await fs.link("/w/l1", "/w/l9")
    elif change == "chmod_dir":
        fs.commit_batch({}, modes={"/w/d": 0o700})  # logged ``mkdir``: what lies below conflicts
    batch = fs.commit_batch({"/w/f": b"pulled"}, links={"/w/new": "/w/f"}, in_place={"/w/f": base})
    assert batch.skipped == ["/w/f", "/w/new"], batch
    assert await fs.read_file("/w/f") == kept
    assert not await fs.exists("/w/new")


async def test_a_change_elsewhere_or_a_removed_name_refuses_nothing(fs: FileSystem) -> None:
    base = await _linked(fs, ["/w/l1", "/w/l2"])
    await fs.write_file("/w/unrelated", b"u")
    await fs.rm("/w/l2")  # no longer a name of the node: nothing of it is overwritten
    batch = fs.commit_batch({"/w/f": b"pulled"}, in_place={"/w/f": base})
    assert batch.applied == ["/w/f"]
    assert await fs.read_file("/w/l1") == b"pulled"


async def test_the_writers_own_revisions_refuse_nothing(fs: FileSystem) -> None:
    """A pull's earlier page (``own_revs``) changed a name of the node: its own, not a conflict."""
    base = await _linked(fs, ["/w/l1"])
    fs.commit_batch({}, links={"/w/l2": "/w/f"})
    own = fs.rev
    assert fs.commit_batch({"/w/f": b"p"}, in_place={"/w/f": base}).skipped == ["/w/f"]
    assert fs.commit_batch({"/w/f": b"p"}, in_place={"/w/f": base}, own_revs=[own]).applied == ["/w/f"]
    assert await fs.read_file("/w/l2") == b"p"


async def test_a_trimmed_log_refuses_the_write(fs: FileSystem) -> None:
    base = await _linked(fs, ["/w/l1"])
    fs._store.db.execute("UPDATE state SET log_floor = ? WHERE id = 1", (base + 1,))
    assert fs.commit_batch({"/w/f": b"p"}, in_place={"/w/f": base}).skipped == ["/w/f"]


async def test_in_place_at_a_missing_path_or_a_single_name_is_a_plain_write(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    base = fs.rev
    await fs.write_file("/w/one", b"1")
    batch = fs.commit_batch({"/w/new": b"n", "/w/one": b"2"}, in_place={"/w/new": base, "/w/one": base})
    assert batch.applied == ["/w/new", "/w/one"]
    assert (await fs.read_file("/w/new"), await fs.read_file("/w/one")) == (b"n", b"2")


async def test_names_of_a_node(fs: FileSystem) -> None:
    await _linked(fs, ["/w/d/x", "/w/l1"])
    ino = (await fs.stat("/w/f")).ino
    assert names_of(fs._store, ino) == ["/w/d/x", "/w/f", "/w/l1"]
    await fs.rename("/w/d", "/w/e")
    await fs.rm("/w/l1")
    assert names_of(fs._store, ino) == ["/w/e/x", "/w/f"]


async def test_a_version_5_file_gains_the_index_by_node(tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sqlite")
    fs = FileSystem.open(path)
    base = await _linked(fs, ["/w/l1"])
    fs.close()
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("DROP INDEX dirents_child")
    con.execute("UPDATE meta SET value = 5 WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(OSError):  # a reader never upgrades
        FileSystem.open(path, readonly=True)
    fs = FileSystem.open(path)
    try:
        plan = fs._store.db.execute(
            "EXPLAIN QUERY PLAN SELECT parent, name FROM dirents WHERE child = 5"
        ).fetchall()
        assert any("dirents_child" in str(row) for row in plan), plan
        await fs.write_file("/w/l1", b"W")
        assert fs.commit_batch({"/w/f": b"p"}, in_place={"/w/f": base}).skipped == ["/w/f"]
        assert (await fs.stat("/w/f")).nlink == 2  # the link counts as before
    finally:
        fs.close()
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == SCHEMA_VERSION
    con.close()


_NAMES = ["/w/f", "/w/a", "/w/d/b", "/w/d/c", "/w/e/b"]


class InPlaceRaces(RuleBasedStateMachine):
    """Workspace changes to the names of one file (writes, links, removals, renames of a name and of
    its directory) between a pull's revision and its in-place write through a name it saw unchanged.
    Never lost: a workspace write after the revision through a name still there is never overwritten
    (the write is refused), a
    quiet workspace's write is applied, and every name of the node always reads one content."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.fs = FileSystem.open(None, garbage_timer=False)
        self.n = 0

    def run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    @initialize()
    def start(self) -> None:
        self.run(self.fs.mkdir("/w/d", recursive=True))
        self.run(self.fs.mkdir("/w/e"))
        self.run(self.fs.write_file("/w/f", b"0"))
        self.run(self.fs.link("/w/f", "/w/a"))
        self.ino = self.run(self.fs.stat("/w/f")).ino  # the node (never replaced: nothing detaches)
        self.base = self.fs.rev
        self.written: set[str] = set()  # names of the node written through since ``base`` (still there)
        self.quiet = True  # no workspace change at all since ``base``
        self.untouched = {"/w/f", "/w/a"}  # names of the node at ``base`` not changed since

    def _names(self) -> list[str]:
        return names_of(self.fs._store, self.ino)

    def _is_name(self, path: str) -> bool:
        return self.run(self.fs.exists(path)) and self.run(self.fs.stat(path)).ino == self.ino

    @rule(name=st.sampled_from(_NAMES))
    def workspace_write(self, name: str) -> None:
        if not self._is_name(name):
            return
        self.n += 1
        self.run(self.fs.write_file(name, b"w%d" % self.n))
        self.written.add(name)
        self.quiet = False
        self.untouched.discard(name)

    @rule(new=st.sampled_from(_NAMES))
    def workspace_link(self, new: str) -> None:
        if self.run(self.fs.exists(new)) or not self.run(self.fs.exists(new.rpartition("/")[0])):
            return
        self.run(self.fs.link(self._names()[0], new))
        self.quiet = False

    @rule(name=st.sampled_from(_NAMES))
    def workspace_rm(self, name: str) -> None:
        if not self.run(self.fs.exists(name)) or (self._is_name(name) and len(self._names()) < 2):
            return
        self.run(self.fs.rm(name))
        self.quiet = False
        self.untouched.discard(name)
        # A write through a name then removed: the log names only the gone path, nothing tells which
        # node it wrote (the pull's rules cannot either): left out of what must be refused.
        self.written.discard(name)

    @rule()
    def workspace_moves_a_directory(self) -> None:
        src, dst = ("/w/d", "/w/g") if self.run(self.fs.exists("/w/d")) else ("/w/g", "/w/d")
        self.run(self.fs.rename(src, dst))
        self.quiet = False
        self.untouched = {n for n in self.untouched if not n.startswith(src + "/")}
        self.written = {dst + n[len(src) :] if n.startswith(src + "/") else n for n in self.written}

    @precondition(lambda self: bool(self.untouched))
    @rule(data=st.binary(min_size=1, max_size=8))
    def pull_writes_through_the_node(self, data: bytes) -> None:
        p = sorted(self.untouched)[0]  # a name the workspace left alone: the pull's rules pass it
        before = {n: self.run(self.fs.read_file(n)) for n in self._names()}
        batch = self.fs.commit_batch({p: data}, in_place={p: self.base})
        after = {n: self.run(self.fs.read_file(n)) for n in self._names()}
        if self.written:
            assert batch.skipped == [p] and after == before, (batch, before, after)
        if self.quiet:
            assert batch.applied == [p], batch
        if batch.applied:
            assert set(after.values()) == {data} and after.keys() == before.keys()
        self.base, self.written, self.quiet = self.fs.rev, set(), True
        self.untouched = set(self._names())

    @invariant()
    def one_content_under_every_name(self) -> None:
        names = self._names()
        assert len({self.run(self.fs.read_file(n)) for n in names}) <= 1
        if names:
            assert self.run(self.fs.stat(names[0])).nlink == len(names)

    def teardown(self) -> None:
        self.fs.close()
        self.loop.close()


InPlaceRaces.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_in_place_races = InPlaceRaces.TestCase
