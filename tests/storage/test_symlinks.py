"""Symlinks: creation, following, ELOOP, readlink."""

from __future__ import annotations

import errno
import os
import posixpath
import random
from pathlib import Path

import pytest

from computer.storage import FileSystem, FsInvalidError


async def test_symlink_and_readlink(fs: FileSystem) -> None:
    await fs.write_file("/target", b"data")
    await fs.symlink("/target", "/link")
    assert await fs.readlink("/link") == "/target"
    assert await fs.read_file("/link") == b"data"
    st = await fs.stat("/link")
    assert st.is_file and st.size == 4 and st.name == "link"


async def test_relative_symlink_resolves_from_its_directory(fs: FileSystem) -> None:
    await fs.mkdir("/a/b", recursive=True)
    await fs.write_file("/a/f", b"rel")
    await fs.symlink("../f", "/a/b/link")
    assert await fs.read_file("/a/b/link") == b"rel"


async def test_symlinked_directory_in_the_middle_of_a_path(fs: FileSystem) -> None:
    await fs.mkdir("/real/sub", recursive=True)
    await fs.write_file("/real/sub/f", b"deep")
    await fs.symlink("/real", "/alias")
    assert await fs.read_file("/alias/sub/f") == b"deep"
    assert [e.name for e in await fs.readdir("/alias")] == ["sub"]
    await fs.write_file("/alias/sub/g", b"via link")
    assert await fs.read_file("/real/sub/g") == b"via link"


async def test_symlink_loop_is_eloop(fs: FileSystem) -> None:
    await fs.symlink("/b", "/a")
    await fs.symlink("/a", "/b")
    with pytest.raises(OSError) as info:
        await fs.read_file("/a")
    assert info.value.errno == errno.ELOOP
    assert not await fs.exists("/a")


async def test_chain_of_40_links_resolves_and_41_is_eloop(fs: FileSystem) -> None:
    await fs.write_file("/end", b"ok")
    await fs.symlink("/end", "/l0")
    for i in range(1, 41):
        await fs.symlink(f"/l{i - 1}", f"/l{i}")
    assert await fs.read_file("/l39") == b"ok"
    with pytest.raises(OSError) as info:
        await fs.read_file("/l40")
    assert info.value.errno == errno.ELOOP


async def test_dangling_symlink(fs: FileSystem) -> None:
    await fs.symlink("/nowhere", "/dangling")
    assert not await fs.exists("/dangling")
    assert await fs.readlink("/dangling") == "/nowhere"
    with pytest.raises(FileNotFoundError):
        await fs.read_file("/dangling")
    await fs.write_file("/dangling", b"created")
    assert await fs.read_file("/nowhere") == b"created"


async def test_write_through_symlink_updates_target(fs: FileSystem) -> None:
    await fs.write_file("/t", b"old")
    await fs.symlink("t", "/l")
    await fs.write_file("/l", b"new")
    assert await fs.read_file("/t") == b"new"
    assert await fs.readlink("/l") == "t"


async def test_readlink_of_non_link_is_einval(fs: FileSystem) -> None:
    await fs.write_file("/f", b"")
    with pytest.raises(FsInvalidError):
        await fs.readlink("/f")


async def test_symlink_onto_existing_is_eexist(fs: FileSystem) -> None:
    await fs.write_file("/f", b"")
    with pytest.raises(FileExistsError):
        await fs.symlink("/x", "/f")


async def test_rename_symlink_moves_the_link(fs: FileSystem) -> None:
    await fs.write_file("/t", b"x")
    await fs.symlink("/t", "/l")
    await fs.rename("/l", "/m")
    assert await fs.readlink("/m") == "/t"
    assert await fs.read_file("/t") == b"x"


async def test_replacing_a_symlink_invalidates_cached_paths(fs: FileSystem) -> None:
    await fs.mkdir("/one")
    await fs.mkdir("/two")
    await fs.write_file("/one/f", b"1")
    await fs.write_file("/two/f", b"2")
    await fs.symlink("/one", "/cur")
    assert await fs.read_file("/cur/f") == b"1"
    await fs.rm("/cur")
    await fs.symlink("/two", "/cur")
    assert await fs.read_file("/cur/f") == b"2"


async def test_mkdir_recursive_through_dangling_symlink_is_eexist(fs: FileSystem) -> None:
    await fs.symlink("/nowhere", "/link")
    with pytest.raises(FileExistsError):
        await fs.mkdir("/link/sub", recursive=True)


async def test_commit_batch_replaces_a_dangling_symlink_in_the_way(fs: FileSystem) -> None:
    await fs.symlink("/nowhere", "/link")
    fs.commit_batch({"/link/file": b"x"})
    assert await fs.read_file("/link/file") == b"x"
    assert (await fs.stat("/link")).is_directory


async def test_ensuring_directories_follows_links_to_directories_and_replaces_links_to_files(
    fs: FileSystem,
) -> None:
    await fs.mkdir("/real")
    await fs.write_file("/file", b"f")
    await fs.symlink("/real", "/to_dir")
    await fs.symlink("/file", "/to_file")
    await fs.mkdir("/to_dir/a/b", recursive=True)
    assert (await fs.stat("/real/a/b")).is_directory
    with pytest.raises(FileExistsError):
        await fs.mkdir("/to_file", recursive=True)
    with pytest.raises(NotADirectoryError):
        await fs.mkdir("/to_file/x", recursive=True)
    fs.commit_batch({}, mkdirs=["/to_dir/c", "/to_file/d", "/file2/e"])
    assert (await fs.stat("/real/c")).is_directory
    assert (await fs.stat("/to_file/d")).is_directory  # the link to a file was replaced
    assert await fs.read_file("/file") == b"f"  # its target was not touched
    assert (await fs.stat("/file2/e")).is_directory


async def test_a_symlink_target_past_what_symlink2_takes_or_not_utf8_is_refused_with_an_oserror(
    fs: FileSystem,
) -> None:
    """As ``symlink(2)``: a target of at most 4,095 bytes. Before, a longer one was stored, and every
    sandbox push of it failed ("File name too long"); one that is not UTF-8 raised
    ``UnicodeEncodeError``, not an ``OSError``."""
    await fs.symlink("x" * 4095, "/ok")
    assert await fs.readlink("/ok") == "x" * 4095
    for target, code in (
        ("x" * 4096, errno.ENAMETOOLONG),
        ("é" * 2048, errno.ENAMETOOLONG),
        ("\udcff", errno.EINVAL),
    ):
        with pytest.raises(OSError) as caught:
            await fs.symlink(target, "/bad")
        assert caught.value.errno == code
        assert caught.value.filename == "/bad"
        assert not await fs.exists("/bad")
    result = fs.commit_batch({"/f": b"kept"}, symlinks={"/long": "y" * 4096, "/fine": "f"})
    assert "/long" in result.skipped and "/fine" in result.applied
    assert await fs.read_file("/fine") == b"kept"


async def test_a_batch_write_replaces_a_symlink_at_its_path_and_never_writes_its_target(
    fs: FileSystem,
) -> None:
    """A batch says what each path is now (a sync's pull): a file written where a symlink is replaces
    the link. It used to be written through: a program's ``rm p; echo x > p`` over ``p -> /secret/c``
    overwrote ``/secret/c``; over a link to a directory the whole batch failed (``IsADirectoryError``).
    The link is logged removed first, so another mirror replaces its link too."""
    await fs.mkdir("/secret")
    await fs.write_file("/secret/c", b"original")
    await fs.mkdir("/w/dir", recursive=True)
    await fs.symlink("/secret/c", "/w/p")
    await fs.symlink("/w/dir", "/w/dl")
    rev = fs.rev
    result = fs.commit_batch({"/w/p": b"file", "/w/dl": [b"big", b"ger"]})
    assert result.applied == ["/w/dl", "/w/p"] and result.skipped == []
    assert await fs.read_file("/secret/c") == b"original"
    assert await fs.read_file("/w/p") == b"file" and await fs.read_file("/w/dl") == b"bigger"
    assert {e.name: e.is_symlink for e in await fs.readdir("/w")} == {"dir": False, "dl": False, "p": False}
    assert await fs.readdir("/w/dir") == []
    assert [(c.path, c.op) for c in fs.changes_since(rev, "/w").changes] == [
        ("/w/dl", "rm"),
        ("/w/dl", "write"),
        ("/w/p", "rm"),
        ("/w/p", "write"),
    ]


async def test_a_batch_gives_a_symlink_it_makes_its_own_mtime_never_its_targets(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    await fs.write_file("/w/f", b"f")
    fs.commit_batch({}, mtimes={"/w/f": 5_000})
    fs.commit_batch({}, symlinks={"/w/l": "f"}, mtimes={"/w/l": 1_000})
    rev = fs.rev
    times = {e.name: e.mtime for e in await fs.readdir("/w")}
    assert times == {"f": 5_000, "l": 1_000}
    assert fs.commit_batch({}, symlinks={"/w/l": "f"}, mtimes={"/w/l": 1_000}).rev == rev  # no change
    result = fs.commit_batch({}, symlinks={"/w/l": "f"}, mtimes={"/w/l": 2_000})  # ``touch -h``
    assert result.applied == ["/w/l"]
    assert {e.name: e.mtime for e in await fs.readdir("/w")} == {"f": 5_000, "l": 2_000}
    assert [(c.path, c.op) for c in fs.changes_since(rev, "/w").changes] == [("/w/l", "symlink")]
    assert [row.mtime for row in fs.manifest("/w") if row.path == "/w/l"] == [2_000]


def _os_realpath(root: Path, probe: str, *, follow: bool) -> str:
    """What the OS resolves ``probe`` (a path below ``root``) to; it has no "all but the last", so
    ``follow=False`` resolves the parent and keeps the name."""
    if follow:
        return os.path.realpath(root / probe[1:])
    return posixpath.join(os.path.realpath(root / posixpath.dirname(probe)[1:]), posixpath.basename(probe))


async def test_realpath_resolves_like_the_os_on_the_same_tree(fs: FileSystem, tmp_path: Path) -> None:
    """``fs.realpath`` (one call: one owner round trip through a client) answers what
    ``os.path.realpath`` answers on the same tree built on disk: links in the middle, chains, ``..`` in
    targets, dangling links, a file in a parent position, ``follow=False`` keeping the last link."""
    rng = random.Random(7)
    names = ["a", "b", "c"]
    dirs, files, links = ["/"], [], []
    for step in range(40):
        parent = rng.choice(dirs)
        path = posixpath.join(parent, f"{rng.choice(names)}{step}")
        kind = rng.choice(["dir", "dir", "file", "link"])
        if kind == "dir":
            dirs.append(path)
        elif kind == "file":
            files.append(path)
        else:  # relative targets only: the same text points at the same place on disk and in the fs
            to = rng.choice(dirs + files + ["/missing"])
            links.append((path, posixpath.relpath(to, parent)))
    root = tmp_path / "tree"
    root.mkdir()
    for d in dirs[1:]:
        await fs.mkdir(d)
        (root / d[1:]).mkdir()
    for f in files:
        await fs.write_file(f, b"x")
        (root / f[1:]).write_bytes(b"x")
    for path, target in links:
        await fs.symlink(target, path)
        (root / path[1:]).symlink_to(target)
    probes = [p for p, _ in links] + files + dirs[1:]
    probes += [posixpath.join(p, "below", "deeper") for p, _ in links] + [f + "/below" for f in files]
    for probe in probes:
        for follow in (True, False):
            got = await fs.realpath(probe, follow=follow)
            on_disk = _os_realpath(root, probe, follow=follow)
            assert got == "/" + posixpath.relpath(on_disk, root).removeprefix("."), (probe, follow)


async def test_an_error_through_a_link_names_the_path_asked_and_says_where_the_link_led(
    fs: FileSystem,
) -> None:
    """``open("link")`` names ``link``: the walk goes on from a link's target, and every error named that
    target (reading a dangling ``/link`` said ``No such file or directory: /nowhere/f``)."""
    await fs.mkdir("/d")
    await fs.symlink("/nowhere/f", "/link")
    await fs.symlink("/missing", "/dir-link")
    await fs.symlink("/b", "/a")
    await fs.symlink("/a", "/b")
    cases = [
        (fs.read_file("/link"), "/link", errno.ENOENT, "/nowhere/f"),
        (fs.stat("/link"), "/link", errno.ENOENT, "/nowhere/f"),
        (fs.readdir("/dir-link"), "/dir-link", errno.ENOENT, "/missing"),
        (fs.read_file("/dir-link/x"), "/dir-link/x", errno.ENOENT, "/missing/x"),
        (fs.write_file("/link", b"x"), "/link", errno.ENOENT, "/nowhere"),
        (fs.read_file("/a"), "/a", errno.ELOOP, None),
    ]
    for call, asked, code, led in cases:
        with pytest.raises(OSError) as info:
            await call
        assert (info.value.errno, info.value.filename) == (code, asked)
        if led is not None:
            assert f"leads to {led})" in str(info.value)
    with pytest.raises(FileNotFoundError) as missing:
        await fs.read_file("/d/none")
    assert missing.value.filename == "/d/none" and "symbolic link" not in str(missing.value)
