"""``create_tools``: the default tool set of a workspace (owner or client)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

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

__all__ = ["BASH_DESCRIPTION", "TOOL_NAMINGS", "create_tools"]

TOOL_NAMINGS = ("default", "think")
ToolNaming = Literal["default", "think"]

# The seed's Think agent calls the shell tool `bash`; its description when offered under that name.
BASH_DESCRIPTION = (
    "Run a bash script in a sandbox over the workspace files (no network). Files it creates, changes "
    "or deletes under /workspace are written back. Use it for shell workflows that combine several "
    "file operations; prefer read, write and edit for simple ones."
)


def create_tools(
    workspace: WorkspaceSurface,
    *,
    readonly: bool = False,
    assets: bool = True,
    read: ReadOptions | Mapping[str, Any] | None = None,
    write: WriteOptions | Mapping[str, Any] | None = None,
    edit: EditOptions | Mapping[str, Any] | None = None,
    exec: Mapping[str, Mapping[str, Any]] | None = None,
    processes: bool = False,
    names: ToolNaming = "default",
) -> dict[str, Tool]:
    """Tools by name: read, ls, find, grep, and unless ``readonly`` write, edit, delete, exec, publish.

    ``exec`` appears when the workspace has a backend (``exec={}`` leaves it out; a dict selects backends
    and may add a description to each); ``publish`` when the workspace has assets and ``assets`` is not
    False. Every store built here shares the owner's lock table, whatever process it runs in.

    ``processes=True`` adds the optional ``processes`` tool (programs running in the live sandbox) and,
    unless ``readonly``, ``kill`` (stop one); both are left out, as ``exec`` is, when the workspace has no
    exec backend. ``names="think"`` offers the seed's Think names: ``list`` for ``ls`` and, when the
    workspace has a ``shell`` backend, ``bash`` (exec on the shell backend alone) for ``exec``; ``exec``
    then stays only for the other backends.

    When ``workspace`` offers whole-call execution (``run_tool``, the ``ToolRunner`` capability of a
    ``get_workspace`` client), read, ls, find, grep, write, edit and delete send each call whole to the
    owner (one round trip) and give the same results; exec and publish run here.
    """
    store = WorkspaceFileStore(workspace)
    read_options = coerce_options(ReadOptions, read)
    write_options = coerce_options(WriteOptions, write)
    edit_options = coerce_options(EditOptions, edit)
    if names not in TOOL_NAMINGS:
        raise ValueError(f'names must be "default" or "think", not {names!r}')
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
    if processes and workspace.runtime.backends():  # no backend: no sandbox, nothing to list or kill
        from .processes import create_kill_tool, create_processes_tool

        tools.append(create_processes_tool(workspace, with_kill=not readonly))
        if not readonly:
            tools.append(create_kill_tool(workspace))
    audit = getattr(workspace, "audit", None)  # every call leaves a record in the audit log (SPEC 10)
    for tool in tools:
        tool.audit = audit
    runner = tool_runner(workspace)
    if runner is not None:
        forwarded = forwarded_options(read_options, write_options, edit_options)
        forward_tools(tools, runner, forwarded, write_options.max_bytes)
    if names == "think":
        # After forwarding, so a renamed tool still sends its call whole under its core name.
        tools = _think_names(workspace, tools, exec)
    return {tool.name: tool for tool in tools}


def _think_names(
    workspace: WorkspaceSurface, tools: list[Tool], exec: Mapping[str, Mapping[str, Any]] | None
) -> list[Tool]:
    """``ls`` as ``list``; ``exec`` split into ``bash`` (the shell backend) and ``exec`` (the others)."""
    out: list[Tool] = []
    for tool in tools:
        if tool.name == "ls":
            out.append(dataclasses.replace(tool, name="list"))
        elif tool.name == "exec":
            from .exec import create_exec_tool

            selected = dict(exec) if exec else {info.id: {} for info in workspace.runtime.backends()}
            if "shell" not in selected:
                out.append(tool)
                continue
            shell = dict(selected["shell"] or {})
            bash_options = {**shell, "description": shell.get("description") or BASH_DESCRIPTION}
            bash = create_exec_tool(workspace, backends={"shell": bash_options})
            out.append(dataclasses.replace(bash, name="bash", audit=tool.audit))
            others = {key: value for key, value in selected.items() if key != "shell"}
            if others:
                out.append(
                    dataclasses.replace(create_exec_tool(workspace, backends=others), audit=tool.audit)
                )
        else:
            out.append(tool)
    return out
