"""OpenAI-format tools: declarations plus one ``execute`` for the caller's own loop (the seed's "pi" shape).

::

    tools, execute = create_openai_tools(workspace)
    response = client.chat.completions.create(model=..., messages=messages, tools=tools)
    for call in response.choices[0].message.tool_calls or []:
        outcome = await execute(call)            # {"content": [...], "is_error": bool}; never raises
        messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome["content"]})

No ``openai`` package is needed: declarations are plain dicts and ``execute`` accepts a tool call as a
dict or as the SDK object of the same shape.

Content parts are OpenAI-style: ``{"type": "text", "text"}`` and, for an image from ``read``,
``{"type": "image_url", "image_url": {"url": "data:<type>;base64,..."}}``; a PDF becomes text saying it
cannot be attached. The Responses API and most OpenAI-compatible servers take image parts in a tool
result; Chat Completions accepts only text in ``role: "tool"`` messages, so there send the text parts
as the tool message and the image parts in a ``role: "user"`` message right after it.

Constrained sampling (OpenAI strict mode). ``read``, ``write`` and ``edit`` carry byte offsets and long
verbatim strings, so they ask for it:

- ``"prefer"`` (default): every tool whose schema strict mode can express is declared closed
  (``"strict": True``, every field required, optional ones nullable, ``additionalProperties: false``);
  a tool it cannot express (``exec``: free-form ``input``, an ``env`` map) stays open without ``strict``,
  i.e. ordinary tool calling. A provider that ignores ``strict`` still gets valid schemas.
- ``"require"``: the same declarations, but creation fails with ``ValueError`` when ``read``, ``write``
  or ``edit`` cannot be declared strict, for a pinned model known to enforce schemas.
- ``False``: open schemas everywhere, no ``strict`` key.

Whatever the declarations, ``execute`` drops a ``null`` sent for an optional field that does not accept
one (a strict-mode model sends ``"limit": null`` for "no limit") and keeps a null the tool accepts
(exec's ``input``).

``format="anthropic"`` emits Anthropic tool definitions (``{name, description, input_schema}``), takes
Anthropic ``tool_use`` blocks (``{id, name, input}``) and returns Anthropic content blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from ._adapter_schema import StrictSchemaError, drop_unaccepted_nulls, strict_schema
from ._adapter_tools import build_tools
from ._arguments import ArgumentError, parse_arguments
from ._tool import ContentPart, Tool, ToolUpdate

__all__ = ["CONSTRAINED_TOOLS", "ExecuteToolCall", "create_openai_tools"]

ConstrainedSampling = Literal["prefer", "require"] | bool


class ExecuteToolCall(Protocol):
    """``await execute(tool_call, on_update=None) -> {"content": [...], "is_error": bool}``; never raises."""

    async def __call__(self, tool_call: Any, *, on_update: ToolUpdate | None = None) -> dict[str, Any]: ...


# The tools that ask for constrained sampling (seed: "read, write, and edit ... ask for it").
CONSTRAINED_TOOLS = ("read", "write", "edit")


def create_openai_tools(
    workspace: Any,
    *,
    constrained_sampling: ConstrainedSampling = "prefer",
    format: Literal["openai", "anthropic"] = "openai",
    **options: Any,
) -> tuple[list[dict[str, Any]], ExecuteToolCall]:
    """Declarations for an OpenAI-compatible (or Anthropic) client and the ``execute`` that runs a call.

    ``options`` are ``create_tools``' options (``readonly``, ``read``, ``exec``…). ``workspace`` may also be
    a ``dict[str, Tool]`` already built.
    """
    if constrained_sampling is True:
        constrained_sampling = "prefer"
    if constrained_sampling not in ("prefer", "require", False):
        raise ValueError(
            f'constrained_sampling must be "prefer", "require" or False, not {constrained_sampling!r}'
        )
    if format not in ("openai", "anthropic"):
        raise ValueError(f'format must be "openai" or "anthropic", not {format!r}')
    tools = build_tools(workspace, options)
    declarations = [_declare(tool, constrained_sampling, format) for tool in tools.values()]

    async def execute(tool_call: Any, *, on_update: ToolUpdate | None = None) -> dict[str, Any]:
        """Run one tool call; bad calls and failed tools come back with ``is_error: True``."""
        try:
            name, args = _parse_call(tool_call, format)
        except (_BadCall, ArgumentError) as exc:
            return _error(str(exc), format)
        except Exception as exc:  # a tool call object that cannot even be read
            return _error(f"Malformed tool call: {type(exc).__name__}: {exc}", format)
        tool = tools.get(name)
        if tool is None:
            return _error(f"Unknown tool {name!r}. Available tools: {', '.join(tools)}.", format)
        try:
            args = drop_unaccepted_nulls(args, tool.parameters)
            result = await tool.run(args, on_update=on_update)
            parts = tool.to_model_output(result)
            content = [_content_part(part, format) for part in parts]
        except Exception as exc:  # execute never raises: the loop must be able to continue
            return _error(f"{name} failed: {type(exc).__name__}: {exc}", format)
        return {"content": content, "is_error": "error" in result}

    return declarations, execute


def _declare(tool: Tool, constrained: ConstrainedSampling, format: str) -> dict[str, Any]:
    parameters = tool.parameters
    strict = False
    if constrained:
        try:
            parameters = strict_schema(tool.parameters)
            strict = True
        except StrictSchemaError as exc:
            if constrained == "require" and tool.name in CONSTRAINED_TOOLS:
                raise ValueError(
                    f'constrained_sampling="require": the {tool.name} tool cannot be declared strict ({exc})'
                ) from exc
    if format == "anthropic":
        # Anthropic has its own `strict` flag on tool definitions with the same closed-schema rules.
        declaration: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description,
            "input_schema": parameters,
        }
        if strict:
            declaration["strict"] = True
        return declaration
    function: dict[str, Any] = {"name": tool.name, "description": tool.description, "parameters": parameters}
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


class _BadCall(Exception):
    pass


def _field(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _parse_call(call: Any, format: str) -> tuple[str, dict[str, Any]]:
    if format == "anthropic":
        name, raw = _field(call, "name"), _field(call, "input")
    else:
        function = _field(call, "function")
        if function is None:
            raise _BadCall('Malformed tool call: expected {"function": {"name", "arguments"}}.')
        name, raw = _field(function, "name"), _field(function, "arguments")
    if not isinstance(name, str) or not name:
        raise _BadCall("Malformed tool call: the tool name is missing.")
    return name, parse_arguments(raw, name)


def _error(message: str, format: str) -> dict[str, Any]:
    return {
        "content": [_content_part({"type": "text", "text": f"Error: {message}"}, format)],
        "is_error": True,
    }


def _content_part(part: ContentPart, format: str) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part["text"]}
    media_type, data = part.get("media_type", "application/octet-stream"), part.get("data", "")
    if format == "anthropic":
        if kind == "image":
            return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
        if media_type == "application/pdf":
            return {"type": "document", "source": {"type": "base64", "media_type": media_type, "data": data}}
    elif kind == "image":
        return {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}}
    name = part.get("filename") or "the file"
    return {
        "type": "text",
        "text": f"[{name} ({media_type}) cannot be attached to a tool result in this format.]",
    }
