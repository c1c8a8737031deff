"""The ``ls`` tool: one directory page, in name order, with file metadata."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..storage.paths import canonical
from ..surface import WorkspaceSurface
from ._input import MAX_PAGE, PagedInput, budgeted, paged
from ._tool import Tool, ToolUpdate

__all__ = ["ListInput", "create_list_tool"]


class ListInput(PagedInput):
    path: str = Field(description="Absolute path of the directory to list, e.g. /workspace.")


def create_list_tool(workspace: WorkspaceSurface) -> Tool:
    """The ``ls`` tool over ``workspace.fs.readdir`` (one call per page, ``limit + 1`` entries)."""
    fs = workspace.fs

    async def handler(params: ListInput, on_update: ToolUpdate | None) -> dict[str, Any]:
        path = canonical(params.path)
        page, next_offset = paged(
            await fs.readdir(path, limit=params.limit + 1, offset=params.offset), params.limit, params.offset
        )
        entries, next_offset = budgeted(
            [
                {
                    "name": e.name,
                    "size": e.size,
                    "mtime": e.mtime,
                    "isFile": e.is_file,
                    "isDirectory": e.is_directory,
                    "isSymbolicLink": e.is_symlink,
                }
                for e in page
            ],
            next_offset,
            params.offset,
        )
        result: dict[str, Any] = {"path": path, "count": len(entries), "entries": entries}
        if next_offset is not None:
            result["nextOffset"] = next_offset
        return result

    return Tool(
        name="ls",
        description=(
            "List one directory of the workspace: name, size, mtime (ms) and type of each entry, in name "
            f"order. Returns at most limit entries (default 200, maximum {MAX_PAGE}), fewer when their "
            "names are long; when more remain the result has nextOffset: pass it as offset to get the next page."
        ),
        input_model=ListInput,
        handler=handler,
    )
