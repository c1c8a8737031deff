"""JSON Schema shaping for adapters: OpenAI strict mode, and the null handling that goes with it.

Strict mode ("Structured Outputs" for function calling) accepts a subset of JSON Schema: every object
lists all its properties in ``required`` and sets ``additionalProperties: false``; optional fields
become nullable instead; only a fixed set of keywords is allowed. :func:`strict_schema` closes one of
our tool schemas, or raises :class:`StrictSchemaError` when it cannot be expressed (a free-form value
such as exec's ``input``, a map such as exec's ``env``). Constraints strict mode does not support
(``minLength``, ``default``…) are dropped from the declaration only; the tool still enforces them.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["STRICT_KEYWORDS", "StrictSchemaError", "drop_unaccepted_nulls", "strict_schema"]


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
    if schema.get("type") != "object":
        raise StrictSchemaError("", "the root must be an object schema")
    defs = schema.get("$defs", {})
    out = _strict(copy.deepcopy({k: v for k, v in schema.items() if k != "$defs"}), "", defs)
    if defs:
        out["$defs"] = {
            name: _strict(copy.deepcopy(sub), f"/$defs/{name}", defs) for name, sub in defs.items()
        }
    return out


def _strict(node: dict[str, Any], where: str, defs: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise StrictSchemaError(where, "not a schema object")
    if "$ref" in node:
        siblings = {k: v for k, v in node.items() if k not in ("$ref", "title", "default")}
        if not siblings:
            return {"$ref": node["$ref"]}
        # Strict mode does not take keywords beside $ref: inline the definition with them.
        target = defs.get(str(node["$ref"]).rsplit("/", 1)[-1])
        if target is None:
            raise StrictSchemaError(where, f"unresolvable $ref {node['$ref']}")
        return _strict({**copy.deepcopy(target), **siblings}, where, defs)
    if "anyOf" in node or "oneOf" in node:
        branches: list[Any] = node.get("anyOf", node.get("oneOf")) or []
        out: dict[str, Any] = {
            "anyOf": [_strict(b, f"{where}/anyOf/{i}", defs) for i, b in enumerate(branches)]
        }
        if "description" in node:
            out["description"] = node["description"]
        return out
    for bad in ("allOf", "not", "patternProperties", "if", "then", "else", "dependentRequired"):
        if bad in node:
            raise StrictSchemaError(where, f"{bad} is not supported in strict mode")
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
