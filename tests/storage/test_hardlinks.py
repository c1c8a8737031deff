"""Hard links (``FileSystem.link``, ``commit_batch(links=)``), link counts in stat/manifest, and
symlink targets stored verbatim (issue 16: metadata round-trips)."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from computer.storage import FileSystem, ManifestEntry


async def test_a_link_shares_content_mode_and_mtime(fs: FileSystem) -> None:
    await fs.write_file("/a", b"one", mode=0o600, mtime=5_000)
    await fs.link("/a", "/b")
    a, b = await fs.stat("/a"), await fs.stat("/b")
    assert a.ino == b.ino and a.nlink == b.nlink == 2
    assert (b.mode, b.mtime, b.size) == (0o600, 5_000, 3)
    await fs.write_file("/b", b"two!")  # a write through either name shows in both
    assert await fs.read_file("/a") == b"two!"
    await fs.write_file("/a", b"three", mode=0o640)
    assert await fs.read_file("/b") == b"three" and (await fs.stat("/b")).mode == 0o640
    assert fs.stats()["logical_bytes"] == 5  # one file, counted once


async def test_removing_one_name_keeps_the_other(fs: FileSystem) -> None:
    await fs.write_file("/a", b"x" * 700_000)  # two chunks
    await fs.link("/a", "/b")
    await fs.rm("/a")
    assert await fs.read_file("/b") == b"x" * 700_000
    assert (await fs.stat("/b")).nlink == 1
    await fs.rm("/b")
    assert fs.stats()["chunks"] == 0 and fs.stats()["logical_bytes"] == 0


async def test_copy_is_independent_and_rename_keeps_the_link(fs: FileSystem) -> None:
    await fs.write_file("/a", b"orig")
    await fs.link("/a", "/b")
    await fs.copy("/a", "/c")
    assert (await fs.stat("/c")).nlink == 1
    await fs.write_file("/c", b"changed")
    assert await fs.read_file("/a") == b"orig"
    await fs.mkdir("/d")
    await fs.rename("/b", "/d/b")
    await fs.write_file("/d/b", b"via renamed")
    assert await fs.read_file("/a") == b"via renamed"
    assert (await fs.stat("/a")).ino == (await fs.stat("/d/b")).ino


async def test_rename_onto_another_name_of_the_same_file_does_nothing(fs: FileSystem) -> None:
    await fs.write_file("/a", b"x")
    await fs.link("/a", "/b")
    rev = fs.rev
    await fs.rename("/a", "/b", overwrite=True)
    assert await fs.exists("/a") and await fs.exists("/b") and fs.rev == rev


async def test_link_errors(fs: FileSystem) -> None:
    await fs.mkdir("/dir")
    await fs.write_file("/f", b"")
    with pytest.raises(PermissionError) as perm:
        await fs.link("/dir", "/dir2")
    assert perm.value.errno == errno.EPERM and perm.value.filename == "/dir"
    with pytest.raises(FileExistsError):
        await fs.link("/f", "/dir")
    with pytest.raises(FileNotFoundError):
        await fs.link("/missing", "/g")
    with pytest.raises(FileNotFoundError):
        await fs.link("/f", "/nodir/g")
    with pytest.raises(NotADirectoryError):
        await fs.link("/f", "/f/g")
    with pytest.raises(FileExistsError):
        await fs.link("/f", "/")


async def test_a_symlink_itself_can_get_a_second_name(fs: FileSystem) -> None:
    await fs.symlink("/nowhere", "/l")
    await fs.link("/l", "/l2")  # link(2) does not follow
    assert await fs.readlink("/l2") == "/nowhere"


async def test_removing_a_tree_keeps_files_that_have_a_name_outside(fs: FileSystem) -> None:
    await fs.mkdir("/t/sub", recursive=True)
    await fs.write_file("/t/sub/f", b"keep me")
    await fs.write_file("/t/both1", b"gone")
    await fs.link("/t/sub/f", "/outside")
    await fs.link("/t/both1", "/t/sub/both2")  # both names inside: the file goes
    await fs.link("/t/sub/f", "/t/f2")
    await fs.rm("/t", recursive=True)
    assert await fs.read_file("/outside") == b"keep me"
    st_ = await fs.stat("/outside")
    assert st_.nlink == 1
    stats = fs.stats()
    assert (stats["files"], stats["logical_bytes"]) == (1, 7)


async def test_copying_a_tree_keeps_its_inner_links(fs: FileSystem) -> None:
    await fs.mkdir("/t")
    await fs.write_file("/t/a", b"x")
    await fs.link("/t/a", "/t/b")
    await fs.copy("/t", "/u")
    a, b = await fs.stat("/u/a"), await fs.stat("/u/b")
    assert a.ino == b.ino != (await fs.stat("/t/a")).ino and a.nlink == 2
    await fs.write_file("/u/a", b"y")
    assert await fs.read_file("/u/b") == b"y" and await fs.read_file("/t/b") == b"x"


async def test_links_are_in_the_change_log_and_the_manifest(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    await fs.write_file("/w/a", b"x")
    rev = fs.rev
    await fs.link("/w/a", "/w/b")
    assert [(c.path, c.op, c.source) for c in fs.changes_since(rev, "/w").changes] == [
        ("/w/b", "link", "/w/a"),
        ("/w", "touch", None),  # after the pair: its directory's time moved
    ]
    # The source names the existing file even outside the asked root, and is never a change of its own.
    await fs.mkdir("/v")
    await fs.link("/w/a", "/v/c")
    assert [(c.path, c.op, c.source) for c in fs.changes_since(rev, "/v").changes] == [
        ("/v", "mkdir", None),
        ("/", "touch", None),
        ("/v/c", "link", "/w/a"),
        ("/v", "touch", None),
    ]
    await fs.rm("/v", recursive=True)
    entries = fs.manifest("/w", inodes=True)
    assert all(isinstance(e, ManifestEntry) for e in entries)
    assert [(e.path, e.kind, e.nlink) for e in entries] == [("/w/a", "file", 2), ("/w/b", "file", 2)]
    assert entries[0].ino == entries[1].ino
    assert [e[:5] for e in entries] == fs.manifest("/w")  # the plain five fields stay the default


async def test_commit_batch_links_after_writes_and_writes_detach(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    fs.commit_batch({"/w/a": b"v1"}, links={"/w/b": "/w/a", "/w/sub/c": "/w/a"})
    assert (await fs.stat("/w/sub/c")).nlink == 3
    # The run split /w/a off (e.g. ``sed -i``): a write gives that name a new file.
    fs.commit_batch({"/w/a": b"v2"})
    assert await fs.read_file("/w/b") == b"v1" and (await fs.stat("/w/a")).nlink == 1
    # A write that the run made through a still-shared file comes with its other names as links.
    rev = fs.rev
    result = fs.commit_batch({"/w/b": b"v3"}, links={"/w/sub/c": "/w/b"})
    assert result.applied == ["/w/b", "/w/sub/c"]
    assert await fs.read_file("/w/sub/c") == b"v3" and (await fs.stat("/w/b")).nlink == 2
    assert ("/w/sub/c", "link", "/w/b") in {(c.path, c.op, c.source) for c in fs.changes_since(rev).changes}
    again = fs.commit_batch({}, links={"/w/sub/c": "/w/b"})  # already linked: no change
    assert again.rev == fs.rev and again.applied == ["/w/sub/c"]


async def test_commit_batch_link_conflicts_and_bad_sources_are_skipped(fs: FileSystem) -> None:
    await fs.mkdir("/w/d", recursive=True)
    await fs.write_file("/w/a", b"x")
    base = fs.rev
    await fs.write_file("/w/a", b"changed in the workspace")
    result = fs.commit_batch({}, links={"/w/b": "/w/a", "/w/c": "/w/missing", "/w/e": "/w/d"}, base_rev=base)
    assert result.skipped == ["/w/b", "/w/c", "/w/e"] and result.applied == []
    assert not await fs.exists("/w/b")


async def test_commit_batch_removing_both_names_frees_the_file(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    fs.commit_batch({"/w/a": b"x" * 10}, links={"/w/b": "/w/a", "/w/c": "/w/a"})
    fs.commit_batch({"/w/a": None, "/w/b": None})
    assert (await fs.stat("/w/c")).nlink == 1
    fs.commit_batch({"/w/c": None})
    assert fs.stats()["files"] == 0 and fs.stats()["chunks"] == 0


@pytest.mark.parametrize(
    "target",
    [
        "/usr/lib/python3.12/os.py",  # an absolute host path
        "/nowhere/at/all",  # dangling
        "../../../../etc/passwd",  # climbing out
        "relative/dir/",
        "a//b/./c/../d",  # not canonical: kept as given
        "ünïcödé → target",
        " spaces ",
        "x" * 4000,
    ],
)
async def test_symlink_targets_are_stored_verbatim(fs: FileSystem, target: str) -> None:
    await fs.mkdir("/w")
    await fs.symlink(target, "/w/l")
    assert await fs.readlink("/w/l") == target
    (entry,) = fs.manifest("/w", inodes=True)
    assert entry.kind == "symlink" and entry.size == len(target.encode())
    await fs.rename("/w/l", "/w/m")
    await fs.copy("/w", "/v")
    assert await fs.readlink("/w/m") == await fs.readlink("/v/m") == target


# ---------------------------------------------------------------- stateful model

NAMES = ["/a", "/b", "/c", "/d/x", "/d/y"]
names = st.sampled_from(NAMES)
contents = st.sampled_from([b"", b"1", b"22", b"x" * 600_000])


class HardLinks(RuleBasedStateMachine):
    """Names map to node ids; each node has content. The store must agree after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.fs = FileSystem.open(None)
        self.run(self.fs.mkdir("/d"))
        self.names: dict[str, int] = {}
        self.content: dict[int, bytes] = {}
        self.next = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def _new(self, data: bytes) -> int:
        self.next += 1
        self.content[self.next] = data
        return self.next

    def _gc(self) -> None:
        live = set(self.names.values())
        self.content = {k: v for k, v in self.content.items() if k in live}

    @rule(p=names, data=contents)
    def write_through(self, p: str, data: bytes) -> None:
        self.run(self.fs.write_file(p, data))
        if p in self.names:
            self.content[self.names[p]] = data
        else:
            self.names[p] = self._new(data)

    @rule(p=names, data=contents)
    def batch_write(self, p: str, data: bytes) -> None:
        self.fs.commit_batch({p: data})
        self.names[p] = self._new(data)  # detaches from other names
        self._gc()

    @rule(old=names, new=names)
    def link(self, old: str, new: str) -> None:
        try:
            self.run(self.fs.link(old, new))
        except FileNotFoundError:
            assert old not in self.names
            return
        except FileExistsError:
            assert new in self.names
            return
        assert old in self.names and new not in self.names
        self.names[new] = self.names[old]

    @rule(old=names, new=names)
    def batch_link(self, old: str, new: str) -> None:
        result = self.fs.commit_batch({}, links={new: old})
        if old not in self.names:
            assert result.skipped == [new]
            return
        self.names[new] = self.names[old]
        self._gc()

    @precondition(lambda self: self.names)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from(sorted(self.names)))
        if data.draw(st.booleans()):
            self.run(self.fs.rm(p))
        else:
            self.fs.commit_batch({p: None})
        del self.names[p]
        self._gc()

    @rule()
    def remove_dir(self) -> None:
        self.run(self.fs.rm("/d", recursive=True))
        self.run(self.fs.mkdir("/d"))
        self.names = {p: n for p, n in self.names.items() if not p.startswith("/d/")}
        self._gc()

    @rule(src=names, dst=names)
    def rename(self, src: str, dst: str) -> None:
        try:
            self.run(self.fs.rename(src, dst, overwrite=True))
        except FileNotFoundError:
            assert src not in self.names
            return
        if src != dst and self.names[src] != self.names.get(dst):
            self.names[dst] = self.names.pop(src)
        self._gc()

    @rule(src=names, dst=names)
    def copy(self, src: str, dst: str) -> None:
        try:
            self.run(self.fs.copy(src, dst, overwrite=True))
        except FileNotFoundError:
            assert src not in self.names
            return
        if src != dst:
            self.names[dst] = self._new(self.content[self.names[src]])  # an independent file
        self._gc()

    @invariant()
    def agrees(self) -> None:
        counts: dict[int, int] = {}
        for node in self.names.values():
            counts[node] = counts.get(node, 0) + 1
        inos: dict[int, int] = {}
        for p, node in self.names.items():
            assert self.run(self.fs.read_file(p)) == self.content[node], p
            st_ = self.run(self.fs.stat(p))
            assert st_.nlink == counts[node], p
            assert inos.setdefault(node, st_.ino) == st_.ino, p
        assert len(set(inos.values())) == len(inos)
        listed = {e.path for e in self.fs.manifest("/", inodes=True) if e.kind == "file"}
        assert listed == set(self.names)
        stats = self.fs.stats()
        assert stats["files"] == len(counts)
        assert stats["logical_bytes"] == sum(len(self.content[n]) for n in counts)
        assert stats["chunks"] == len({c for n in counts for c in _chunks_of(self.content[n])})

    def teardown(self) -> None:
        self.fs.close()
        self.loop.close()


def _chunks_of(data: bytes) -> set[bytes]:
    return {data[i : i + 512 * 1024] for i in range(0, len(data), 512 * 1024)}


TestHardLinks = HardLinks.TestCase
TestHardLinks.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


async def test_commit_batch_makes_symlinks_verbatim_in_the_same_revision(fs: FileSystem) -> None:
    await fs.mkdir("/w/venv/bin", recursive=True)
    await fs.write_file("/w/was_file", b"x")
    await fs.mkdir("/w/was_dir/sub", recursive=True)
    await fs.symlink("/same", "/w/same")
    rev = fs.rev
    links = {
        "/w/venv/bin/python": "/usr/bin/python3.12",  # an absolute host path: stored, never resolved
        "/w/venv/bin/python3": "python",
        "/w/new/deep/l": "../../nowhere",  # parents made
        "/w/was_file": "target",  # replaces a file
        "/w/was_dir": "/x",  # replaces a tree
        "/w/same": "/same",  # already so: no change
        "/w/bad": "",
    }
    result = fs.commit_batch({}, symlinks=links, links={"/w/venv/bin/py": "/w/venv/bin/python"})
    assert result.rev == rev + 1 and result.skipped == ["/w/bad"]
    assert set(result.applied) == set(links) - {"/w/bad"} | {"/w/venv/bin/py"}
    for path, target in links.items():
        if target:
            assert await fs.readlink(path) == target
    assert (await fs.readlink("/w/venv/bin/py")) == "/usr/bin/python3.12"
    logged = {(c.path, c.op) for c in fs.changes_since(rev).changes}
    assert ("/w/venv/bin/python", "symlink") in logged and ("/w/same", "symlink") not in logged
    assert not await fs.exists("/w/was_dir/sub")
    again = fs.commit_batch({}, symlinks={"/w/same": "/same"})
    assert again.rev == fs.rev == rev + 1


async def test_commit_batch_symlinks_follow_the_conflict_rule(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    base = fs.rev
    await fs.write_file("/w/taken", b"workspace wins")
    result = fs.commit_batch({}, symlinks={"/w/taken": "/elsewhere", "/w/free": "t"}, base_rev=base)
    assert result.skipped == ["/w/taken"] and result.applied == ["/w/free"]
    assert await fs.read_file("/w/taken") == b"workspace wins"


async def test_a_batch_link_never_names_a_node_its_own_replacement_deleted(fs: FileSystem) -> None:
    """A link onto the directory holding its source, or below its source (a file made a directory on
    the way), is skipped: it named a deleted node, an entry to nothing that broke every later look."""
    result = fs.commit_batch({}, symlinks={"/w/d/s": "b"}, links={"/w/d": "/w/d/s"})
    assert result.skipped == ["/w/d"] and (await fs.readlink("/w/d/s")) == "b"
    fs.commit_batch({"/w/f": b"f"})
    result = fs.commit_batch({}, links={"/w/f/x": "/w/f"})
    assert result.skipped == ["/w/f/x"]
    assert (await fs.stat("/w/f")).is_directory and [e.name for e in await fs.readdir("/w/f")] == []
    fs.commit_batch({"/w/d/s": None, "/w/g": None})  # every path still resolves
    assert [r.path for r in fs.manifest("/w")] == ["/w/d", "/w/f"]
