"""The base of every tool input model: camelCase JSON names (the seed's), snake_case in Python."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator
from pydantic.alias_generators import to_camel

from ._arguments import unknown_arguments_problem

__all__ = [
    "DEFAULT_PAGE",
    "MAX_PAGE",
    "Flag",
    "Number",
    "PagedInput",
    "ToolInput",
    "Whole",
    "as_glob_list",
    "paged",
    "utf8_of",
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
