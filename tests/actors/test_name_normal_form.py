"""Workspace names in Unicode normal forms (``naming.check_new_name``): ``"café"`` composed (NFC) and
decomposed (NFD) were two workspaces, two files and two owners. A new workspace's name must be NFC;
one already stored under another spelling stays reachable by it, nothing lost."""

from __future__ import annotations

import errno
import unicodedata
from typing import Any

import pytest

import computer
from computer.actors import NAMESPACE, actor_name
from computer.actors.naming import workspace_file
from computer.config import Settings


def _spellings(name: str) -> tuple[str, str]:
    nfc = unicodedata.normalize("NFC", f"{name}-café")
    return nfc, unicodedata.normalize("NFD", nfc)


def _kill(ray_session: Any, workspace: str) -> None:
    try:
        ray_session.kill(ray_session.get_actor(actor_name(workspace), namespace=NAMESPACE))
    except ValueError:
        pass  # never created, or hosted (the name fixture stops the hosts)


async def test_a_new_workspace_named_in_another_normal_form_is_einval_naming_the_nfc_form(
    cluster: Settings, name: str, ray_session: Any
) -> None:
    nfc, nfd = _spellings(name)
    assert nfc != nfd
    try:
        with pytest.raises(OSError) as info:
            async with computer.get_workspace(nfd):
                pass
        assert info.value.errno == errno.EINVAL
        assert repr(nfc) in str(info.value), info.value
        with pytest.raises(OSError) as again:
            computer.workspace_actor(nfd)
        assert again.value.errno == errno.EINVAL
        assert not workspace_file(cluster, nfd).exists()  # nothing made under that spelling
        async with computer.get_workspace(nfc) as ws:  # the NFC spelling is the workspace
            await ws.fs.write_file("/a.txt", b"composed")
            assert await ws.fs.read_file("/a.txt") == b"composed"
    finally:
        _kill(ray_session, nfd)
        _kill(ray_session, nfc)


async def test_a_workspace_stored_under_a_decomposed_name_stays_reachable(
    cluster: Settings, name: str, ray_session: Any
) -> None:
    _, nfd = _spellings(name)
    path = workspace_file(cluster, nfd)  # as a release before the rule made it
    path.parent.mkdir(parents=True, exist_ok=True)
    async with computer.Workspace(path=str(path)) as made:
        await made.fs.write_file("/kept.txt", b"still here")
    try:
        async with computer.get_workspace(nfd) as ws:
            assert await ws.fs.read_file("/kept.txt") == b"still here"
            await ws.fs.write_file("/more.txt", b"and writable")
        async with computer.get_workspace(nfd) as ws:
            assert await ws.fs.read_file("/more.txt") == b"and writable"
    finally:
        _kill(ray_session, nfd)
