"""The ``grep`` tool: matching lines in one file or below a directory, paged in walk then line order."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from ..storage.paths import canonical
from ..storage.types import GrepMatch
from ..surface import WorkspaceSurface
from ._globs import walk_globs
from ._input import MAX_PAGE, PagedInput, as_glob_list, paged
from ._tool import Tool, ToolUpdate

__all__ = ["GrepInput", "create_grep_tool"]

DEFAULT_ROOT = "/workspace"
MAX_CONTEXT = 10


class GrepInput(PagedInput):
    path: str = Field(
        default=DEFAULT_ROOT, description="Absolute file, or directory to search below (default /workspace)."
    )
    query: str = Field(
        description="Text to search for within one line (a regular expression when regex is true)."
    )
    include: str | list[str] | None = Field(
        default=None,
        description='Only search files whose path relative to `path` matches this glob, e.g. "**/*.py" or "**/*.{ts,tsx}".',
    )
    exclude: list[str] = Field(
        default_factory=list,
        description='Globs pruned from the walk (they win over include): ["node_modules", "node_modules/**"].',
    )
    regex: bool = Field(default=False, description="Treat query as a regular expression (RE2 syntax).")
    ignore_case: bool = Field(default=False, description="Match regardless of letter case.")
    context: int = Field(
        default=0,
        ge=0,
        le=MAX_CONTEXT,
        description=f"Lines of context before and after each match (0-{MAX_CONTEXT}).",
    )

    _exclude_list = field_validator("exclude", mode="before")(as_glob_list)


def _match(m: GrepMatch) -> dict[str, Any]:
    out: dict[str, Any] = {"path": m.path, "line": m.line, "text": m.text}
    if m.context is not None:
        out["context"] = [{"line": c.line, "text": c.text, "isMatch": c.is_match} for c in m.context]
    return out


def create_grep_tool(workspace: WorkspaceSurface) -> Tool:
    """The ``grep`` tool over ``workspace.fs.grep`` (one call per page, ``limit + 1`` matches)."""
    fs = workspace.fs

    async def handler(params: GrepInput, on_update: ToolUpdate | None) -> dict[str, Any]:
        path = canonical(params.path)
        if "\n" in params.query:
            # Lines split on \n, so no line holds one: refused whatever the options (the storage's fast
            # literal path matched across lines, the others never did).
            raise ValueError(
                "query contains a newline, but grep matches one line at a time: search for a single "
                "line of the text (then read around the match), or use a regular expression without "
                "newlines."
            )
        found = await fs.grep(
            params.query,
            path,
            regex=params.regex,
            ignore_case=params.ignore_case,
            context=params.context,
            include=None if params.include is None else walk_globs(path, as_glob_list(params.include)),
            exclude=walk_globs(path, params.exclude),
            limit=params.limit + 1,
            offset=params.offset,
        )
        matches, next_offset = paged(found, params.limit, params.offset)
        result: dict[str, Any] = {
            "path": path,
            "query": params.query,
            "count": len(matches),
            "matches": [_match(m) for m in matches],
        }
        if next_offset is not None:
            result["nextOffset"] = next_offset
        return result

    return Tool(
        name="grep",
        description=(
            "Search file contents in the workspace: one file, or every text file below a directory "
            "(default /workspace). Literal and case-sensitive by default; set regex for a regular "
            "expression (RE2 syntax, linear time) and ignoreCase to ignore letter case. Binary files are "
            "skipped. Each match has path, 1-based line and text, plus numbered context lines when context "
            f"is set. Returns at most limit matches (default 200, maximum {MAX_PAGE}); pass nextOffset as "
            "offset for the next page."
        ),
        input_model=GrepInput,
        handler=handler,
    )
