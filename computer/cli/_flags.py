"""``computer tool NAME TOOL --name value ...``: a tool's arguments as options, typed by its schema.

Decisions (a newcomer types ``computer tool ws write --path /workspace/a.txt --content hi`` before
reading that the arguments are one JSON object, and a shell makes JSON quoting hard):

- ``--name value`` and ``--name=value`` set one argument; ``name`` may be written as in the schema
  (``byteOffset``), in snake_case (``byte_offset``) or kebab-case (``--byte-offset``).
- The value is the string as typed when the argument takes a string (``--content '{"a": 1}'`` writes
  that text); otherwise it is read as JSON (``--limit 5``, ``--regex true``, ``--edits '[...]'``,
  ``--env '{"A": "1"}'``). An argument taking a string or a list (``include``) is a list only when the
  value is a JSON list. An argument of any type (exec's ``input``) is JSON when it parses, else text;
  so is a list (``--exclude node_modules``: the tool takes one glob for a list, or says why not). A
  number or boolean that is not valid JSON is a usage error.
- ``--name`` with no value (last, or followed by another ``--option``) is ``true`` for a boolean;
  for anything else it is a usage error. A value that begins with ``--`` is given as ``--name=--x``.
- A JSON object may come first; the options are applied over it. The same option twice, a value
  that is not what the argument takes, or a stray word is a usage error (exit 2) before the workspace
  is opened. A name the tool does not know is passed on as text: the tool's own error names it and
  lists the valid ones, as for JSON arguments.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from typing import Any

from ._context import GLOBAL_OPTIONS, CliError, global_option_misplaced

__all__ = ["apply_flags", "split_flags"]

# The input model of each tool, by module (exec's is built for both backends: `exec_input_model`).
_MODELS = {
    "read": "ReadInput",
    "ls": "ListInput",
    "find": "FindInput",
    "grep": "GrepInput",
    "write": "WriteInput",
    "edit": "EditInput",
    "delete": "DeleteInput",
    "publish": "PublishInput",
}


def split_flags(tokens: Sequence[str]) -> tuple[str | None, list[tuple[str, str | None]]]:
    """``(the JSON object given first or None, [(option name, value or None when bare)])``."""
    rest = list(tokens)
    first = None
    if rest and not rest[0].startswith("--"):
        first = rest.pop(0)
    flags: list[tuple[str, str | None]] = []
    i = 0
    while i < len(rest):
        item = rest[i]
        if not item.startswith("--") or item == "--":
            raise CliError(
                f"unexpected argument {item!r}: give the tool's arguments as one JSON object first, "
                "then --name value options",
                code=2,
            )
        name, eq, inline = item[2:].partition("=")
        if eq:
            flags.append((name, inline))
            i += 1
        elif i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            flags.append((name, rest[i + 1]))
            i += 2
        else:
            flags.append((name, None))
            i += 1
    return first, flags


def apply_flags(tool: str, args: dict[str, Any], flags: list[tuple[str, str | None]]) -> dict[str, Any]:
    """``args`` with each option set on it, typed by the tool's argument schema."""
    if not flags:
        return args
    properties = _properties(tool)
    by_key = {_key(name): name for name in properties}
    out = dict(args)
    seen: set[str] = set()
    for given, raw in flags:
        name = by_key.get(_key(given), given.replace("-", "_"))
        if name not in properties and f"--{given}" in GLOBAL_OPTIONS:
            raise CliError(global_option_misplaced(f"--{given}", f"tool NAME {tool}"), code=2)
        if name in seen:
            raise CliError(f"--{given} is given twice", code=2)
        seen.add(name)
        out[name] = _typed(given, raw, _types(properties.get(name)))
    return out


def _key(name: str) -> str:
    return name.replace("-", "").replace("_", "").lower()


def _properties(tool: str) -> dict[str, Any]:
    if tool == "exec":
        from ..tools.exec import exec_input_model

        model = exec_input_model()
    else:
        model = getattr(importlib.import_module(f"computer.tools.{tool}"), _MODELS[tool])
    schema = model.model_json_schema(by_alias=True)
    properties: dict[str, Any] = schema.get("properties", {})
    return properties


def _types(schema: dict[str, Any] | None) -> set[str] | None:
    """The JSON types an argument takes; ``None`` when any (no ``type`` anywhere, or unknown)."""
    if schema is None:
        return {"string"}  # an unknown name: passed on as text for the tool to reject
    branches = schema.get("anyOf", [schema])
    types = {branch["type"] for branch in branches if "type" in branch}
    if not types or len(types) < len(branches):
        return None
    return types - {"null"}


def _typed(given: str, raw: str | None, types: set[str] | None) -> Any:
    if raw is None:
        if types is None or "boolean" in types:
            return True
        raise CliError(f"--{given} needs a value (--{given} VALUE or --{given}=VALUE)", code=2)
    if types is not None and types <= {"string"}:
        return raw
    try:
        value = json.loads(raw)
    except RecursionError:  # not a ValueError: it was a traceback
        raise CliError(
            f"--{given} is nested too deeply to parse; send a flatter JSON value", code=2
        ) from None
    except ValueError:
        if types is None or not types <= {"integer", "number", "boolean"}:
            return raw  # e.g. one glob where a list is expected: the tool takes it or says why
        raise CliError(
            f"--{given} takes {' or '.join(_a(t) for t in sorted(types))} (as JSON), not {raw!r}", code=2
        ) from None
    if types is not None and "string" in types and _json_type(value) not in types:
        return raw
    return value


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "null")


def _a(type_name: str) -> str:
    """A JSON type's name with its article: "an integer", "a number", "a boolean"."""
    return f"{'an' if type_name[0] in 'aeiou' else 'a'} {type_name}"
