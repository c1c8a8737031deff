"""Agent tools over a workspace: read, ls, find, grep, write, edit, delete (plus exec and publish, and
the optional processes and kill).

Library-neutral :class:`Tool` objects; one adapter module per agent library wraps them. Importing
this package imports no agent library and no Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._options import EditOptions, LineTruncation, ReadOptions, WriteOptions
from ._tool import ERROR_CHARS, ContentPart, Tool, ToolUpdate
from .delete import create_delete_tool
from .edit import create_edit_tool
from .file_store import FileStore, FileStoreStat
from .find import create_find_tool
from .grep import create_grep_tool
from .ls import create_list_tool
from .processes import create_kill_tool, create_processes_tool
from .read import create_read_tool
from .tool_set import create_tools
from .workspace_store import WorkspaceFileStore
from .write import create_write_tool

if TYPE_CHECKING:
    from .exec import create_exec_tool
    from .publish import create_publish_tool

__all__ = [
    "ERROR_CHARS",
    "ContentPart",
    "EditOptions",
    "FileStore",
    "FileStoreStat",
    "LineTruncation",
    "ReadOptions",
    "Tool",
    "ToolUpdate",
    "WorkspaceFileStore",
    "WriteOptions",
    "create_delete_tool",
    "create_edit_tool",
    "create_exec_tool",
    "create_find_tool",
    "create_grep_tool",
    "create_kill_tool",
    "create_list_tool",
    "create_processes_tool",
    "create_publish_tool",
    "create_read_tool",
    "create_tools",
    "create_write_tool",
]

# exec and publish are other engineers' modules: loaded on first use so a missing or broken one never
# breaks the file tools.
_LAZY = {"create_exec_tool": ".exec", "create_publish_tool": ".publish"}


def __getattr__(name: str) -> Any:
    from ..lazy import lazy_attribute

    return lazy_attribute(__name__, _LAZY, name)
