"""SPEC 4 and CASES 10-13: readdir, mkdir, rm, rename, copy."""

from __future__ import annotations

import errno

import pytest

from computer.storage import FileSystem, FsInvalidError


async def _tree(fs: FileSystem, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        parent = path.rsplit("/", 1)[0] or "/"
        await fs.mkdir(parent, recursive=True)
        await fs.write_file(path, data)


async def test_readdir_pages_in_name_order(fs: FileSystem) -> None:
    for n in "dbca":
        await fs.write_file("/" + n, b"")
    assert [e.name for e in await fs.readdir("/", limit=2, offset=2)] == ["c", "d"]
    assert [e.name for e in await fs.readdir("/")] == ["a", "b", "c", "d"]
    assert [e.name for e in await fs.readdir("/", offset=3)] == ["d"]
    assert await fs.readdir("/", limit=0) == []


async def test_readdir_negative_offset_is_einval(fs: FileSystem) -> None:
    with pytest.raises(FsInvalidError):
        await fs.readdir("/", offset=-1)


async def test_readdir_on_file_is_enotdir(fs: FileSystem) -> None:
    await fs.write_file("/f", b"")
    with pytest.raises(NotADirectoryError):
        await fs.readdir("/f")


async def test_readdir_entries_describe_children(fs: FileSystem) -> None:
    await fs.mkdir("/d")
    await fs.write_file("/d/f", b"12345")
    await fs.mkdir("/d/sub")
    await fs.symlink("/d/f", "/d/link")
    entries = {e.name: e for e in await fs.readdir("/d//./")}
    assert entries["f"].size == 5 and entries["f"].is_file and not entries["f"].is_symlink
    assert entries["sub"].is_directory
    assert entries["link"].is_symlink and not entries["link"].is_file
    assert {e.parent_path for e in entries.values()} == {"/d"}


async def test_mkdir_defaults_to_755(fs: FileSystem) -> None:
    await fs.mkdir("/d")
    assert (await fs.stat("/d")).mode == 0o755
    await fs.mkdir("/e", mode=0o700)
    assert (await fs.stat("/e")).mode == 0o700


async def test_mkdir_missing_parent_is_enoent_unless_recursive(fs: FileSystem) -> None:
    with pytest.raises(FileNotFoundError):
        await fs.mkdir("/a/b/c")
    await fs.mkdir("/a/b/c", recursive=True)
    assert (await fs.stat("/a/b")).is_directory


async def test_mkdir_under_file_is_enotdir(fs: FileSystem) -> None:
    await fs.write_file("/f", b"")
    with pytest.raises(NotADirectoryError):
        await fs.mkdir("/f/d")
    with pytest.raises(NotADirectoryError):
        await fs.mkdir("/f/d/e", recursive=True)


async def test_mkdir_existing_dir_is_eexist_without_recursive(fs: FileSystem) -> None:
    await fs.mkdir("/d")
    with pytest.raises(FileExistsError):
        await fs.mkdir("/d")


async def test_mkdir_existing_file_is_eexist_even_recursive(fs: FileSystem) -> None:
    await fs.write_file("/f", b"")
    with pytest.raises(FileExistsError):
        await fs.mkdir("/f")
    with pytest.raises(FileExistsError):
        await fs.mkdir("/f", recursive=True)


async def test_mkdir_root_is_eexist(fs: FileSystem) -> None:
    with pytest.raises(FileExistsError):
        await fs.mkdir("/")


async def test_mkdir_recursive_is_idempotent_and_does_not_bump_rev(fs: FileSystem) -> None:
    await fs.mkdir("/a/b", recursive=True)
    rev = fs.rev
    await fs.mkdir("/a/b", recursive=True)
    await fs.mkdir("/a", recursive=True)
    await fs.mkdir("/", recursive=True)
    assert fs.rev == rev


async def test_rm_root_is_eperm(fs: FileSystem) -> None:
    with pytest.raises(PermissionError):
        await fs.rm("/", recursive=True, force=True)


async def test_rm_missing_is_enoent_and_silent_with_force(fs: FileSystem) -> None:
    with pytest.raises(FileNotFoundError):
        await fs.rm("/missing")
    rev = fs.rev
    await fs.rm("/missing", force=True)
    await fs.rm("/no/such/middle/segments", force=True, recursive=True)
    assert fs.rev == rev


async def test_rm_non_empty_dir_is_enotempty(fs: FileSystem) -> None:
    await _tree(fs, {"/d/f": b"x"})
    with pytest.raises(OSError) as info:
        await fs.rm("/d")
    assert info.value.errno == errno.ENOTEMPTY
    assert await fs.exists("/d/f")


async def test_rm_empty_dir_without_recursive(fs: FileSystem) -> None:
    await fs.mkdir("/d")
    await fs.rm("/d")
    assert not await fs.exists("/d")


async def test_rm_recursive_does_not_touch_prefix_siblings(fs: FileSystem) -> None:
    await _tree(
        fs,
        {
            "/dir/a": b"1",
            "/dir/sub/b": b"2",
            "/dir0": b"3",
            "/dir00/x": b"4",
            "/dir-extra/y": b"5",
            "/dir.txt": b"6",
        },
    )
    await fs.rm("/dir", recursive=True)
    assert not await fs.exists("/dir")
    assert await fs.ls("/") == ["/dir-extra/y", "/dir.txt", "/dir0", "/dir00/x"]


async def test_rm_recursive_is_one_rev_bump_and_frees_everything(fs: FileSystem) -> None:
    await _tree(fs, {f"/d/{i}/{j}": f"{i}{j}".encode() for i in range(5) for j in range(5)})
    rev = fs.rev
    await fs.rm("/d", recursive=True)
    assert fs.rev == rev + 1
    stats = fs.stats()
    assert (stats["files"], stats["dirs"], stats["chunks"], stats["logical_bytes"]) == (0, 1, 0, 0)


async def test_rm_symlink_leaves_target(fs: FileSystem) -> None:
    await _tree(fs, {"/t/f": b"keep"})
    await fs.symlink("/t", "/link")
    await fs.rm("/link")
    assert await fs.read_file("/t/f") == b"keep"


async def test_rm_recursive_never_follows_links_out_of_tree(fs: FileSystem) -> None:
    await _tree(fs, {"/outside/precious": b"keep", "/tree/own": b"x"})
    await fs.symlink("/outside", "/tree/link")
    await fs.symlink("../outside/precious", "/tree/filelink")
    await fs.rm("/tree", recursive=True)
    assert await fs.read_file("/outside/precious") == b"keep"
    assert fs.stats()["symlinks"] == 0


async def test_rename_file_and_directory(fs: FileSystem) -> None:
    await _tree(fs, {"/a/x": b"1", "/a/b/y": b"2"})
    await fs.rename("/a/x", "/a/b/z")
    await fs.rename("/a", "/c")
    assert await fs.ls("/") == ["/c/b/y", "/c/b/z"]
    assert await fs.read_file("/c/b/z") == b"1"
    with pytest.raises(FileNotFoundError):
        await fs.stat("/a/b/y")


async def test_rename_large_directory_costs_bounded_queries(fs: FileSystem) -> None:
    await fs.mkdir("/big/inner", recursive=True)
    for i in range(100):
        await fs.mkdir(f"/big/inner/{i}")
    for i in range(10_000):
        await fs.write_file(f"/big/inner/{i % 100}/{i}", b"x")
    before = fs.queries
    await fs.rename("/big", "/moved")
    assert fs.queries - before < 20
    assert await fs.read_file("/moved/inner/7/9907") == b"x"
    assert not await fs.exists("/big")


async def test_rename_into_own_subtree_is_einval(fs: FileSystem) -> None:
    await fs.mkdir("/a/b", recursive=True)
    with pytest.raises(FsInvalidError):
        await fs.rename("/a", "/a/b/c")
    with pytest.raises(FsInvalidError):
        await fs.copy("/a", "/a/b/c")


async def test_rename_onto_existing_is_eexist_unless_overwrite(fs: FileSystem) -> None:
    await fs.write_file("/a", b"a")
    await fs.write_file("/b", b"b")
    with pytest.raises(FileExistsError):
        await fs.rename("/a", "/b")
    await fs.rename("/a", "/b", overwrite=True)
    assert await fs.read_file("/b") == b"a"
    assert not await fs.exists("/a")
    assert fs.stats()["chunks"] == 1


async def test_rename_overwrite_type_rules(fs: FileSystem) -> None:
    await _tree(fs, {"/f": b"", "/full/x": b""})
    await fs.mkdir("/d")
    await fs.mkdir("/e")
    with pytest.raises(IsADirectoryError):
        await fs.rename("/f", "/d", overwrite=True)
    with pytest.raises(NotADirectoryError):
        await fs.rename("/d", "/f", overwrite=True)
    with pytest.raises(OSError) as info:
        await fs.rename("/d", "/full", overwrite=True)
    assert info.value.errno == errno.ENOTEMPTY
    await fs.rename("/d", "/e", overwrite=True)
    assert not await fs.exists("/d")


async def test_rename_missing_source_is_enoent(fs: FileSystem) -> None:
    with pytest.raises(FileNotFoundError):
        await fs.rename("/nope", "/x")


async def test_rename_to_itself_is_a_noop(fs: FileSystem) -> None:
    await fs.write_file("/a", b"a")
    rev = fs.rev
    await fs.rename("/a", "/./a")
    assert fs.rev == rev
    assert await fs.read_file("/a") == b"a"


async def test_copy_directory_tree(fs: FileSystem) -> None:
    await _tree(fs, {"/src/a": b"1", "/src/s/b": b"2"})
    await fs.symlink("a", "/src/s/../link")
    await fs.copy("/src", "/dst")
    assert await fs.ls("/dst") == ["/dst/a", "/dst/s/b"]
    assert await fs.readlink("/dst/link") == "a"
    assert await fs.read_file("/dst/link") == b"1"
    await fs.rm("/src", recursive=True)
    assert await fs.read_file("/dst/s/b") == b"2"


async def test_copy_onto_existing_is_eexist_unless_overwrite(fs: FileSystem) -> None:
    await fs.write_file("/a", b"a")
    await fs.write_file("/b", b"b")
    with pytest.raises(FileExistsError):
        await fs.copy("/a", "/b")
    await fs.copy("/a", "/b", overwrite=True)
    assert await fs.read_file("/b") == b"a"
    assert await fs.read_file("/a") == b"a"


async def test_ls_is_segment_aware_and_lists_files_only(fs: FileSystem) -> None:
    await _tree(fs, {"/ws/a": b"", "/ws/sub/b": b"", "/wsp/x": b""})
    await fs.mkdir("/ws/empty")
    assert await fs.ls("/ws") == ["/ws/a", "/ws/sub/b"]
    assert await fs.ls("/ws/a") == ["/ws/a"]
    assert await fs.ls("/missing") == []


async def test_rename_or_copy_onto_root(fs: FileSystem) -> None:
    await fs.write_file("/f", b"")
    await fs.mkdir("/d")
    with pytest.raises(FileExistsError):
        await fs.rename("/f", "/")
    with pytest.raises(IsADirectoryError):
        await fs.rename("/f", "/", overwrite=True)
    with pytest.raises(PermissionError):
        await fs.copy("/d", "/", overwrite=True)
    with pytest.raises(PermissionError):
        await fs.rename("/", "/x")
    assert [e.name for e in await fs.readdir("/")] == ["d", "f"]
