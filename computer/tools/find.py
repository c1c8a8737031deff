"""The ``find`` tool: paths below a directory matching a glob, in walk order, with pruning excludes."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from ..storage.paths import canonical
from ..storage.types import FindEntry
from ..surface import WorkspaceSurface
from ._globs import reachable_alternatives, walk_globs
from ._input import MAX_PAGE, PagedInput, as_glob_list, budgeted, paged, utf8_of
from ._tool import Tool, ToolUpdate

__all__ = ["FindInput", "create_find_tool"]

DEFAULT_ROOT = "/workspace"


class FindInput(PagedInput):
    path: str = Field(
        default=DEFAULT_ROOT, description="Absolute directory to search below (default /workspace)."
    )
    pattern: str = Field(
        description='Glob matched against the path relative to `path`: "*" and "?" stay within one segment, '
        '"**" crosses directories ("**/*.py" finds Python files at any depth), "{a,b}" matches either '
        '("**/*.{ts,tsx}"). "" matches everything.'
    )
    exclude: list[str] = Field(
        default_factory=list,
        description="Globs of the same shape that win over pattern; an excluded directory is not walked. "
        'Name both forms to skip a tree: ["node_modules", "node_modules/**"].',
    )

    _exclude_list = field_validator("exclude", mode="before")(as_glob_list)


def create_find_tool(workspace: WorkspaceSurface) -> Tool:
    """The ``find`` tool over ``workspace.fs.find`` (one call per page, ``limit + 1`` matches).

    An entry's ``type`` is one of the pinned ``file | dir``. A symlink is listed, never entered, with
    the type of what it leads to: ``dir`` for a link to a directory, ``file`` for a link to a file and
    for one that leads nowhere (dangling, a loop, more than 40 hops: not a directory to search
    below; ``read`` answers its ENOENT or ELOOP, ``delete`` removes the link alone)."""
    fs = workspace.fs

    async def handler(params: FindInput, on_update: ToolUpdate | None) -> dict[str, Any]:
        path = canonical(params.path)
        # A lone surrogate matches no name, and the result echoed it: text no UTF-8 encoder takes (an
        # agent loop's next request failed on it). Named, as grep's query is.
        utf8_of(params.pattern, "pattern", path)
        patterns = reachable_alternatives(path, params.pattern, "pattern")
        exclude = walk_globs(path, params.exclude)
        if len(patterns) == 1:
            found = await fs.find(
                path, patterns[0], exclude=exclude, limit=params.limit + 1, offset=params.offset
            )
        else:
            # One walk per alternative, merged in walk order (depth-first, a directory before its
            # children, names in code point order: the order of the segments). The page's entries are
            # among the first offset + limit + 1 of some alternative.
            want = params.offset + params.limit + 1
            merged: dict[str, FindEntry] = {}
            for pattern in patterns:
                for entry in await fs.find(path, pattern, exclude=exclude, limit=want, offset=0):
                    merged.setdefault(entry.path, entry)
            found = sorted(merged.values(), key=lambda e: e.path.split("/"))[params.offset : want]
        page, next_offset = paged(found, params.limit, params.offset)
        entries, next_offset = budgeted(
            [{"path": e.path, "type": e.type} for e in page], next_offset, params.offset
        )
        result: dict[str, Any] = {
            "path": path,
            "pattern": params.pattern,
            "count": len(entries),
            "entries": entries,
        }
        if next_offset is not None:
            result["nextOffset"] = next_offset
        return result

    return Tool(
        name="find",
        description=(
            "Find files and directories by glob below a directory (default /workspace). The pattern is "
            'relative to path: "*" and "?" match within one path segment, "**" crosses directories, '
            '"{a,b}" matches either. '
            "Results come in depth-first walk order as {path, type}. exclude prunes whole directories. "
            f"Returns at most limit entries (default 200, maximum {MAX_PAGE}), fewer when their paths are "
            "long; pass nextOffset as offset for the next page."
        ),
        input_model=FindInput,
        handler=handler,
    )
