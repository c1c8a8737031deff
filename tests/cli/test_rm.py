"""Deleting workspaces: ``computer.delete_workspace`` and ``computer rm``.

A deletion removes the owner, the SQLite file with its journal files, the directory record and the
share links (their URLs answer 404); it refuses a workspace a live client holds unless forced.
"""

from __future__ import annotations

import asyncio
import errno
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from owner_models import owner_awake
from typer.testing import CliRunner

import computer
from computer.actors.directory import SqliteDirectory
from computer.cli import app
from computer.cli._inprocess import in_process_workspace
from computer.config import configure

runner = CliRunner()


async def _status(url: str) -> int:
    """What `computer serve` answers for ``url`` (its app in process, no socket)."""
    from computer.assets import create_app

    transport = httpx.ASGITransport(app=create_app(base_path=""))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        return (await http.get(urlsplit(url).path)).status_code


def _blob_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and "blobs" in p.parts]


def _files(data_dir: Path, name: str) -> list[str]:
    return sorted(p.name for p in (data_dir / "workspaces").glob(f"{name}.sqlite*"))


async def test_delete_removes_file_journal_record_and_links_which_then_answer_404(tmp_path: Path) -> None:
    config = configure(data_dir=tmp_path)
    async with in_process_workspace(config, "doomed", backends=False, assets=True) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        await ws.fs.write_file("/workspace/report.md", "# report\n")
        assert ws.assets is not None
        url = await ws.assets.share("/workspace/report.md")
        assert await _status(url) == 200
        assert _files(tmp_path, "doomed") == ["doomed.sqlite", "doomed.sqlite-shm", "doomed.sqlite-wal"]

    deleted = await computer.delete_workspace("doomed")

    assert (deleted.name, deleted.links, deleted.owner_stopped) == ("doomed", 1, False)
    assert deleted.bytes > 0
    assert await _status(url) == 404
    assert _files(tmp_path, "doomed") == []
    directory = SqliteDirectory(tmp_path / "directory.sqlite")
    try:
        assert directory.get("doomed") is None and "doomed" not in directory.names()
    finally:
        directory.close()


async def test_delete_keeps_other_workspaces_and_their_links(tmp_path: Path) -> None:
    config = configure(data_dir=tmp_path)
    urls = {}
    for name in ("keep", "keep-not"):
        async with in_process_workspace(config, name, backends=False, assets=True) as ws:
            await ws.fs.mkdir("/workspace", recursive=True)
            await ws.fs.write_file("/workspace/a.txt", name)
            assert ws.assets is not None
            urls[name] = await ws.assets.share("/workspace/a.txt")
    await computer.delete_workspace("keep-not")
    assert await _status(urls["keep"]) == 200 and await _status(urls["keep-not"]) == 404
    assert _files(tmp_path, "keep") and not _files(tmp_path, "keep-not")


async def test_delete_of_an_unknown_workspace_is_file_not_found(tmp_path: Path) -> None:
    configure(data_dir=tmp_path)
    with pytest.raises(FileNotFoundError) as caught:
        await computer.delete_workspace("never-was")
    assert caught.value.filename == "never-was"


async def test_delete_refuses_a_workspace_awake_in_another_process_unless_forced(tmp_path: Path) -> None:
    configure(data_dir=tmp_path)
    directory = SqliteDirectory(tmp_path / "directory.sqlite")
    directory.acquire_lease("busy", "process:4242@elsewhere", "owner-1", 60.0)
    directory.close()
    with pytest.raises(OSError) as caught:
        await computer.delete_workspace("busy")
    assert caught.value.errno == errno.EBUSY and caught.value.filename == "busy"
    assert "in process 4242 on elsewhere" in str(caught.value)
    # What to do: end that program (it said "connect to its cluster first": there is none).
    assert "end the program holding it" in str(caught.value) and "cluster" not in str(caught.value)

    assert (await computer.delete_workspace("busy", force=True)).name == "busy"


async def test_a_forced_delete_fences_the_owner_still_running(tmp_path: Path) -> None:
    config = configure(data_dir=tmp_path)
    async with in_process_workspace(config, "zombie", backends=False, assets=False) as ws:
        await ws.fs.write_file("/before", "x")
        await computer.delete_workspace("zombie", force=True)
        with pytest.raises(OSError) as caught:
            await ws.fs.write_file("/after", "y")
        assert caught.value.errno == errno.EROFS
    assert _files(tmp_path, "zombie") == []


# -- through a cluster ------------------------------------------------------------------------------


async def test_delete_stops_an_idle_cluster_owner(cluster: Any, name: str) -> None:
    """In either owner model (a dedicated actor, or the owner host holding it: ``owner_models``)."""
    async with computer.get_workspace(name) as client:
        await client.fs.write_file("/note", "kept until deleted")
    assert await owner_awake(name, cluster)
    from computer.cli import GlobalOptions, list_workspaces

    (row,) = await asyncio.to_thread(list_workspaces, GlobalOptions(data_dir=cluster.data_dir))
    assert row.name == name and row.node is not None and not row.node.startswith("process:")  # a Ray node

    deleted = await computer.delete_workspace(name)

    assert deleted.owner_stopped
    assert not await owner_awake(name, cluster)
    assert _files(cluster.data_dir, name) == []
    assert await asyncio.to_thread(list_workspaces, GlobalOptions(data_dir=cluster.data_dir)) == []
    async with computer.get_workspace(name) as again:  # the name starts over, empty
        with pytest.raises(FileNotFoundError):
            await again.fs.read_file("/note")


async def test_delete_refuses_a_workspace_whose_client_holds_a_lock(cluster: Any, name: str) -> None:
    async with computer.get_workspace(name) as client:
        await client.fs.write_file("/counter", "0")
        async with client.locks.hold(["/counter"]):
            with pytest.raises(OSError) as caught:
                await computer.delete_workspace(name)
            assert caught.value.errno == errno.EBUSY
            assert "1 lock(s) held" in str(caught.value)
            assert await client.fs.read_text("/counter") == "0"  # untouched, owner still serving
        deleted = await computer.delete_workspace(name)
    assert deleted.owner_stopped and _files(cluster.data_dir, name) == []


async def test_a_forced_delete_of_a_held_workspace_stops_its_owner(cluster: Any, name: str) -> None:
    async with computer.get_workspace(name) as client:
        await client.fs.write_file("/counter", "0")
        async with client.locks.hold(["/counter"]):
            deleted = await computer.delete_workspace(name, force=True)
            assert deleted.owner_stopped and _files(cluster.data_dir, name) == []
        # The client lives on: its next call starts the name over, as an empty workspace.
        with pytest.raises(FileNotFoundError):
            await client.fs.read_file("/counter")


async def test_delete_right_after_the_owner_process_died_goes_at_once(cluster: Any, name: str) -> None:
    """The killed owner (its host, or its dedicated actor) still held a live lease: ``ls`` listed it
    awake with its dead pid and ``delete_workspace`` refused, "connect to its cluster first" to a
    caller that was, for the rest of the lease (28.4 s). Ray knows the owner is dead; so does this
    machine, by the pid its lease names."""
    import dataclasses

    from owner_models import kill_owner

    from computer.actors._lease import awake, ray_owner_gone
    from computer.actors.directory import open_directory
    from computer.cli import GlobalOptions, list_workspaces

    async with computer.get_workspace(name) as client:
        await client.fs.write_file("/note", "x")
    directory = open_directory(cluster)
    try:
        alive = directory.get(name)
        assert alive is not None and awake(alive) and not ray_owner_gone(alive)
        await kill_owner(computer.workspace_actor(name))
        dead = directory.get(name)
    finally:
        directory.close()
    assert dead is not None and dead.lease_live()
    deadline = time.monotonic() + 10  # the process ends a moment after Ray stops answering for it
    while awake(dead):
        assert time.monotonic() < deadline, "the killed owner's process lives on"
        await asyncio.sleep(0.05)
    (row,) = await asyncio.to_thread(list_workspaces, GlobalOptions(data_dir=cluster.data_dir))
    assert (row.name, row.state) == (name, "asleep")
    # An owner of another machine: this one cannot look at its pid, Ray's actor table can.
    from computer.actors._lease import place

    assert dead.owner is not None and f"~{place()}/" in dead.owner  # the owner's place: this one
    elsewhere = dataclasses.replace(
        dead, host="another-machine/10.0.0.8", owner=dead.owner.replace(f"~{place()}/", f"~{'0' * 12}/")
    )
    assert awake(elsewhere) and await asyncio.to_thread(ray_owner_gone, elsewhere)
    async with asyncio.timeout(20):  # the lease has 25 s or more left
        deleted = await computer.delete_workspace(name)
    assert deleted.name == name and _files(cluster.data_dir, name) == []


# -- the command -------------------------------------------------------------------------------------


def _make(data_dir: Path, *names: str) -> None:
    for name in names:
        result = runner.invoke(
            app,
            ["--data-dir", str(data_dir), "tool", name, "write", '{"path": "/workspace/a", "content": "a"}'],
        )
        assert result.exit_code == 0, result.output


def _names(data_dir: Path) -> list[str]:
    result = runner.invoke(app, ["--data-dir", str(data_dir), "ls", "--json"])
    return [row["name"] for row in json.loads(result.output)]


def test_rm_prefix_deletes_only_the_matching_workspaces(tmp_path: Path) -> None:
    _make(tmp_path, "demo-agent-0", "demo-agent-1", "mine")
    result = runner.invoke(app, ["--data-dir", str(tmp_path), "rm", "--prefix", "demo-", "--yes"])
    assert result.exit_code == 0, result.output
    assert "deleted demo-agent-0" in result.output and "deleted demo-agent-1" in result.output
    assert _names(tmp_path) == ["mine"]
    again = runner.invoke(app, ["--data-dir", str(tmp_path), "rm", "--prefix", "demo-", "--yes"])
    assert again.exit_code == 0 and "no workspace starts with 'demo-'" in again.output


def test_rm_asks_first_and_without_a_terminal_needs_yes(tmp_path: Path) -> None:
    _make(tmp_path, "precious")
    result = runner.invoke(app, ["--data-dir", str(tmp_path), "rm", "precious"])
    assert result.exit_code == 2 and "--yes" in result.output
    assert _names(tmp_path) == ["precious"]


def test_rm_of_an_unknown_name_fails_and_deletes_nothing_else_by_mistake(tmp_path: Path) -> None:
    _make(tmp_path, "real")
    result = runner.invoke(app, ["--data-dir", str(tmp_path), "rm", "unreal", "--yes"])
    assert result.exit_code == 1 and "no workspace named 'unreal' (`computer ls` lists them)" in result.output
    assert _names(tmp_path) == ["real"]


def test_rm_without_names_or_prefix_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--data-dir", str(tmp_path), "rm", "--yes"])
    assert result.exit_code == 2 and "--prefix" in result.output


def test_rm_refuses_a_workspace_awake_on_a_cluster_unless_forced(tmp_path: Path) -> None:
    _make(tmp_path, "shared")
    directory = SqliteDirectory(tmp_path / "directory.sqlite")
    directory.acquire_lease("shared", "a" * 56, "cluster-owner", 60.0, host="box/10.0.0.9")
    directory.close()
    refused = runner.invoke(app, ["--data-dir", str(tmp_path), "rm", "shared", "--yes"])
    assert refused.exit_code == 1 and "not deleted: shared" in refused.output
    assert "on node aaaaaaaa (box)" in refused.output and "--force" in refused.output
    forced = runner.invoke(app, ["--data-dir", str(tmp_path), "rm", "shared", "--yes", "--force"])
    assert forced.exit_code == 0 and _names(tmp_path) == []


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_each_store_removes_exactly_one_workspaces_links(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import time
    import uuid

    from computer.assets import AssetRecord, RedisAssetStore, SqliteAssetStore, new_asset_id

    def record(filename: str, workspace_id: str) -> AssetRecord:
        now = time.time()
        return AssetRecord(
            f"{new_asset_id()}/{filename}",
            filename,
            "text/plain",
            "inline",
            now,
            now + 60,
            workspace_id=workspace_id,
        )

    async def pieces(data: bytes) -> Any:
        yield data

    store: Any
    if kind == "sqlite":
        store = SqliteAssetStore(tmp_path / "assets")
    else:
        url = request.getfixturevalue("redis_url")
        store = RedisAssetStore(
            url, tmp_path / "blobs", namespace=f"test:{uuid.uuid4().hex}", inline_max_bytes=8
        )
    try:
        mine = [record(f"m{i}.txt", "doomed") for i in range(3)]
        other = record("o.txt", "kept")
        for record, data in [*((r, b"large enough to spill to a blob") for r in mine), (other, b"x")]:
            await store.put(record, pieces(data))
        assert await store.delete_workspace_links("doomed") == 3
        assert [await store.get(r.key) for r in mine] == [None, None, None]
        assert await store.get(other.key) is not None
        assert await store.delete_workspace_links("doomed") == 0
        assert (
            len(_blob_files(tmp_path)) <= 1
        )  # the kept link's blob, if it spilled to one; none of the deleted ones
    finally:
        await store.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_directory_forgets_a_name_only_for_the_owner_of_its_lease(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import uuid

    from computer.actors.directory import Directory, RedisDirectory

    directory: Directory
    if kind == "sqlite":
        directory = SqliteDirectory(tmp_path / "directory.sqlite")
    else:
        directory = RedisDirectory(request.getfixturevalue("redis_url"), prefix=f"test:{uuid.uuid4().hex}:")
    try:
        directory.acquire_lease("ws", "n", "owner-1", 30.0)
        directory.acquire_lease("other", "n", "owner-2", 30.0)
        directory.acquire_lease("ws", "n", "owner-3", 30.0)  # taken over meanwhile
        assert directory.remove("ws", "owner-1") is False
        assert directory.get("ws") is not None
        assert directory.remove("ws", "owner-3") is True
        assert directory.get("ws") is None and directory.names() == ["other"]
        assert directory.remove("ws", "owner-3") is False
    finally:
        directory.close()


async def test_delete_removes_every_companion_file_but_never_another_workspaces(tmp_path: Path) -> None:
    configure(data_dir=tmp_path)
    folder = tmp_path / "workspaces"
    folder.mkdir()
    for file in (
        "a.sqlite",
        "a.sqlite-wal",
        "a.sqlite-reserve",
        "a.sqlite-x.sqlite",
        "a.sqlite-x.sqlite-wal",
        "ab.sqlite",
    ):
        (folder / file).write_bytes(b"")
    from computer.actors._delete import workspace_files
    from computer.config import settings

    assert [p.name for p in workspace_files(settings(), "a")] == [
        "a.sqlite",
        "a.sqlite-reserve",
        "a.sqlite-wal",
    ]


def test_rm_shows_names_with_terminal_codes_escaped(tmp_path: Path) -> None:
    """A workspace name is whatever made it (only "/" and NUL are refused): ``rm`` listed and reported
    ``demo-\\x1b[2J`` as is (clearing the terminal), while ``ls`` escapes it."""
    _make(tmp_path, "demo-\x1b[2J")
    result = runner.invoke(app, ["--data-dir", str(tmp_path), "rm", "--prefix", "demo-", "--yes"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "deleted demo-\\x1b[2J" in result.output
    assert _names(tmp_path) == []


def test_rm_of_an_unreadable_store_escapes_its_name_in_both_outcomes(tmp_path: Path) -> None:
    """The two lines ``rm`` writes for a store it cannot read (refused, then deleted with ``--force``)
    printed the name raw: a file ``junk\\x1b[2J.sqlite`` cleared the terminal twice."""
    _make(tmp_path, "w1")
    (tmp_path / "workspaces" / "junk\x1b[2J.sqlite").write_text("garbage\n")
    refused = runner.invoke(app, ["--data-dir", str(tmp_path), "rm", "junk\x1b[2J", "--yes"])
    assert refused.exit_code == 1, refused.output
    assert "not deleted: junk\\x1b[2J" in refused.output and "\x1b" not in refused.output
    forced = runner.invoke(app, ["--data-dir", str(tmp_path), "rm", "junk\x1b[2J", "--yes", "--force"])
    assert forced.exit_code == 0, forced.output
    assert "deleted junk\\x1b[2J" in forced.output and "\x1b" not in forced.output
    assert _names(tmp_path) == ["w1"]
