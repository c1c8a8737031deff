"""The ``delete`` tool: remove a file or directory; a missing path succeeds (forced removal)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..storage.paths import canonical
from ._input import Flag, ToolInput
from ._locks import PathLocks
from ._normal_forms import other_form
from ._tool import Tool, ToolUpdate
from .file_store import FileStore

__all__ = ["DeleteInput", "create_delete_tool"]

DELETE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"deleted": {"type": "string"}, "note": {"type": "string"}, "error": {"type": "string"}},
}


class DeleteInput(ToolInput):
    path: str = Field(description="Absolute path of the file or directory to delete.")
    recursive: Flag = Field(
        default=False, description="Delete a non-empty directory with everything below it."
    )


def create_delete_tool(store: FileStore) -> Tool:
    """The ``delete`` tool over ``store``; a recursive delete locks the whole subtree."""
    locks = PathLocks(store)

    async def handler(params: DeleteInput, on_update: ToolUpdate | None) -> dict[str, Any]:
        path = canonical(params.path)
        async with locks.hold([path], subtree=params.recursive, follow=False):
            if path.isascii():
                await store.remove(path, recursive=params.recursive, force=True)
                return {"deleted": path}
            try:  # not forced: a missing path is looked at (``_normal_forms``), then succeeds as forced
                await store.remove(path, recursive=params.recursive, force=False)
            except (FileNotFoundError, NotADirectoryError):
                other = await other_form(store, path)
                if other is not None:
                    return {"deleted": path, "note": f"nothing was at {path}; {other} (it was not deleted)"}
        return {"deleted": path}

    return Tool(
        name="delete",
        description=(
            "Delete a file or an empty directory from the workspace; set recursive to delete a directory "
            "with everything in it. Deleting a path that does not exist succeeds."
        ),
        input_model=DeleteInput,
        handler=handler,
        mutating=True,
        destructive=True,
        output_schema=DELETE_OUTPUT_SCHEMA,
    )
