"""``create_tools``: the default tool set of a workspace (owner or client)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..surface import WorkspaceSurface
from ._forward import forward_tools, forwarded_options, tool_runner
from ._options import EditOptions, ReadOptions, WriteOptions, coerce_options
from ._tool import Tool
from .delete import create_delete_tool
from .edit import create_edit_tool
from .find import create_find_tool
from .grep import create_grep_tool
from .ls import create_list_tool
from .read import create_read_tool
from .workspace_store import WorkspaceFileStore
from .write import create_write_tool

__all__ = ["create_tools"]


def create_tools(
    workspace: WorkspaceSurface,
    *,
    readonly: bool = False,
    assets: bool = True,
    read: ReadOptions | Mapping[str, Any] | None = None,
    write: WriteOptions | Mapping[str, Any] | None = None,
    edit: EditOptions | Mapping[str, Any] | None = None,
    exec: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Tool]:
    """Tools by name: read, ls, find, grep, and unless ``readonly`` write, edit, delete, exec, publish.

    ``exec`` appears when the workspace has a backend (``exec={}`` leaves it out; a dict selects backends
    and may add a description to each); ``publish`` when the workspace has assets and ``assets`` is not
    False. Every store built here shares the owner's lock table, whatever process it runs in.

    When ``workspace`` offers whole-call execution (``run_tool``, the ``ToolRunner`` capability of a
    ``get_workspace`` client), read, ls, find, grep, write, edit and delete send each call whole to the
    owner (one round trip) and give the same results; exec and publish run here.
    """
    store = WorkspaceFileStore(workspace)
    read_options = coerce_options(ReadOptions, read)
    write_options = coerce_options(WriteOptions, write)
    edit_options = coerce_options(EditOptions, edit)
    tools = [
        create_read_tool(store, options=read_options),
        create_list_tool(workspace),
        create_find_tool(workspace),
        create_grep_tool(workspace),
    ]
    if not readonly:
        tools += [
            create_write_tool(store, options=write_options),
            create_edit_tool(store, options=edit_options),
            create_delete_tool(store),
        ]
        # A non-empty selection always builds the tool, so an unknown backend id is a clear error
        # rather than a silently missing tool.
        if exec or (exec is None and workspace.runtime.backends()):
            from .exec import create_exec_tool

            tools.append(create_exec_tool(workspace, backends=exec))
        if assets is not False and getattr(workspace, "assets", None) is not None:
            from .publish import create_publish_tool

            tools.append(create_publish_tool(workspace))
    audit = getattr(workspace, "audit", None)  # every call leaves a record in the audit log (SPEC 10)
    for tool in tools:
        tool.audit = audit
    runner = tool_runner(workspace)
    if runner is not None:
        forwarded = forwarded_options(read_options, write_options, edit_options)
        forward_tools(tools, runner, forwarded, write_options.max_bytes)
    return {tool.name: tool for tool in tools}
