"""``commit_batch(in_place=)``: a pull's write through the node of a file of several names (hard links),
refused when the workspace wrote that node meanwhile through another name (``_in_place``)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from computer.storage import FileSystem


def names_of(fs: FileSystem, ino: int) -> list[str]:
    """Every name of the node ``ino`` (a walk of the store)."""
    return [e.path for e in fs.manifest("/", inodes=True) if e.ino == ino]


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


# A workspace change after the pull's revision: (whether the write through ``f`` is refused, what the
# names of ``f``'s node read after a refusal).
CHANGES = {
    "write": (True, b"W"),
    "write_then_rename_it": (True, b"W"),
    "write_then_rename_its_dir": (True, b"W"),
    "write_then_rename_a_dir_above": (True, b"W"),
    "replaced_then_write_another": (True, b"W"),
    "chmod": (True, b"a"),
    "link_new": (False, b""),
    "rename_a_name": (False, b""),
    "chmod_dir": (False, b""),
    "write_elsewhere_then_rename_onto_a_name": (False, b""),
}


@pytest.mark.parametrize("change", CHANGES, ids=CHANGES)
async def test_a_workspace_write_of_the_node_after_the_revision_refuses_the_write(
    fs: FileSystem, change: str
) -> None:
    """The race: the workspace wrote the file through another name between the pull's look (its
    revision) and its commit. The write through the node would overwrite it: refused (skipped), the
    workspace's version kept under every name, and a link to the refused path refused with it. A
    name made, moved or removed, or a directory's mode, changes no content: applied, every name of
    the node (a name the workspace made too) takes it."""
    base = await _linked(fs, ["/w/l1", "/w/d/x"])
    await fs.mkdir("/w/up/in", recursive=True)
    ino = (await fs.stat("/w/f")).ino
    if change == "write":
        await fs.write_file("/w/l1", b"W")
    elif change == "write_then_rename_it":
        await fs.write_file("/w/l1", b"W")
        await fs.rename("/w/l1", "/w/l2")
    elif change == "write_then_rename_its_dir":
        await fs.write_file("/w/d/x", b"W")
        await fs.rename("/w/d", "/w/d2")
    elif change == "write_then_rename_a_dir_above":
        await fs.rename("/w/d", "/w/up/in/d")
        base2 = fs.rev
        await fs.write_file("/w/up/in/d/x", b"W")
        await fs.rename("/w/up", "/w/up2")
        assert base2 > base
    elif change == "replaced_then_write_another":
        await fs.write_file("/w/other", b"O")
        await fs.rename("/w/other", "/w/l1", overwrite=True)  # l1 is another file now
        await fs.write_file("/w/d/x", b"W")
    elif change == "chmod":
        fs.commit_batch({}, modes={"/w/l1": 0o600})
    elif change == "link_new":
        await fs.link("/w/l1", "/w/l9")
    elif change == "rename_a_name":
        await fs.rename("/w/d", "/w/d2")
    elif change == "chmod_dir":
        fs.commit_batch({}, modes={"/w/d": 0o700})
    elif change == "write_elsewhere_then_rename_onto_a_name":
        await fs.write_file("/w/other", b"O")  # written, then moved over a name: not the node
        await fs.rename("/w/other", "/w/l1", overwrite=True)
    refuse, kept = CHANGES[change]
    batch = fs.commit_batch({"/w/f": b"pulled"}, links={"/w/new": "/w/f"}, in_place={"/w/f": base})
    names = names_of(fs, ino)
    if refuse:
        assert batch.skipped == ["/w/f", "/w/new"], batch
        assert {await fs.read_file(n) for n in names} == {kept}
        assert not await fs.exists("/w/new")
    else:
        assert batch.applied == ["/w/f", "/w/new"] and batch.skipped == [], batch
        assert {await fs.read_file(n) for n in names} == {b"pulled"} and "/w/new" in names
    assert (await fs.stat("/w/f")).nlink == len(names)


async def test_a_change_elsewhere_or_a_removed_name_refuses_nothing(fs: FileSystem) -> None:
    base = await _linked(fs, ["/w/l1", "/w/l2"])
    await fs.write_file("/w/unrelated", b"u")
    await fs.rm("/w/l2")  # no longer a name of the node: nothing of it is overwritten
    batch = fs.commit_batch({"/w/f": b"pulled"}, in_place={"/w/f": base})
    assert batch.applied == ["/w/f"]
    assert await fs.read_file("/w/l1") == b"pulled"


async def test_the_writers_own_revisions_refuse_nothing(fs: FileSystem) -> None:
    """A pull's earlier page (``own_revs``) set the node's time through a name: its own, not a conflict."""
    base = await _linked(fs, ["/w/l1"])
    fs.commit_batch({}, mtimes={"/w/l1": 1_000})
    own = fs.rev
    assert fs.commit_batch({"/w/f": b"p"}, in_place={"/w/f": base}).skipped == ["/w/f"]
    assert fs.commit_batch({"/w/f": b"p"}, in_place={"/w/f": base}, own_revs=[own]).applied == ["/w/f"]
    assert await fs.read_file("/w/l1") == b"p"


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
        return names_of(self.fs, self.ino)

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
