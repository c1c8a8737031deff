"""Turning whatever a model sent as tool arguments into a plain dict, or a model-actionable error.

Every adapter goes through here (and ``Tool.run`` checks the depth again), so a malformed call is
always a tool error result and never an exception: invalid JSON, JSON that is not an object, and
values nested deeper than :data:`MAX_ARGUMENT_DEPTH`. The depth cap exists because a few hundred
levels already make recursive code (``json``, ``repr``, validators, serializers) raise
``RecursionError``; no tool argument needs more than a handful of levels, so 64 leaves room for exec's
free-form ``input`` while keeping every later step far from the interpreter's recursion limit.
The depth walk is iterative and stops at the first value past the cap.

Unknown argument names (SPEC section 10, "Tool arguments") are rejected with one message that names
each of them, suggests the valid name it most likely meant ("did you mean 'ignoreCase'?") and lists
the valid names (the schema's, camelCase); an input model opts out only by declaring
``extra="allow"``. A model may accept more spellings than its schema shows through a
``extra_argument_names`` class attribute (edit's top-level ``oldText``/``newText`` shorthand).

A suggestion is never applied silently (a misspelled ``ignorecase`` must not quietly turn into a
case-insensitive search the model did not ask for in the schema's words): it only tells the model
what to send next. Suggestions come from the spelling (case, ``_``/``-`` and small typos ignored) and
from :data:`SYNONYMS`, the names other agent tool sets use for the same thing (``file_path``,
``startLine``, ``old_string``…), each offered only when its target is a field of the tool.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "SYNONYMS",
    "ArgumentError",
    "argument_names",
    "nesting_problem",
    "parse_arguments",
    "suggest_name",
    "unknown_arguments_problem",
]

MAX_ARGUMENT_DEPTH = 64  # the arguments object itself is level 1


class ArgumentError(ValueError):
    """Arguments that cannot be used at all; the message says what to send instead."""


def nesting_problem(value: Any, limit: int = MAX_ARGUMENT_DEPTH) -> str | None:
    """A message when ``value`` nests dicts/lists deeper than ``limit`` levels, else ``None``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return f"The arguments are nested more than {limit} levels deep; send a flatter JSON object."
        stack.extend((child, depth + 1) for child in children)
    return None


def parse_arguments(raw: Any, tool: str = "the tool") -> dict[str, Any]:
    """``raw`` (a JSON string or bytes, a mapping, or nothing) as a dict; :class:`ArgumentError` if not.

    ``None`` and ``""`` mean no arguments (``{}``).
    """
    if raw is None or raw == "" or raw == b"":
        return {}
    if isinstance(raw, str | bytes | bytearray):
        try:
            raw = json.loads(raw)
        except RecursionError:
            raise ArgumentError(
                f"The arguments of {tool} are nested too deeply to parse; send a flatter JSON object."
            ) from None
        except ValueError as exc:
            raise ArgumentError(
                f"The arguments of {tool} are not valid JSON ({exc}). Send a JSON object."
            ) from None
    if not isinstance(raw, Mapping):
        raise ArgumentError(f"The arguments of {tool} must be a JSON object, not {_json_kind(raw)}.")
    problem = nesting_problem(raw)
    if problem is not None:
        raise ArgumentError(problem)
    return dict(raw)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__


# Names other tool sets (Claude Code, Anthropic's text editor, Codex, the seed's Think tools, shell
# habits) give to our fields,
# folded (lower case, no "_"/"-"), mapped to the field each most likely means.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "file": ("path",),
    "filepath": ("path",),
    "filename": ("path",),
    "dir": ("path",),
    "directory": ("path",),
    "folder": ("path",),
    "absolutepath": ("path",),
    "target": ("path",),
    "cwd": ("path",),
    "startline": ("offset",),
    "start": ("offset",),
    "line": ("offset",),
    "fromline": ("offset",),
    "linenumber": ("offset",),
    "skip": ("offset",),
    "page": ("offset",),
    "nextoffset": ("offset",),
    "nextbyteoffset": ("byteOffset",),
    "byte": ("byteOffset",),
    "endline": ("limit",),
    "lines": ("limit",),
    "count": ("limit",),
    "maxresults": ("limit",),
    "max": ("limit",),
    "headlimit": ("limit",),
    "n": ("limit",),
    "text": ("content", "query"),
    "data": ("content",),
    "body": ("content",),
    "contents": ("content",),
    "filecontent": ("content",),
    "filetext": ("content",),
    "pattern": ("query", "include"),
    "regexp": ("regex", "query"),
    "search": ("query", "pattern"),
    "term": ("query",),
    "string": ("query",),
    "glob": ("pattern", "include"),
    "name": ("pattern",),
    "files": ("include",),
    "filter": ("include", "pattern"),
    "ignore": ("exclude",),
    "excludes": ("exclude",),
    "caseinsensitive": ("ignoreCase",),
    "insensitive": ("ignoreCase",),
    "nocase": ("ignoreCase",),
    "i": ("ignoreCase",),
    "contextlines": ("context",),
    "c": ("context",),
    "a": ("context",),
    "b": ("context",),
    "r": ("recursive",),
    "force": ("recursive",),
    "oldstring": ("oldText",),
    "oldstr": ("oldText",),
    "old": ("oldText",),
    "searchtext": ("oldText",),
    "find": ("oldText",),
    "newstring": ("newText",),
    "newstr": ("newText",),
    "new": ("newText",),
    "replace": ("newText",),
    "replacement": ("newText",),
    "changes": ("edits",),
    "replacements": ("edits",),
    "edit": ("edits",),
    "cmd": ("command",),
    "script": ("command",),
    "code": ("command",),
    "shell": ("backend",),
    "runtime": ("backend",),
    "language": ("backend",),
    "workdir": ("cwd",),
    "workingdirectory": ("cwd",),
    "dirpath": ("cwd", "path"),
    "environment": ("env",),
    "stdin": ("input",),
    "args": ("input",),
    "timeoutseconds": ("timeout",),
    "timeoutms": ("timeout",),
    "seconds": ("timeout",),
    "id": ("pid",),
    "processid": ("pid",),
    "process": ("pid",),
}


def _fold(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def suggest_name(unknown: str, valid: tuple[str, ...]) -> str | None:
    """The valid name ``unknown`` most likely meant, or ``None`` when nothing is close."""
    folded: dict[str, str] = {}
    for name in valid:
        folded.setdefault(_fold(name), name)  # the first spelling of a name is the one suggested
    key = _fold(unknown)
    if key in folded:
        return folded[key]
    for target in SYNONYMS.get(key, ()):
        if target in valid:
            return target
    close = difflib.get_close_matches(key, list(folded), n=1, cutoff=0.75)
    return folded[close[0]] if close else None


@functools.cache
def argument_names(model: type[BaseModel]) -> tuple[frozenset[str], tuple[str, ...]]:
    """``(accepted, shown)``: every spelling ``model`` takes, and the names to list in an error."""
    shown: list[str] = []
    accepted: set[str] = set(getattr(model, "extra_argument_names", ()))
    for name, info in model.model_fields.items():
        alias = info.alias or name
        shown.append(alias)
        accepted.update((alias, name))
        if isinstance(info.validation_alias, str):
            accepted.add(info.validation_alias)
    return frozenset(accepted), tuple(shown)


def unknown_arguments_problem(model: type[BaseModel], args: Mapping[str, Any]) -> str | None:
    """A message naming every unknown key of ``args`` and the valid names, or ``None``."""
    if model.model_config.get("extra") == "allow":
        return None
    accepted, shown = argument_names(model)
    unknown = [key for key in args if key not in accepted]
    if not unknown:
        return None
    described = []
    candidates = (*shown, *getattr(model, "extra_argument_names", ()))
    for key in unknown:
        guess = suggest_name(str(key), candidates)
        described.append(f"{key!r} (did you mean {guess!r}?)" if guess else repr(key))
    noun = "argument" if len(unknown) == 1 else "arguments"
    return f"Unknown {noun} {', '.join(described)}. Valid arguments: {', '.join(shown) or 'none'}."
