"""The base of every tool input model: camelCase JSON names (the seed's), snake_case in Python."""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator
from pydantic.alias_generators import to_camel

from ._arguments import unknown_arguments_problem

__all__ = [
    "DEFAULT_PAGE",
    "MAX_PAGE",
    "OUTPUT_BUDGET",
    "Flag",
    "Number",
    "PagedInput",
    "ToolInput",
    "Whole",
    "as_glob_list",
    "budgeted",
    "paged",
    "utf8_of",
    "within_budget",
]

T = TypeVar("T")

# Boolean and numeric arguments are strict (JSON ``true``/``false``, JSON numbers): pydantic's lax
# mode took ``delete {"recursive": "yes"}`` as true (and "on", "1", 1), ``limit: true`` as 1 and
# ``timeout: "30"`` as 30. A model that sends a string gets an error naming the argument and retries
# with the JSON value; the strings "true" and "false" are refused too (one rule, no guessing which
# spellings count). An integer argument takes no float (2.0 is refused); a number argument takes an
# integer. The JSON schemas are unchanged. Every adapter and MCP validate through these models
# (``Tool.check_arguments``), so the rule is the same everywhere.
Flag = Annotated[bool, Strict()]
Whole = Annotated[int, Strict()]
Number = Annotated[float, Strict()]


class ToolInput(BaseModel):
    """Fields validate from their camelCase alias (or the Python name) and dump by alias.

    Unknown names are rejected at every level (an edit item too), naming each and listing the valid
    ones; ``extra_argument_names`` lists extra spellings a subclass accepts and consumes itself.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
        defer_build=True,
    )
    extra_argument_names: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_names(cls, data: Any) -> Any:
        if isinstance(data, dict):
            problem = unknown_arguments_problem(cls, data)
            if problem is not None:
                raise ValueError(problem)
        return data


MAX_PAGE = 1000
DEFAULT_PAGE = 200


class PagedInput(ToolInput):
    """``limit``/``offset`` of the listing tools; a page holds at most 1000 entries."""

    limit: Whole = Field(
        default=DEFAULT_PAGE, ge=1, le=MAX_PAGE, description=f"Maximum entries to return (1-{MAX_PAGE})."
    )
    offset: Whole = Field(
        default=0, ge=0, description="Entries to skip: pass the previous result's nextOffset."
    )


def as_glob_list(value: Any) -> Any:
    """Accept one glob where a list of globs is expected."""
    return [value] if isinstance(value, str) else value


def paged(items: list[T], limit: int, offset: int) -> tuple[list[T], int | None]:
    """Split a ``limit + 1`` fetch into the page and the next offset (None on the last page)."""
    if len(items) > limit:
        return items[:limit], offset + limit
    return items, None


OUTPUT_BUDGET = 256 * 1024
"""A listing page (grep's matches, find's entries, ls's entries) stops adding items once its JSON
passes this many bytes (always at least one); ``nextOffset`` then points at the first item left out.
One grep match in a minified bundle was megabytes of model output; a find page of 1000 paths of
4 KB each was 4 MB."""


def within_budget(items: list[dict[str, Any]]) -> int:
    """How many of ``items`` (a page's JSON objects, in order) fit :data:`OUTPUT_BUDGET`; at least one."""
    size = 0
    for index, item in enumerate(items):
        size += len(json.dumps(item, ensure_ascii=False).encode()) + 2
        if size > OUTPUT_BUDGET and index > 0:
            return index
    return len(items)


def budgeted(
    items: list[dict[str, Any]], next_offset: int | None, offset: int
) -> tuple[list[dict[str, Any]], int | None]:
    """``items`` cut to :func:`within_budget`, and the next offset (the first item left out, if any)."""
    kept = within_budget(items)
    if kept < len(items):
        return items[:kept], offset + kept
    return items, next_offset


def utf8_of(text: str, what: str, path: str, errors: str = "strict") -> bytes:
    """``text`` (an argument ``what`` of a tool acting on ``path``) as UTF-8, or a ``ValueError`` that
    names both: a lone surrogate gave a bare codec message. ``errors="surrogateescape"``: bytes a
    read kept as surrogates go back as they were (an edit of a file that is not all UTF-8)."""
    try:
        return text.encode("utf-8", errors)
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise ValueError(
            f"{what} for {path} is not valid UTF-8 text: {bad!r} at character {exc.start} ({exc.reason})"
        ) from None
