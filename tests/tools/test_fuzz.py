"""Arbitrary JSON-like arguments: every tool returns a dict, never raises, and an error changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computer import Workspace
from computer.tools import (
    create_delete_tool,
    create_edit_tool,
    create_read_tool,
    create_tools,
    create_write_tool,
)

from .directory_store import DirectoryFileStore

SEED_FILES = {
    "/workspace/a.txt": b"alpha\nbeta\r\ngamma \xe2\x80\x9cq\xe2\x80\x9d\n",
    "/workspace/sub/b.py": b"print('hi')\n" * 3,
    "/workspace/sub/img.png": b"\x89PNG\r\n\x1a\nxx",
    "/workspace/bin": b"\x00\x01\x02",
    "/workspace/\xc3\xbc 50%.txt": b"x\n",
}
PATHS = [
    *SEED_FILES,
    "/workspace",
    "/workspace/sub",
    "/",
    "/missing/x",
    "/workspace/../workspace/a.txt",
    "rel",
]
KEYS = [
    "path", "content", "offset", "byteOffset", "limit", "edits", "oldText", "newText", "pattern",
    "query", "include", "exclude", "regex", "ignoreCase", "context", "recursive",
]  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 3000) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
edit_items = st.lists(
    st.fixed_dictionaries(
        {"oldText": st.sampled_from(["alpha", "beta", "", "q", "“q”", '"q"', "zzz"]) | st.text(max_size=6)},
        optional={"newText": st.text(max_size=6) | json_values},
    ),
    max_size=3,
)
arguments = (
    st.fixed_dictionaries(
        {},
        optional={
            "path": st.sampled_from(PATHS) | json_values,
            **{key: json_values for key in KEYS if key not in ("path", "edits")},
            "edits": edit_items | json_values,
        },
    )
    | json_values
)

TOOL_NAMES = ["read", "ls", "find", "grep", "write", "edit", "delete"]


async def seeded_workspace() -> Workspace:
    ws = Workspace()
    for path, data in SEED_FILES.items():
        await ws.fs.mkdir(path.rsplit("/", 1)[0] or "/", recursive=True)
        await ws.fs.write_file(path, data)
    return ws


async def workspace_state(ws: Workspace) -> tuple[Any, ...]:
    entries = await ws.fs.find("/")
    contents = {e.path: await ws.fs.read_file(e.path) for e in entries if e.type == "file"}
    modes = {e.path: (await ws.fs.stat(e.path)).mode for e in entries}
    return ws.fs.rev, sorted((e.path, e.type) for e in entries), contents, modes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(TOOL_NAMES), args=arguments)
async def test_tools_never_raise_and_errors_change_nothing(name: str, args: Any) -> None:
    ws = await seeded_workspace()
    try:
        tool = create_tools(ws)[name]
        before = await workspace_state(ws)
        result = await tool.run(args)
        assert isinstance(result, dict)
        if "error" in result:
            assert isinstance(result["error"], str) and result["error"]
            assert await workspace_state(ws) == before
        tool.to_model_output(result)  # converting any result works too
    finally:
        await ws.close()


def directory_state(root: Path) -> list[tuple[str, bytes | None, int]]:
    return sorted(
        (str(p.relative_to(root)), p.read_bytes() if p.is_file() else None, p.stat().st_mode)
        for p in root.rglob("*")
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["read", "write", "edit", "delete"]), args=arguments)
async def test_file_tools_over_a_custom_store_never_raise_and_errors_change_nothing(
    tmp_path_factory: Any, name: str, args: Any
) -> None:
    root: Path = tmp_path_factory.mktemp("fuzz")
    for path, data in SEED_FILES.items():
        host = root / path.lstrip("/")
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(data)
    store = DirectoryFileStore(root)
    factories = {
        "read": create_read_tool,
        "write": create_write_tool,
        "edit": create_edit_tool,
        "delete": create_delete_tool,
    }
    before = directory_state(root)
    result = await factories[name](store).run(args)
    assert isinstance(result, dict)
    if "error" in result:
        assert directory_state(root) == before
