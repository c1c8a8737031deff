"""Symlinks as an escape route: loops end in ELOOP, targets resolve inside the VFS, and in the shell
mirror a link to a host secret or to another workspace's mirror gives nothing."""

from __future__ import annotations

import errno
import json
from typing import Any

import pytest

import computer
from computer.runtime import ShellBackend
from computer.tools import Tool


async def test_a_symlink_loop_is_eloop_in_storage_and_an_error_in_the_tools(
    ws: computer.Workspace, tools: dict[str, Tool]
) -> None:
    await ws.fs.symlink("/workspace/b", "/workspace/a")
    await ws.fs.symlink("/workspace/a", "/workspace/b")
    await ws.fs.symlink("/workspace/self", "/workspace/self")
    for path in ("/workspace/a", "/workspace/self", "/workspace/a/deeper"):
        with pytest.raises(OSError) as info:
            await ws.fs.read_file(path)
        assert info.value.errno == errno.ELOOP
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read", {"path": "/workspace/a"}),
        ("write", {"path": "/workspace/self", "content": "x"}),
        ("edit", {"path": "/workspace/b", "edits": [{"oldText": "x", "newText": "y"}]}),
    ]
    for tool, args in calls:
        assert "error" in await tools[tool].run(args), tool
    # Listing and searching walk past the loops without following them.
    assert (await tools["find"].run({"path": "/workspace", "pattern": "**"}))["count"] == 3
    assert (await tools["grep"].run({"path": "/workspace", "query": "x"}))["count"] == 0
    assert (await tools["delete"].run({"path": "/workspace/a"}))["deleted"] == "/workspace/a"


@pytest.mark.parametrize("target", ["/etc/shadow", "../../../../../../etc/shadow", "/proc/self/environ"])
async def test_a_symlink_pointing_out_resolves_inside_the_vfs(
    ws: computer.Workspace, tools: dict[str, Tool], target: str
) -> None:
    await ws.fs.symlink(target, "/workspace/out")
    with pytest.raises(OSError) as info:
        await ws.fs.read_file("/workspace/out")
    assert info.value.errno in (errno.ENOENT, errno.EINVAL)
    result = await tools["read"].run({"path": "/workspace/out"})
    assert "error" in result
    # What the link reaches is the VFS's own /etc, never the host's.
    await ws.fs.mkdir("/etc")
    await ws.fs.write_file("/etc/shadow", "vfs shadow")
    if target == "/etc/shadow":
        assert (await tools["read"].run({"path": "/workspace/out"}))["content"] == "vfs shadow"


async def test_in_the_shell_a_link_to_host_secrets_gives_nothing(ws: computer.Workspace) -> None:
    await ws.fs.symlink("/etc/shadow", "/workspace/shadow")
    await ws.fs.symlink("/root", "/workspace/root")
    await ws.fs.symlink("/proc/1/root/etc/shadow", "/workspace/init-shadow")
    result = await (
        await ws.runtime.exec(
            "cat shadow root/.bashrc init-shadow 2>&1; ln -s /etc/passwd made; ln /etc/passwd hard 2>&1; "
            "cat /proc/1/cmdline; echo; id -u"
        )
    ).result()
    assert "root:" not in result.stdout
    assert result.stdout.strip().endswith("65534")
    assert (
        "bwrap" in result.stdout or "bash" in result.stdout
    )  # pid 1 is the sandbox's own, not the host init
    # A link made inside the sandbox is kept verbatim (SPEC section 10) and resolves only in the
    # workspace's own namespace, where /etc/passwd is not the host's (nothing there); a hard link to
    # a host file cannot even be made (other filesystem, not visible).
    assert await ws.fs.readlink("/workspace/made") == "/etc/passwd"
    assert not await ws.fs.exists("/workspace/made")
    assert not await ws.fs.exists("/workspace/hard")


async def test_in_the_shell_a_link_to_another_workspaces_mirror_gives_nothing(
    shell: ShellBackend, ws: computer.Workspace
) -> None:
    async with computer.Workspace(backends=[shell]) as other:
        await other.fs.mkdir("/workspace")
        await other.fs.write_file("/workspace/secret.txt", "other's secret")
        assert (await (await other.runtime.exec("cat secret.txt")).result()).stdout == "other's secret"
        mirrors = [p for p in shell.scratch.rglob("secret.txt")]
        assert mirrors, "the other workspace's mirror is on the host"
        host_secret = str(mirrors[0])
        await ws.fs.symlink(host_secret, "/workspace/peek")
        await ws.fs.symlink(str(shell.scratch), "/workspace/scratch")
        result = await (
            await ws.runtime.exec(
                f"cat peek 2>&1; ls -R scratch 2>&1; cat {host_secret} 2>&1; ls {shell.scratch} 2>&1; "
                "find / -name secret.txt -not -path '/proc/*' 2>/dev/null; true",
                timeout=60,
            )
        ).result()
    assert "other's secret" not in result.stdout
    assert "secret.txt" not in result.stdout.replace(host_secret, "")


async def test_links_in_tool_listings_report_links_not_their_targets(
    ws: computer.Workspace, tools: dict[str, Tool]
) -> None:
    await ws.fs.symlink("/etc", "/workspace/etc")
    listing: dict[str, Any] = await tools["ls"].run({"path": "/workspace"})
    assert [(e["name"], e["isSymbolicLink"]) for e in listing["entries"]] == [("etc", True)]
    assert "passwd" not in json.dumps(await tools["find"].run({"path": "/workspace", "pattern": "**"}))
