"""A client reaches the owner's filesystem with the same results and error classes."""

from __future__ import annotations

import errno

import pytest

import computer
from computer.config import Settings
from computer.storage.types import FileStat


async def test_round_trip_through_a_client(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/a.txt", "hello\nworld\n")
        assert await ws.fs.read_file("/workspace/a.txt", offset=1, length=3) == b"ell"
        assert await ws.fs.read_text("/workspace/a.txt") == "hello\nworld\n"
        stat = await ws.fs.stat("/workspace/a.txt")
        assert isinstance(stat, FileStat) and stat.size == 12 and stat.is_file
        assert [e.name for e in await ws.fs.readdir("/workspace")] == ["a.txt"]
        assert await ws.fs.exists("/workspace/a.txt")
        assert [m.line for m in await ws.fs.grep("world", "/workspace")] == [2]
        assert [e.path for e in await ws.fs.find("/workspace", "*.txt")] == ["/workspace/a.txt"]
        await ws.fs.copy("/workspace/a.txt", "/workspace/b.txt")
        await ws.fs.rename("/workspace/b.txt", "/workspace/c.txt")
        await ws.fs.symlink("/workspace/c.txt", "/workspace/link")
        assert await ws.fs.readlink("/workspace/link") == "/workspace/c.txt"
        assert await ws.fs.realpath("/workspace/link/below") == "/workspace/c.txt/below"
        assert await ws.fs.realpath("/workspace/link", follow=False) == "/workspace/link"
        assert await ws.fs.ls("/workspace") == ["/workspace/a.txt", "/workspace/c.txt"]
        await ws.fs.rm("/workspace", recursive=True)
        assert not await ws.fs.exists("/workspace")


async def test_missing_file_raises_file_not_found_with_errno_and_path(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        with pytest.raises(FileNotFoundError) as info:
            await ws.fs.read_file("/nope/missing.txt")
        assert info.value.errno == errno.ENOENT
        assert info.value.filename == "/nope/missing.txt"


async def test_error_classes_cross_the_wire(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/d")
        await ws.fs.write_file("/d/f", b"x")
        with pytest.raises(FileExistsError):
            await ws.fs.mkdir("/d")
        with pytest.raises(IsADirectoryError):
            await ws.fs.read_file("/d")
        with pytest.raises(NotADirectoryError):
            await ws.fs.readdir("/d/f")
        with pytest.raises(PermissionError):
            await ws.fs.rm("/")
        with pytest.raises(OSError) as not_empty:
            await ws.fs.rm("/d")
        assert not_empty.value.errno == errno.ENOTEMPTY
        with pytest.raises(computer.FsInvalidError) as invalid:
            await ws.fs.stat("relative/path")
        assert isinstance(invalid.value, ValueError) and invalid.value.errno == errno.EINVAL


async def test_workspace_actor_and_name_reach_the_same_workspace(cluster: Settings, name: str) -> None:
    handle = computer.workspace_actor(name)
    async with computer.get_workspace(handle) as by_handle, computer.get_workspace(name) as by_name:
        await by_handle.fs.write_file("/shared", b"one")
        assert await by_name.fs.read_file("/shared") == b"one"
        assert by_handle.id == by_name.id


async def test_get_workspace_can_be_awaited(cluster: Settings, name: str) -> None:
    ws = await computer.get_workspace(name)
    try:
        await ws.fs.write_file("/x", b"1")
        assert await ws.fs.read_file("/x") == b"1"
    finally:
        await ws.close()


async def test_client_snapshots_backends_and_assets(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        assert isinstance(ws.runtime.backends(), list)
        assert ws.assets is not None


async def test_bad_workspace_names_are_rejected(cluster: Settings) -> None:
    for bad in ["", "a/b", "..", "x\x00y"]:
        with pytest.raises(computer.FsInvalidError):
            computer.workspace_actor(bad)


def test_unavailable_errors_cross_process_boundaries_whole() -> None:
    """Raised in an owner's constructor or a Ray task, these errors are pickled; ``OSError``'s pickling
    (``cls(errno, strerror, filename)``) did not fit their signature, and Ray replaced them with
    ``UnserializableException``, losing the message."""
    import pickle

    from computer.actors import OutcomeUnknownError, UploadLostError, WorkspaceUnavailableError

    for kind in (WorkspaceUnavailableError, OutcomeUnknownError, UploadLostError):
        back = pickle.loads(pickle.dumps(kind("ws-1", "why not")))
        assert type(back) is kind
        assert (back.errno, back.filename, back.strerror) == (11, "ws-1", "workspace unavailable: why not")


async def test_a_mapping_written_through_a_client_is_a_type_error_not_its_keys(
    cluster: Settings, name: str
) -> None:
    """A dict is iterable: through a client it was uploaded as pieces and the file held its keys."""
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        with pytest.raises(TypeError, match=r"not dict \(for JSON, pass json\.dumps\(data\)\)"):
            await ws.fs.write_file("/workspace/a.json", {"a": 1})  # type: ignore[arg-type]
        assert not await ws.fs.exists("/workspace/a.json")
