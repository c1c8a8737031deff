"""The ``write`` tool: create or overwrite a whole file (parents created, mode kept, UTF-8 byte cap)."""

from __future__ import annotations

import errno
from typing import Any

from pydantic import Field

from ..storage.paths import canonical
from ._input import ToolInput, utf8_of
from ._locks import PathLocks
from ._options import WriteOptions, coerce_options
from ._sizes import human_bytes
from ._tool import Tool, ToolUpdate
from .file_store import FileStore

__all__ = ["WriteInput", "create_write_tool", "names_a_directory"]

WRITE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "bytesWritten": {"type": "integer"},
        "error": {"type": "string"},
    },
}


class WriteInput(ToolInput):
    path: str = Field(description="Absolute path of the file to create or overwrite.")
    content: str = Field(description="The complete new content of the file (UTF-8 text).")


def names_a_directory(path: str) -> bool:
    """Whether ``path`` as spelled ends in ``/``, ``/.`` or ``/..``: it names a directory, so write
    refuses it (EISDIR, as ``open("d/", O_CREAT)`` does). Its canonical form drops the ending, and
    ``write {"path": "/workspace/src/"}`` (a model making a directory) made a file named ``src``."""
    return path.rsplit("/", 1)[-1] in ("", ".", "..") and path.strip("/") != ""


def create_write_tool(store: FileStore, **write_options: Any) -> Tool:
    """The ``write`` tool over ``store``; keyword options are :class:`WriteOptions` fields."""
    options = coerce_options(WriteOptions, write_options.pop("options", None), **write_options)
    locks = PathLocks(store)
    cap = human_bytes(options.max_bytes)
    # The cap as a byte count too: a rounded size ("2 MiB over the 2 MiB cap") reads as no excess.
    exact_cap = cap if options.max_bytes < 1024 else f"{cap} ({options.max_bytes}-byte)"

    async def handler(params: WriteInput, on_update: ToolUpdate | None) -> dict[str, Any]:
        path = canonical(params.path)
        if names_a_directory(params.path):
            raise IsADirectoryError(
                errno.EISDIR,
                "path ends with '/' (or '/.', '/..'), so it names a directory, not a file: give the file's "
                "own path (write creates missing parent directories itself)",
                params.path,
            )
        data = utf8_of(params.content, "content", path)
        if len(data) > options.max_bytes:
            raise ValueError(
                f"content is {len(data)} bytes ({human_bytes(len(data))}), over the {exact_cap} write cap. "
                "Use edit for targeted "
                "changes to an existing file, or split the content into several smaller files."
            )
        async with locks.hold([path]):
            await store.write(path, data)
        return {"path": path, "bytesWritten": len(data)}

    return Tool(
        name="write",
        description=(
            "Write a file in the workspace: creates it (and any missing parent directories) or replaces "
            f"its whole content. An existing file keeps its mode. Content is limited to {cap} of UTF-8; "
            "to change part of an existing file use edit instead."
        ),
        input_model=WriteInput,
        handler=handler,
        mutating=True,
        destructive=True,
        output_schema=WRITE_OUTPUT_SCHEMA,
    )
