"""Whole-call forwarding: over a surface that can run a tool next to its files, tools send one call.

A workspace surface that offers ``run_tool(name, args, *, options=None)`` (the :class:`ToolRunner`
capability; a ``get_workspace`` client has it, the owner ``Workspace`` does not) gets tools whose handler
sends the whole call — tool name, validated arguments, option groups — to the owner in one round trip
(ARCHITECTURE, "Data flow of one tool call"), where the same tool runs over the owner's own lock table
and files. Names, descriptions, schemas, results, errors and model output stay those of the local tool:
the tool object is built here as usual and only its handler is swapped. Arguments are validated here
first, and checks that need no file (a bad path, the write cap, an empty ``oldText``, ``byteOffset``
without ``offset``) are answered here too, so a bad call costs no round trip.

Not forwarded: ``exec`` (it streams snapshots to ``on_update`` and must stay killable by cancelling the
caller) and ``publish`` (already one call to ``assets.share``).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from ..storage.locks import refuse_nested
from ..storage.paths import canonical
from ._edit_match import Edit, check_edits
from ._options import EditOptions, ReadOptions, WriteOptions
from ._tool import Handler, Tool, ToolUpdate
from .write import names_a_directory

__all__ = ["FORWARDED_TOOLS", "ToolRunner", "forward_tools", "tool_runner"]

FORWARDED_TOOLS = frozenset({"read", "ls", "find", "grep", "write", "edit", "delete"})
_LOCKING = frozenset({"write", "edit", "delete"})  # the tools that lock their path on the owner


@runtime_checkable
class ToolRunner(Protocol):
    """The capability of running one core tool whole where the files are (one round trip).

    ``options`` are :func:`~computer.tools.create_tools` keywords as plain, picklable dicts; the result
    is the tool's result dict, exactly as its ``run`` returns it (``{"error": ...}`` for a failed call).
    """

    async def run_tool(
        self, name: str, args: dict[str, Any], *, options: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...


def tool_runner(workspace: Any) -> ToolRunner | None:
    """``workspace`` when it offers whole-call execution, else ``None``."""
    return workspace if isinstance(workspace, ToolRunner) else None


def forwarded_options(read: ReadOptions, write: WriteOptions, edit: EditOptions) -> dict[str, Any] | None:
    """The option groups as plain dicts, non-default fields only (``None`` when all are defaults).

    One client configuration is one key of the owner's tool-set cache; defaults share the ``None`` key.
    """
    groups = {
        "read": read.model_dump(exclude_defaults=True),
        "write": write.model_dump(exclude_defaults=True),
        "edit": edit.model_dump(exclude_defaults=True),
    }
    kept = {group: values for group, values in groups.items() if values}
    return kept or None


def forward_tools(
    tools: list[Tool], runner: ToolRunner, options: dict[str, Any] | None, write_cap: int
) -> None:
    """Swap the handler of every forwarded tool in ``tools`` for one ``runner.run_tool`` call."""
    for tool in tools:
        if tool.name in FORWARDED_TOOLS:
            tool.handler = _forwarding_handler(tool.name, tool.handler, runner, options, write_cap)


def _forwarding_handler(
    name: str, local: Handler, runner: ToolRunner, options: dict[str, Any] | None, write_cap: int
) -> Handler:
    async def handler(params: Any, on_update: ToolUpdate | None) -> dict[str, Any]:
        if _fails_before_io(name, params, write_cap):
            # The local handler raises the very error the owner's would, before touching any file.
            return await local(params, on_update)
        locks = getattr(runner, "locks", None)
        if name in _LOCKING and locks is not None:
            # A hold of the path in this task's block waits for this call on the owner: it would never end.
            refuse_nested(locks, [params.path], name == "delete" and bool(params.recursive))
        args = (
            params.model_dump(by_alias=True, exclude_unset=True) if isinstance(params, BaseModel) else params
        )
        return await runner.run_tool(name, args, options=options)

    return handler


def _fails_before_io(name: str, params: Any, write_cap: int) -> bool:
    """Whether the call is rejected by a check that needs no file (then it is answered locally)."""
    path = getattr(params, "path", None)
    if isinstance(path, str):
        try:
            canonical(path)
        except (OSError, ValueError):
            return True
    if name == "write":
        if names_a_directory(params.path):
            return True
        try:
            return len(params.content.encode("utf-8")) > write_cap
        except UnicodeEncodeError:  # a lone surrogate: the local handler names the argument and path
            return True
    if name == "edit":
        try:
            check_edits([Edit(item.old_text, item.new_text) for item in params.edits])
        except ValueError:
            return True
    if name == "read":
        return bool(params.byte_offset) and params.offset is None
    return False
