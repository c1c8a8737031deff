"""JSON Schema shaping for adapters: OpenAI and Anthropic strict modes, and the null handling.

Strict mode ("Structured Outputs" for function calling) accepts a subset of JSON Schema: every object
lists all its properties in ``required`` and sets ``additionalProperties: false``; optional fields
become nullable instead; only a fixed set of keywords is allowed. :func:`strict_schema` closes one of
our tool schemas, or raises :class:`StrictSchemaError` when it cannot be expressed (a free-form value
such as exec's ``input``, a map such as exec's ``env``). Constraints strict mode does not support
(``minLength``, ``default``…) are dropped from the declaration only; the tool still enforces them.

Anthropic's strict tool use takes a different subset: one ``type`` per node (a nullable field is an
``anyOf``), no numeric or length bounds, no ``default``, ``minItems`` only 0 or 1, ``enum``/``const``
without a ``type`` beside them, nothing beside a ``$ref``; optional properties may simply be left out of
``required``. :func:`anthropic_strict_schema` writes a schema in exactly that subset, so the
``anthropic`` package's own normaliser (``anthropic.transform_schema``) returns it unchanged: the
bounds it would move into the description are moved there here, in words ("at least 1, at most
1000; default 200"), and the tool still enforces them when it runs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

__all__ = [
    "STRICT_KEYWORDS",
    "StrictSchemaError",
    "anthropic_strict_schema",
    "drop_unaccepted_nulls",
    "strict_schema",
]


class StrictSchemaError(ValueError):
    """A schema that strict mode cannot express; ``where`` is a JSON-pointer-like location."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where or '/'}: {reason}")
        self.where = where
        self.reason = reason


# Keywords OpenAI strict mode accepts, per the Structured Outputs "supported schemas" list.
STRICT_KEYWORDS: dict[str, frozenset[str]] = {
    "common": frozenset({"type", "description", "title", "enum", "anyOf", "$ref", "$defs", "const"}),
    "string": frozenset({"pattern", "format"}),
    "number": frozenset({"multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"}),
    "integer": frozenset({"multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"}),
    "array": frozenset({"items", "minItems", "maxItems"}),
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "boolean": frozenset(),
    "null": frozenset(),
}
_STRING_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A strict-mode copy of an object schema (optional → required and nullable, closed objects)."""
    return _convert_root(schema, _strict)


def _strict(node: dict[str, Any], where: str, defs: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise StrictSchemaError(where, "not a schema object")
    if "$ref" in node:
        inlined = _inline_ref(node, where, defs, ignored=("title", "default"))
        return {"$ref": node["$ref"]} if inlined is None else _strict(inlined, where, defs)
    if "anyOf" in node or "oneOf" in node:
        branches: list[Any] = node.get("anyOf", node.get("oneOf")) or []
        out: dict[str, Any] = {
            "anyOf": [_strict(b, f"{where}/anyOf/{i}", defs) for i, b in enumerate(branches)]
        }
        if "description" in node:
            out["description"] = node["description"]
        return out
    _reject_unsupported(node, where)
    if "const" in node and "type" not in node:
        node = {**node, "enum": [node["const"]]}
        node.pop("const")
    types = node.get("type")
    if types is None and "enum" in node:
        types = sorted({_json_type(v) for v in node["enum"]})
        types = types[0] if len(types) == 1 else types
    if types is None:
        raise StrictSchemaError(
            where, "a value without a type (free-form) cannot be expressed in strict mode"
        )
    type_list = types if isinstance(types, list) else [types]
    allowed = set(STRICT_KEYWORDS["common"])
    for t in type_list:
        allowed |= STRICT_KEYWORDS.get(t, frozenset())
    out = {k: v for k, v in node.items() if k in allowed}
    out["type"] = types
    if out.get("format") not in (None, *_STRING_FORMATS):
        out.pop("format")
    if "object" in type_list:
        props = node.get("properties")
        extra = node.get("additionalProperties", False)
        if not props or (extra not in (False, None) and extra != {}):
            raise StrictSchemaError(where, "an object without fixed properties (a map) cannot be strict")
        required = set(node.get("required", ()))
        out["properties"] = {}
        for name, sub in props.items():
            converted = _strict(sub, f"{where}/properties/{name}", defs)
            out["properties"][name] = converted if name in required else _nullable(converted)
        out["required"] = list(props)
        out["additionalProperties"] = False
    if "array" in type_list:
        if "items" not in node:
            raise StrictSchemaError(where, "an array without an items schema cannot be strict")
        out["items"] = _strict(node["items"], f"{where}/items", defs)
    return out


# What Anthropic's strict subset keeps per type (besides description and title); anything else is moved
# into the description in words.
_ANTHROPIC_STRING_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
_ANTHROPIC_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})
_BOUND_WORDS = {
    "minimum": "at least {}",
    "exclusiveMinimum": "greater than {}",
    "maximum": "at most {}",
    "exclusiveMaximum": "less than {}",
    "multipleOf": "a multiple of {}",
    "minLength": "at least {} characters",
    "maxLength": "at most {} characters",
    "pattern": "matching the regular expression {}",
    "format": "in {} format",
    "minItems": "at least {} items",
    "maxItems": "at most {} items",
    "uniqueItems": "items unique: {}",
    "default": "default {}",
}


def anthropic_strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of an object schema in Anthropic's strict subset (a fixed point of its normaliser).

    Optional properties stay optional (left out of ``required``); an optional property that is
    "the value or null" becomes just the value, since leaving it out already says "not given".
    Raises :class:`StrictSchemaError` for what the subset cannot express (a map, a value without type).
    """
    return _convert_root(schema, _anthropic)


def _convert_root(
    schema: dict[str, Any], convert: Callable[[Any, str, dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """``convert`` applied to an object schema's root and to each of its ``$defs`` (on copies)."""
    if schema.get("type") != "object":
        raise StrictSchemaError("", "the root must be an object schema")
    defs = schema.get("$defs", {})
    out = convert(copy.deepcopy({k: v for k, v in schema.items() if k != "$defs"}), "", defs)
    if defs:
        out["$defs"] = {
            name: convert(copy.deepcopy(sub), f"/$defs/{name}", defs) for name, sub in defs.items()
        }
    return out


def _anthropic(node: Any, where: str, defs: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise StrictSchemaError(where, "not a schema object")
    words: list[str] = []
    if "$ref" in node:
        inlined = _inline_ref(node, where, defs, ignored=("title",))
        return {"$ref": node["$ref"]} if inlined is None else _anthropic(inlined, where, defs)
    _reject_unsupported(node, where)
    out: dict[str, Any] = {}
    branches = node.get("anyOf", node.get("oneOf"))
    types = node.get("type")
    if isinstance(types, list) and len(types) > 1 and branches is None:
        # One type per node: [X, "null"] is an anyOf of one node per type, bounds going with each.
        shared = {k: v for k, v in node.items() if k in ("description", "title", "default")}
        rest = {k: v for k, v in node.items() if k not in shared and k != "type"}
        branches = [{**rest, "type": t} if t != "null" else {"type": "null"} for t in types]
        node = {**shared, "anyOf": branches}
        types = None
    if branches is not None:
        out["anyOf"] = [_anthropic(b, f"{where}/anyOf/{i}", defs) for i, b in enumerate(branches)]
    elif "enum" in node or "const" in node:
        key = "enum" if "enum" in node else "const"
        values = node[key] if key == "enum" else [node[key]]
        if not values or not all(v is None or isinstance(v, str | int | float | bool) for v in values):
            raise StrictSchemaError(where, f"{key} must list strings, numbers, booleans or null")
        out[key] = list(node[key]) if key == "enum" else node[key]
    else:
        if isinstance(types, list):
            types = types[0] if types else None
        if types not in _ANTHROPIC_TYPES:
            raise StrictSchemaError(where, "a value without a single known type cannot be strict")
        out["type"] = types
    for key, template in _BOUND_WORDS.items():
        value = node.get(key)
        if key not in node or (key == "format" and value in _ANTHROPIC_STRING_FORMATS):
            continue
        if key == "minItems" and value in (0, 1):
            out[key] = value
        elif not (key == "default" and value is None):
            words.append(template.format(json.dumps(value, ensure_ascii=False)))
    if node.get("format") in _ANTHROPIC_STRING_FORMATS and types == "string":
        out["format"] = node["format"]
    description = node.get("description")
    if words:
        said = ", ".join(words)
        description = f"{description} ({said})" if description else said[0].upper() + said[1:] + "."
    if description is not None:
        out["description"] = description
    if "title" in node:
        out["title"] = node["title"]
    if types == "object":
        props = node.get("properties") or {}
        extra = node.get("additionalProperties", False)
        if extra not in (False, None) and extra != {}:
            raise StrictSchemaError(where, "an object without fixed properties (a map) cannot be strict")
        required = [name for name in node.get("required", ()) if name in props]
        out["properties"] = {
            name: _anthropic(
                sub if name in required else _without_null_branch(sub), f"{where}/properties/{name}", defs
            )
            for name, sub in props.items()
        }
        out["additionalProperties"] = False
        if "required" in node:
            out["required"] = required
    if types == "array":
        if "items" not in node:
            raise StrictSchemaError(where, "an array without an items schema cannot be strict")
        out["items"] = _anthropic(node["items"], f"{where}/items", defs)
    return out


def _without_null_branch(node: Any) -> Any:
    """An optional property's schema without its "or null" (leaving the property out says it)."""
    if not isinstance(node, dict):
        return node
    shared = {k: v for k, v in node.items() if k in ("description", "title")}
    branches = node.get("anyOf")
    if isinstance(branches, list):
        kept = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null" and len(b) == 1)]
        if len(kept) == len(branches) or not kept:
            return node
        if len(kept) == 1 and isinstance(kept[0], dict):
            return {**kept[0], **shared, **({"default": node["default"]} if "default" in node else {})}
        return {**{k: v for k, v in node.items() if k != "anyOf"}, "anyOf": kept}
    types = node.get("type")
    if isinstance(types, list) and "null" in types and len(types) > 1:
        kept_types = [t for t in types if t != "null"]
        return {**node, "type": kept_types[0] if len(kept_types) == 1 else kept_types}
    return node


def _inline_ref(
    node: dict[str, Any], where: str, defs: dict[str, Any], *, ignored: tuple[str, ...]
) -> dict[str, Any] | None:
    """The definition a ``$ref`` points to merged with the keywords beside it (neither strict mode
    takes any), or ``None`` when nothing but ``ignored`` keywords stands beside it."""
    siblings = {k: v for k, v in node.items() if k != "$ref" and k not in ignored}
    if not siblings:
        return None
    target = defs.get(str(node["$ref"]).rsplit("/", 1)[-1])
    if target is None:
        raise StrictSchemaError(where, f"unresolvable $ref {node['$ref']}")
    return {**copy.deepcopy(target), **siblings}


def _reject_unsupported(node: dict[str, Any], where: str) -> None:
    for bad in ("allOf", "not", "patternProperties", "if", "then", "else", "dependentRequired"):
        if bad in node:
            raise StrictSchemaError(where, f"{bad} is not supported in strict mode")


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    if _accepts_null(node, {}):
        return node
    if "anyOf" in node:
        return {**node, "anyOf": [*node["anyOf"], {"type": "null"}]}
    if "$ref" in node:
        out: dict[str, Any] = {"anyOf": [{"$ref": node["$ref"]}, {"type": "null"}]}
        if "description" in node:
            out["description"] = node["description"]
        return out
    out = dict(node)
    types = out["type"]
    out["type"] = [*(types if isinstance(types, list) else [types]), "null"]
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    return out


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _accepts_null(node: Any, defs: dict[str, Any], depth: int = 0) -> bool:
    """Whether ``node`` accepts ``null``; a schema without constraints accepts anything."""
    if not isinstance(node, dict) or depth > 32:
        return True
    if "$ref" in node:
        target = defs.get(node["$ref"].rsplit("/", 1)[-1])
        return _accepts_null(target, defs, depth + 1) if target is not None else False
    for key in ("anyOf", "oneOf"):
        if key in node:
            return any(_accepts_null(b, defs, depth + 1) for b in node[key])
    if "const" in node:
        return node["const"] is None
    if "enum" in node:
        return None in node["enum"]
    types = node.get("type")
    if types is None:
        return True
    return "null" in (types if isinstance(types, list) else [types])


def drop_unaccepted_nulls(args: Any, schema: dict[str, Any]) -> Any:
    """Drop ``null`` values of optional properties whose schema does not accept null (recursively).

    A strict-mode model sends every field, with ``null`` for the ones it leaves out; the tool's own
    schema may not accept that null (``limit`` is an integer or absent), while it keeps a null the tool
    does accept (exec's ``input``). Required fields are left alone so a real mistake still fails.
    """
    return _drop(args, schema, schema.get("$defs", {}), 0)


def _drop(value: Any, node: Any, defs: dict[str, Any], depth: int) -> Any:
    if not isinstance(node, dict) or depth > 32:
        return value
    if "$ref" in node:
        return _drop(value, defs.get(node["$ref"].rsplit("/", 1)[-1]), defs, depth + 1)
    if isinstance(value, dict) and isinstance(node.get("properties"), dict):
        required = set(node.get("required", ()))
        out = {}
        for key, item in value.items():
            sub = node["properties"].get(key)
            if item is None and key not in required and sub is not None and not _accepts_null(sub, defs):
                continue
            out[key] = _drop(item, sub, defs, depth + 1) if sub is not None else item
        return out
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_drop(item, node["items"], defs, depth + 1) for item in value]
    if "anyOf" in node and isinstance(value, dict):
        # Only objects have optional fields; use the first object branch (pydantic emits one).
        for branch in node["anyOf"]:
            if isinstance(branch, dict) and (branch.get("properties") or "$ref" in branch):
                return _drop(value, branch, defs, depth + 1)
    return value
