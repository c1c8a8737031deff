"""Hostile paths in every path argument of every tool: always an error or a path inside the VFS.

The host is watched directly: a marker file outside the workspace must never show up in a result, and
host files must stay byte-identical whatever the tools were asked to write or delete.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.storage.paths import canonical
from computer.tools import Tool

HOSTILE_PATHS = [
    "",
    ".",
    "..",
    "/..",
    "/../",
    "/../../etc/passwd",
    "/workspace/../../etc/passwd",
    "/workspace/../../../../../../../../etc/shadow",
    "../../etc/passwd",
    "etc/passwd",
    "./workspace",
    "~/.ssh/id_rsa",
    "\x00",
    "/workspace/a\x00b",
    "/etc/passwd\x00.txt",
    "\\..\\..\\etc\\passwd",
    "/workspace\\..\\..\\etc\\passwd",
    "C:\\Windows\\system32",
    "//etc//passwd",
    "/workspace/%2e%2e/%2e%2e/etc/passwd",
    "/workspace/\u2025/\uff0e\uff0e/etc",
    "/proc/self/environ",
    "/etc/shadow",
    "file:///etc/passwd",
    "/" + "a" * 5000,
    "/workspace/" + "b" * 300,
    "/workspace/" + "/".join(["c"] * 3000),
    "/workspace/\udcff",
]

# (tool, argument) pairs that name a path, with the other arguments a valid call needs.
PATH_ARGUMENTS: list[tuple[str, str, dict[str, Any]]] = [
    ("read", "path", {}),
    ("write", "path", {"content": "vfs only"}),
    ("edit", "path", {"edits": [{"oldText": "root", "newText": "owned"}]}),
    ("delete", "path", {"recursive": True}),
    ("ls", "path", {}),
    ("find", "path", {"pattern": "**"}),
    ("find", "pattern", {"path": "/"}),
    ("find", "exclude", {"path": "/", "pattern": "**"}),
    ("grep", "path", {"query": "root"}),
    ("grep", "include", {"path": "/", "query": "root"}),
    ("grep", "exclude", {"path": "/", "query": "root"}),
    ("exec", "cwd", {"backend": "shell", "command": "pwd; cat /etc/passwd"}),
    ("publish", "path", {}),
]

BAD_INPUT_COUNT = len(HOSTILE_PATHS) * len(PATH_ARGUMENTS)


@pytest.fixture
def host_marker(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A file on the host, outside any workspace, whose content must never reach a tool result."""
    secret = f"host-secret-{secrets.token_hex(8)}"
    path = tmp_path / "host-secret.txt"
    path.write_text(secret)
    yield path, secret


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _paths_in(result: Any) -> Iterator[str]:
    """Every value a result gives under a key naming a path."""
    if isinstance(result, dict):
        for key, value in result.items():
            if key in ("path", "deleted") and isinstance(value, str):
                yield value
            else:
                yield from _paths_in(value)
    elif isinstance(result, list):
        for item in result:
            yield from _paths_in(item)


async def test_every_path_argument_answers_hostile_paths_with_an_error_or_a_vfs_path(
    ws: computer.Workspace,
    tools: dict[str, Tool],
    host_marker: tuple[Path, str],
    record_property: Any,
) -> None:
    marker_path, secret = host_marker
    host_files = ["/etc/passwd", "/etc/hostname", str(marker_path)]
    before = {p: _digest(p) for p in host_files}
    await ws.fs.write_file("/workspace/notes.txt", "root in the vfs\n")
    hostile = [*HOSTILE_PATHS, str(marker_path), f"/workspace/../..{marker_path}"]
    errors = inside = 0
    for tool, argument, base in PATH_ARGUMENTS:
        for bad in hostile:
            args = {**base, argument: [bad] if argument == "exclude" else bad}
            result = await tools[tool].run(args)
            text = json.dumps(result)
            assert secret not in text, (tool, argument, bad)
            assert "root:x:0:0" not in text, (tool, argument, bad)  # the host's /etc/passwd
            if "error" in result or result.get("ok") is False or result.get("status") == "failed":
                errors += 1
                continue
            inside += 1
            for path in _paths_in(result):
                assert path.startswith("/") and canonical(path) == path, (tool, argument, bad, path)
    assert errors + inside == len(PATH_ARGUMENTS) * len(hostile)
    assert errors > inside  # most are refused outright; the rest landed inside the VFS
    assert {p: _digest(p) for p in host_files} == before
    assert marker_path.read_text() == secret
    for entry in await ws.fs.find("/"):
        assert canonical(entry.path) == entry.path
    record_property("bad_inputs", errors + inside)
    record_property("bad_inputs_refused", errors)
    record_property("bad_inputs_kept_inside", inside)


async def test_a_write_to_a_host_looking_path_lands_in_the_vfs_only(
    ws: computer.Workspace, tools: dict[str, Tool]
) -> None:
    before = _digest("/etc/passwd")
    assert (await tools["write"].run({"path": "//etc//passwd", "content": "vfs\n"}))["path"] == "/etc/passwd"
    assert await ws.fs.read_text("/etc/passwd") == "vfs\n"
    assert (await tools["read"].run({"path": "/workspace/../etc/passwd"}))["content"] == "vfs"
    assert (await tools["delete"].run({"path": "/etc/passwd"}))["deleted"] == "/etc/passwd"
    assert _digest("/etc/passwd") == before


async def test_backslashes_are_ordinary_name_characters_not_separators(
    ws: computer.Workspace, tools: dict[str, Tool]
) -> None:
    result = await tools["write"].run({"path": "/workspace/..\\..\\evil", "content": "x"})
    assert result["path"] == "/workspace/..\\..\\evil"
    assert [e.name for e in await ws.fs.readdir("/workspace")] == ["..\\..\\evil"]
