"""An independent checker of OpenAI strict-mode rules (Structured Outputs "supported schemas").

Written from the rules, not from the adapter's code, so a converter bug cannot hide behind itself.
"""

from __future__ import annotations

from typing import Any

_ALLOWED = {
    None: {"type", "description", "title", "enum", "anyOf", "$ref", "const"},
    "string": {"pattern", "format"},
    "number": {"multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"},
    "integer": {"multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"},
    "array": {"items", "minItems", "maxItems"},
    "object": {"properties", "required", "additionalProperties"},
    "boolean": set(),
    "null": set(),
}


def strict_violations(schema: dict[str, Any]) -> list[str]:
    """Every rule ``schema`` breaks, as ``"<where>: <rule>"``; empty when it is strict-valid."""
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append("/: the root must be type object")
    if "anyOf" in schema:
        problems.append("/: the root must not be anyOf")
    defs = schema.get("$defs", {})
    for name, sub in defs.items():
        _check(sub, f"/$defs/{name}", defs, problems)
    _check({k: v for k, v in schema.items() if k != "$defs"}, "", defs, problems)
    return problems


def _check(node: Any, where: str, defs: dict[str, Any], problems: list[str]) -> None:
    if not isinstance(node, dict):
        problems.append(f"{where}: not a schema object")
        return
    if "$ref" in node:
        if not str(node["$ref"]).startswith("#/$defs/") or node["$ref"].split("/")[-1] not in defs:
            problems.append(f"{where}: $ref must point into $defs")
        if set(node) != {"$ref"}:
            problems.append(f"{where}: keywords beside $ref: {sorted(set(node) - {'$ref'})}")
        return
    if "anyOf" in node:
        for i, branch in enumerate(node["anyOf"]):
            _check(branch, f"{where}/anyOf/{i}", defs, problems)
        extra = set(node) - {"anyOf", "description", "title"}
        if extra:
            problems.append(f"{where}: keywords beside anyOf: {sorted(extra)}")
        return
    types = node.get("type")
    if types is None:
        problems.append(f"{where}: no type")
        return
    type_list = types if isinstance(types, list) else [types]
    allowed = set(_ALLOWED[None])
    for t in type_list:
        if t not in _ALLOWED:
            problems.append(f"{where}: unknown type {t}")
            continue
        allowed |= _ALLOWED[t]
    for key in node:
        if key not in allowed:
            problems.append(f"{where}: keyword {key} is not supported")
    if "object" in type_list:
        props = node.get("properties")
        if not isinstance(props, dict) or not props:
            problems.append(f"{where}: an object needs properties")
            props = {}
        if node.get("additionalProperties") is not False:
            problems.append(f"{where}: additionalProperties must be false")
        if sorted(node.get("required", [])) != sorted(props):
            problems.append(f"{where}: every property must be required")
        for name, sub in props.items():
            _check(sub, f"{where}/properties/{name}", defs, problems)
    if "array" in type_list:
        if "items" not in node:
            problems.append(f"{where}: an array needs items")
        else:
            _check(node["items"], f"{where}/items", defs, problems)
    if "enum" in node:
        for value in node["enum"]:
            if value is None and "null" not in type_list:
                problems.append(f"{where}: enum has null but type does not")
