"""An owner wakes on the node that holds its file (a two-node cluster in its own process)."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray
from owner_models import kill_owner

import computer
from computer.actors import WorkspaceUnavailableError, open_directory
from computer.config import Settings


def _run_script(script: str, tmp_path: Path, *extra: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name(script)), str(tmp_path / "data"), *extra],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), (
        proc.stdout[-3000:] + proc.stderr[-5000:]
    )


@pytest.mark.slow
def test_owner_wakes_on_the_node_holding_its_file(tmp_path: Path) -> None:
    _run_script("_two_nodes.py", tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_a_workspace_on_a_node_local_disk_is_found_never_created_empty_elsewhere() -> None:
    """Issue 25 (1): owners on a second node with its own data directory die, the directory forgot them
    (Redis flushed) or never had them (an embedded directory per node); every workspace comes back with
    its bytes on that node, none empty on the head. A sleeping one whose record Redis lost is deleted
    from the head (its file there removed; before, ENOENT)."""
    short = Path(tempfile.mkdtemp(prefix="nl-", dir="/tmp"))  # Ray's socket paths must stay short
    try:
        _run_script("_node_local.py", short, str(short / "ray"))
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_a_new_workspace_refused_by_a_full_node_is_created_on_a_node_with_room() -> None:
    """A new name whose creation failed on a full node (its own disk, a second node in ``unshare``)
    kept its claim there: every later attempt, from any node, went back and failed; once the claim
    was dropped, a caller on the full node still placed it there again (both owner models). Now the
    refused call is placed again and created on the head, and later new names from the full node go
    there at once; the full node's existing workspace still opens there, never anew."""
    short = Path(tempfile.mkdtemp(prefix="fn-", dir="/tmp"))  # Ray's socket paths must stay short
    try:
        _run_script("_full_node.py", short, str(short / "ray"))
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.mark.slow
def test_a_workspace_opens_again_under_a_new_local_ray(tmp_path: Path) -> None:
    _run_script("_restart.py", tmp_path)


async def _stop_owner(name: str) -> None:
    """Kill the process owning ``name`` (its host, or its dedicated actor) and wait until it is gone."""
    await kill_owner(computer.workspace_actor(name))


async def _file_then_record(cluster: Settings, name: str, *, node: str, host: str) -> int:
    """Write a workspace, stop its owner, and make the directory say it lives on ``node``/``host``."""
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f", "kept")
    await _stop_owner(name)
    directory = open_directory(cluster)
    try:
        epoch = directory.acquire_lease(name, node, "earlier-owner", 30.0, host=host)
        assert directory.release_lease(name, "earlier-owner", epoch, hibernating=True)
    finally:
        directory.close()
    return epoch


async def test_a_dead_node_id_falls_back_to_an_alive_node_of_the_same_host(
    cluster: Settings, name: str
) -> None:
    from computer.actors._nodes import alive_nodes

    here = str(ray.get_runtime_context().get_node_id())
    host = alive_nodes()[here]
    epoch = await _file_then_record(cluster, name, node="f" * 56, host=host)
    async with computer.get_workspace(name) as ws:
        assert await ws.fs.read_text("/f") == "kept"
        stats = await ws.handle.stats.remote()
    assert (stats["node"], stats["host"], stats["epoch"]) == (here, host, epoch + 1)
    directory = open_directory(cluster)
    record = directory.get(name)
    directory.close()
    assert record is not None and (record.node, record.host) == (here, host)


async def test_a_file_on_a_host_without_alive_nodes_is_unavailable(cluster: Settings, name: str) -> None:
    # The file exists on this machine's path, but the directory says the workspace lives elsewhere.
    await _file_then_record(cluster, name, node="f" * 56, host="elsewhere/198.51.100.7")
    with pytest.raises(WorkspaceUnavailableError, match="elsewhere"):
        computer.workspace_actor(name)


def test_a_node_that_refused_a_new_workspace_for_lack_of_space_is_skipped_for_new_names_a_while(
    cluster: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule ``_full_node.py`` (slow, root) shows end to end, on made-up node ids: a node marked by a
    refused creation is skipped for a new name while an unmarked alive node exists, until its mark ends."""
    from computer.actors import _full_nodes
    from computer.actors._full_nodes import node_for_new, note_refused

    here, other, third = "a" * 56, "b" * 56, "c" * 56
    alive = {here: "h/192.0.2.1", other: "h/192.0.2.2", third: "h/192.0.2.3"}
    assert node_for_new(cluster, "n", here, alive) == here
    note_refused(cluster, here)
    chosen = node_for_new(cluster, "n", here, alive)
    assert chosen in (other, third)
    assert node_for_new(cluster, "n", here, alive) == chosen  # the full node's callers agree
    assert node_for_new(cluster, "n", other, alive) == other  # an unmarked caller keeps its own node
    assert node_for_new(cluster, "n", here, {here: alive[here]}) == here  # the only node
    note_refused(cluster, other)
    assert node_for_new(cluster, "n", here, alive) == third
    note_refused(cluster, third)
    assert node_for_new(cluster, "n", here, alive) == here  # every node full: refused where it is asked
    monkeypatch.setattr(_full_nodes, "FULL_REMEMBERED", -1.0)
    note_refused(cluster, other)  # a mark that has ended
    assert node_for_new(cluster, "n", here, alive) == other


async def _open_and_list(name: str) -> list[str]:
    async with computer.get_workspace(name) as ws:
        return list(await ws.fs.ls("/"))


@pytest.mark.parametrize("owners", ["dedicated", "hosted"])
async def test_a_known_workspace_whose_data_directory_is_unreachable_is_unavailable_never_empty(
    ray_session: object, tmp_path: Path, owners: str, name: str
) -> None:
    """Issue 25 (1): the data directory is unreachable (unmounted; a shared mount missing on a node) when
    a known workspace wakes. Before, its owner made the directory again and opened a new, empty
    workspace under the old name (``ls /`` was ``[]``, and its writes went there); now two clients
    racing to it get ``WorkspaceUnavailableError`` and nothing is created, the data is back with its
    directory, and a file lost for good is forgotten by ``delete_workspace(force=True)``. Dedicated, the
    refusal also needed the error to cross Ray (``WorkspaceUnavailableError`` did not pickle: the
    client got "describe failed in Ray (UnserializableException)") and to stay EAGAIN's class."""
    cluster = computer.init(data_dir=tmp_path / "data", owners=owners, shell_pool_size=0, python_pool_size=0)
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f", "kept")
    await _stop_owner(name)
    workspaces = cluster.workspaces_dir
    unmounted = workspaces.with_name("unmounted")
    workspaces.rename(unmounted)
    try:
        for _ in range(2):  # a refused owner leaves nothing a later call would open
            outcomes = await asyncio.gather(
                _open_and_list(name), _open_and_list(name), return_exceptions=True
            )
            for outcome in outcomes:
                assert isinstance(outcome, WorkspaceUnavailableError), outcome
                assert "missing" in str(outcome), outcome
        assert not workspaces.exists()
    finally:
        unmounted.rename(workspaces)
    async with computer.get_workspace(name) as ws:
        assert await ws.fs.read_text("/f") == "kept"
    await _stop_owner(name)
    for file in workspaces.glob(f"{name}.sqlite*"):
        file.unlink()  # lost for good
    with pytest.raises(WorkspaceUnavailableError):
        await _open_and_list(name)
    await computer.delete_workspace(name, force=True)
    async with computer.get_workspace(name) as ws:  # the name is new again
        assert await ws.fs.ls("/") == []
        await ws.fs.write_file("/g", "new")


async def test_a_deletion_in_progress_is_ebusy_and_one_that_died_midway_leaves_the_name_usable(
    cluster: Settings, name: str
) -> None:
    """A call placing a workspace while ``delete_workspace`` runs said "its file is on node deleting,
    which has no alive Ray node (set shared_data_dir if shared)": the deletion's lease names no node.
    It is EBUSY, as the owner's own lease refusal says. A deletion that died midway (its lease ran out,
    its record left) made the name unavailable for good; now the file is looked for as for a name
    without a record: its data when the file is still there, a new workspace when it was removed."""
    from computer.actors import take_lease
    from computer.actors.directory import DELETING
    from computer.actors.naming import workspace_file

    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f", "kept")
    await _stop_owner(name)
    path = workspace_file(cluster, name)
    directory = open_directory(cluster)
    try:
        take_lease(directory, name, path, node=DELETING, host=None, ttl=30.0)
        with pytest.raises(OSError) as busy:
            await _open_and_list(name)
        assert busy.value.errno == errno.EBUSY and "being deleted" in str(busy.value), busy.value
        take_lease(directory, name, path, node=DELETING, host=None, ttl=0.01)  # died before removing
        await asyncio.sleep(0.05)
        async with computer.get_workspace(name) as ws:
            assert await ws.fs.read_text("/f") == "kept"
        await _stop_owner(name)
        take_lease(directory, name, path, node=DELETING, host=None, ttl=0.01)  # died after removing
        for file in path.parent.glob(f"{name}.sqlite*"):
            file.unlink()
        await asyncio.sleep(0.05)
    finally:
        directory.close()
    async with computer.get_workspace(name) as ws:  # the name is new
        assert await ws.fs.ls("/") == []
        await ws.fs.write_file("/g", "new")


_OWNER_DIES_AFTER_ITS_LEASE = """
import os, sys
from computer.actors import _host
from computer.config import Settings
if sys.argv[2] == "die":
    _host.CallJournal = lambda *a, **k: os._exit(9)  # killed once its lease is taken, before it opened
host = _host.WorkspaceHost("fresh", config=Settings(data_dir=sys.argv[1], shell_pool_size=0, python_pool_size=0))
import asyncio
print(asyncio.run(host.workspace.fs.ls("/")))
"""


def test_an_owner_killed_while_creating_a_new_workspace_leaves_the_name_usable(tmp_path: Path) -> None:
    """A new name's owner killed after taking its lease and before making its file left a record
    without a file, which every later owner refused as a known workspace whose file is missing. The
    file is now made first (an owner killed between the two leaves a file and no record)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "COMPUTER_OWNERS")}

    def owner(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _OWNER_DIES_AFTER_ITS_LEASE, str(tmp_path / "data"), mode],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )

    assert owner("die").returncode == 9
    opened = owner("open")
    assert opened.returncode == 0 and opened.stdout.strip() == "[]", opened.stderr[-2000:]


def test_a_full_mark_ends_by_the_readers_own_time_and_when_its_node_creates_a_workspace(
    cluster: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mark's end was the marking node's wall time: a reader whose clock was behind skipped the node
    that much longer (an hour here), and a node that had room again was skipped all the same."""
    from computer.actors import _full_nodes
    from computer.actors._full_nodes import node_for_new, note_created, note_refused

    here, other, third = "d" * 56, "e" * 56, "f" * 56
    alive = {here: "h/192.0.2.1", other: "h/192.0.2.2", third: "h/192.0.2.3"}
    ahead = SimpleNamespace(time=lambda: time.time() + 3600.0, monotonic=time.monotonic)
    monkeypatch.setattr(_full_nodes, "time", ahead)  # the marking node's clock is an hour ahead
    note_refused(cluster, here)
    monkeypatch.setattr(_full_nodes, "time", time)
    assert node_for_new(cluster, "n", here, alive) != here  # first sight here: skipped
    later = time.monotonic() + _full_nodes.FULL_REMEMBERED + 1.0
    monkeypatch.setattr(_full_nodes, "time", SimpleNamespace(time=time.time, monotonic=lambda: later))
    assert node_for_new(cluster, "n", here, alive) == here  # 60 s after this process first saw it
    monkeypatch.setattr(_full_nodes, "time", time)
    note_refused(cluster, other)
    assert node_for_new(cluster, "n", other, alive) != other
    note_created(cluster, other)  # the disk was freed and a workspace made there
    assert node_for_new(cluster, "n", other, alive) == other
