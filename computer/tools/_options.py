"""Limits and defaults of the file tools: one options model per option group.

``create_tools(read=..., write=..., edit=...)`` and the individual factories accept either the model
or a plain dict of the same keys, in snake_case (``max_lines``) or in the seed's camelCase
(``maxLines``), as SPEC section 10 pins. Unknown keys are errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "KIB",
    "MIB",
    "EditOptions",
    "LineTruncation",
    "ReadOptions",
    "WriteOptions",
    "coerce_options",
]

KIB = 1024
MIB = 1024 * 1024

# snake_case field names, camelCase aliases; both validate, dumps use the snake_case names.
_OPTIONS = ConfigDict(
    frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True, defer_build=True
)


class LineTruncation(BaseModel):
    """Shorten each line to ``chars`` code points or ``bytes`` UTF-8 bytes (exactly one of them)."""

    model_config = _OPTIONS

    chars: int | None = Field(default=None, ge=1)
    bytes: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> LineTruncation:
        if (self.chars is None) == (self.bytes is None):
            raise ValueError('line_truncation takes exactly one of {"chars": n} or {"bytes": n}')
        return self


class ReadOptions(BaseModel):
    """Caps of the read tool."""

    model_config = _OPTIONS

    max_lines: int = Field(default=2000, ge=1)
    max_bytes: int = Field(default=256 * KIB, ge=1)
    include_line_numbers: bool = False
    line_truncation: LineTruncation | None = None
    max_model_bytes: int = Field(default=int(3.5 * MIB), ge=1)
    media_sniff_bytes: int = Field(default=512, ge=16)


class WriteOptions(BaseModel):
    """Cap of the write tool (UTF-8 bytes of ``content``)."""

    model_config = _OPTIONS

    max_bytes: int = Field(default=2 * MIB, ge=1)


class EditOptions(BaseModel):
    """Caps of the edit tool: bytes of the file before and after the edit, edits in one call.

    ``max_edits`` and ``EDIT_SCAN_BUDGET`` (edits x file bytes, in ``edit``) bound one call's time under
    the path lock: each edit is searched in the whole file (4,000 edits of a 1.7 MB file held it 18 s;
    10,000 edits of a 110 KB file, under the budget, take ~2 s).
    """

    model_config = _OPTIONS

    max_bytes: int = Field(default=2 * MIB, ge=1)
    max_edits: int = Field(default=10_000, ge=1)


OptionsT = TypeVar("OptionsT", bound=BaseModel)


def coerce_options(
    cls: type[OptionsT], value: OptionsT | Mapping[str, Any] | None, **overrides: Any
) -> OptionsT:
    """Build ``cls`` from a model, a snake_case dict or ``None`` (defaults), then apply ``overrides``."""
    if value is None:
        data: dict[str, Any] = {}
    elif isinstance(value, cls):
        data = value.model_dump(exclude_unset=True)
    elif isinstance(value, Mapping):
        data = dict(value)
    else:
        raise TypeError(
            f"{cls.__name__}: expected {cls.__name__}, a dict or None, got {type(value).__name__}"
        )
    data.update(overrides)
    # One spelling per option, so ``{"maxLines": 5}`` plus ``max_lines=7`` is an override, not a clash.
    by_alias = {info.alias: name for name, info in cls.model_fields.items() if info.alias}
    normalised: dict[str, Any] = {}
    for key, item in data.items():
        normalised[by_alias.get(key, key)] = item
    return cls.model_validate(normalised)
