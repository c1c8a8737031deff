"""The ``grep`` tool: matching lines in one file or below a directory, paged in walk then line order."""

from __future__ import annotations

import re
from typing import Any

import re2
from pydantic import Field, field_validator

from ..storage.paths import canonical
from ..storage.types import GrepMatch
from ..surface import WorkspaceSurface
from ._globs import reachable_alternatives, walk_globs
from ._input import MAX_PAGE, OUTPUT_BUDGET, Flag, PagedInput, Whole, as_glob_list, budgeted, paged, utf8_of
from ._tool import Tool, ToolUpdate

__all__ = ["OUTPUT_BUDGET", "GrepInput", "create_grep_tool"]

DEFAULT_ROOT = "/workspace"
MAX_CONTEXT = 10
MAX_LINE_CHARS = 1000
"""A match's or context line's text past this many characters is cut: a match line around its first
match, a context line at its start, marked ``... (truncated)`` (one match in a minified bundle was
megabytes of model output)."""
TRUNCATION_MARKER = "... (truncated)"


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
    regex: Flag = Field(default=False, description="Treat query as a regular expression (RE2 syntax).")
    ignore_case: Flag = Field(default=False, description="Match regardless of letter case.")
    context: Whole = Field(
        default=0,
        ge=0,
        le=MAX_CONTEXT,
        description=f"Lines of context before and after each match (0-{MAX_CONTEXT}).",
    )

    _exclude_list = field_validator("exclude", mode="before")(as_glob_list)


def _match(m: GrepMatch, find: _Finder) -> dict[str, Any]:
    out: dict[str, Any] = {"path": m.path, "line": m.line, "text": _cut(m.text, find)}
    if m.context is not None:
        out["context"] = [
            {"line": c.line, "text": _cut(c.text, find if c.is_match else None), "isMatch": c.is_match}
            for c in m.context
        ]
    return out


class _Finder:
    """Where the query first matches in a line (0 when it cannot tell), to centre a cut line on it."""

    def __init__(self, query: str, *, regex: bool, ignore_case: bool) -> None:
        self.literal = query if not regex and not ignore_case else None
        self.pattern: Any = None
        if self.literal is None:
            options = re2.Options()
            options.case_sensitive = not ignore_case
            options.log_errors = False
            try:
                self.pattern = re2.compile(query if regex else re.escape(query), options)
            except re2.error:  # the search itself already accepted it; never fail the answer here
                self.pattern = None

    def start(self, line: str) -> int:
        if self.literal is not None:
            return max(line.find(self.literal), 0)
        found = self.pattern.search(line) if self.pattern is not None else None
        return found.start() if found is not None else 0


def _cut(text: str, find: _Finder | None) -> str:
    """``text`` if short enough, else :data:`MAX_LINE_CHARS` of it around its first match (or from its
    start), marked at each end it was cut."""
    if len(text) <= MAX_LINE_CHARS:
        return text
    at = find.start(text) if find is not None else 0
    begin = max(0, min(at - MAX_LINE_CHARS // 5, len(text) - MAX_LINE_CHARS))
    end = begin + MAX_LINE_CHARS
    return ("..." if begin > 0 else "") + text[begin:end] + (TRUNCATION_MARKER if end < len(text) else "")


def _include(path: str, include: str | list[str] | None) -> list[str] | None:
    """The include globs as the walk takes them; ``None`` (every file) when none is left once empty
    ones are dropped. An include of ``""`` (what a model sends for an optional string it leaves
    unset), ``"./"`` or ``path`` itself matched no file, silently: an empty grep, where find's empty
    pattern matches everything."""
    if include is None:
        return None
    globs = [g for glob in as_glob_list(include) for g in reachable_alternatives(path, glob, "include")]
    return [glob for glob in dict.fromkeys(globs) if glob] or None


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
        utf8_of(params.query, "query", path)  # a lone surrogate: named, not a bare codec message
        found = await fs.grep(
            params.query,
            path,
            regex=params.regex,
            ignore_case=params.ignore_case,
            context=params.context,
            include=_include(path, params.include),
            exclude=walk_globs(path, params.exclude),
            limit=params.limit + 1,
            offset=params.offset,
        )
        page, next_offset = paged(found, params.limit, params.offset)
        find = _Finder(params.query, regex=params.regex, ignore_case=params.ignore_case)
        matches = [_match(m, find) for m in page]
        matches, next_offset = budgeted(matches, next_offset, params.offset)
        result: dict[str, Any] = {
            "path": path,
            "query": params.query,
            "count": len(matches),
            "matches": matches,
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
            f"is set; a line over {MAX_LINE_CHARS} characters is cut around the match, marked "
            f'"{TRUNCATION_MARKER}". Returns at most limit matches (default 200, maximum {MAX_PAGE}), '
            "fewer when they are long; pass nextOffset as offset for the next page."
        ),
        input_model=GrepInput,
        handler=handler,
    )
