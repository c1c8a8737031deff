"""OpenAI-format tools: declarations plus one ``execute`` for the caller's own loop (the seed's "pi" shape).

::

    tools, execute = create_openai_tools(workspace)
    response = client.chat.completions.create(model=..., messages=messages, tools=tools)
    for call in response.choices[0].message.tool_calls or []:
        outcome = await execute(call)            # {"content": [...], "is_error": bool}; never raises
        messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome["content"]})

No ``openai`` package is needed: declarations are plain dicts and ``execute`` accepts a tool call as a
dict or as the SDK object of the same shape.

Content parts are Chat Completions parts: ``{"type": "text", "text"}`` and, for an image from ``read``,
``{"type": "image_url", "image_url": {"url": "data:<type>;base64,..."}}``; a PDF becomes text saying it
cannot be attached. Chat Completions accepts only text in ``role: "tool"`` messages, so send the text
parts as the tool message and the image parts in a ``role: "user"`` message right after it. These are
not Responses API shapes: for the Responses API use ``api="responses"`` (below), whose outputs carry
media as ``input_image``/``input_file`` items.

Constrained sampling (OpenAI strict mode). ``read``, ``write`` and ``edit`` carry byte offsets and long
verbatim strings, so they ask for it:

- ``"prefer"`` (default): every tool whose schema strict mode can express is declared closed
  (``"strict": True``, every field required, optional ones nullable, ``additionalProperties: false``);
  a tool it cannot express (``exec``: free-form ``input``, an ``env`` map) stays open without ``strict``,
  i.e. ordinary tool calling. A provider that ignores ``strict`` still gets valid schemas.
- ``"require"``: the same declarations, but creation fails with ``ValueError`` when ``read``, ``write``
  or ``edit`` cannot be declared strict, for a pinned model known to enforce schemas.
- ``False``: open schemas everywhere, no ``strict`` key.

Whatever the declarations, a ``null`` sent for an optional field that does not accept one means "not
given" (a strict-mode model sends ``"limit": null`` for "no limit"; every tool drops it, in every
adapter) while a null the tool accepts is kept (exec's ``input``).

``api="responses"`` targets the Responses API instead: declarations are flat function tools
(``{"type": "function", "name", "description", "parameters", "strict"}``, ``strict`` always stated since
it defaults to true there) and ``execute(item)`` takes a ``function_call`` item (``{"type":
"function_call", "call_id", "name", "arguments"}``, dict or SDK object) and returns a
``function_call_output`` item (``{"type": "function_call_output", "call_id", "output"}``; an integer
``call_id`` comes back as its digits, a missing one as ``""``), whose
``output`` is the text, or ``input_text``/``input_image``/``input_file`` items when ``read`` returns
media. A failure is an output starting with ``Error:``; nothing raises::

    tools, execute = create_openai_tools(workspace, api="responses")
    response = client.responses.create(model=..., input=items, tools=tools)
    for call in (i for i in response.output if i.type == "function_call"):
        items.append(await execute(call))

``format="anthropic"`` emits Anthropic tool definitions (``{name, description, input_schema}``), takes
Anthropic ``tool_use`` blocks (``{id, name, input}``) and returns Anthropic content blocks. With
constrained sampling on, read, write, edit and the mutating tools (delete, publish) are marked
``strict: true`` with schemas in Anthropic's strict subset, which ``anthropic.transform_schema`` leaves
unchanged (bounds and defaults are stated in the field descriptions and enforced by the tool); ls,
find, grep and exec keep open schemas (see :func:`_declare_anthropic` for why).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from ..storage import audit_caller
from ..surface import WorkspaceSurface
from ._adapter_schema import StrictSchemaError, anthropic_strict_schema, strict_schema
from ._adapter_tools import build_tools, record_refused, unknown_tool
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
    workspace: WorkspaceSurface,
    *,
    constrained_sampling: ConstrainedSampling = "prefer",
    format: Literal["openai", "anthropic"] = "openai",
    api: Literal["chat", "responses"] = "chat",
    **options: Any,
) -> tuple[list[dict[str, Any]], ExecuteToolCall]:
    """Declarations for an OpenAI-compatible (or Anthropic) client and the ``execute`` that runs a call.

    ``api="chat"`` (default) is the Chat Completions shape; ``api="responses"`` declares Responses API
    function tools and ``execute`` takes a ``function_call`` item and returns a ``function_call_output``
    item. ``options`` are ``create_tools``' options (``readonly``, ``read``, ``exec``…). ``workspace``
    may also be a ``dict[str, Tool]`` already built.
    """
    if constrained_sampling is True:
        constrained_sampling = "prefer"
    if constrained_sampling not in ("prefer", "require", False):
        raise ValueError(
            f'constrained_sampling must be "prefer", "require" or False, not {constrained_sampling!r}'
        )
    if format not in ("openai", "anthropic"):
        raise ValueError(f'format must be "openai" or "anthropic", not {format!r}')
    if api not in ("chat", "responses"):
        raise ValueError(f'api must be "chat" or "responses", not {api!r}')
    if api == "responses" and format != "openai":
        raise ValueError('api="responses" is an OpenAI API: use it with format="openai"')
    shape = "responses" if api == "responses" else format
    adapter = "anthropic" if format == "anthropic" else "openai"  # the caller named in the audit log
    tools = build_tools(workspace, options)
    declarations = [_declare(tool, constrained_sampling, shape) for tool in tools.values()]

    async def run(tool_call: Any, on_update: ToolUpdate | None) -> tuple[list[ContentPart], bool]:
        try:
            name, raw = _parse_call(tool_call, shape)
        except _BadCall as exc:
            return _error_parts(str(exc)), True
        except Exception as exc:  # a tool call object that cannot even be read
            return _error_parts(f"Malformed tool call: {type(exc).__name__}: {exc}"), True
        with audit_caller(adapter=adapter):
            tool = tools.get(name)
            try:
                if tool is None:
                    raise ArgumentError(unknown_tool(tools, name))
                args = parse_arguments(raw, name)
            except ArgumentError as exc:
                record_refused(tools, name, raw, str(exc))
                return _error_parts(str(exc)), True
            except Exception as exc:  # arguments that cannot even be read (an odd SDK object)
                message = f"Malformed tool call: {type(exc).__name__}: {exc}"
                record_refused(tools, name, None, message)
                return _error_parts(message), True
            try:
                result = await tool.run(args, on_update=on_update)
                return tool.to_model_output(result), "error" in result
            except Exception as exc:  # execute never raises: the loop must be able to continue
                return _error_parts(f"{name} failed: {type(exc).__name__}: {exc}"), True

    async def execute(tool_call: Any, *, on_update: ToolUpdate | None = None) -> dict[str, Any]:
        """Run one tool call; bad calls and failed tools come back as errors, never as exceptions."""
        parts, is_error = await run(tool_call, on_update)
        if shape == "responses":
            return _function_call_output(tool_call, parts)
        return {"content": [_content_part(part, format) for part in parts], "is_error": is_error}

    return declarations, execute


def _declare(tool: Tool, constrained: ConstrainedSampling, format: str) -> dict[str, Any]:
    if format == "anthropic":
        return _declare_anthropic(tool, constrained)
    parameters = tool.parameters
    strict = False
    if constrained:
        try:
            parameters = strict_schema(tool.parameters)
            strict = True
        except StrictSchemaError as exc:
            _check_required(tool, constrained, exc)
    if format == "responses":
        # Responses API function tools are flat, and `strict` defaults to true there: always say it.
        return {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": parameters,
            "strict": strict,
        }
    function: dict[str, Any] = {"name": tool.name, "description": tool.description, "parameters": parameters}
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _declare_anthropic(tool: Tool, constrained: ConstrainedSampling) -> dict[str, Any]:
    """An Anthropic tool definition; ``strict`` only for the tools that gain most from it.

    Anthropic compiles every strict schema of a request into one grammar, with caps on the optional
    and union-typed parameters across all of them. So strict is spent where a malformed call costs
    most: the tools that ask for constrained sampling (read, write, edit: offsets and verbatim text)
    and every mutating tool (delete, publish…; exec's free-form ``input`` cannot be strict). The
    listing tools (ls, find, grep: read-only, cheap to retry, and most of the optional parameters)
    keep their full open schema.
    """
    declaration: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.parameters,
    }
    if constrained and (tool.mutating or tool.name in CONSTRAINED_TOOLS):
        try:
            declaration["input_schema"] = anthropic_strict_schema(tool.parameters)
            declaration["strict"] = True
        except StrictSchemaError as exc:
            _check_required(tool, constrained, exc)
    return declaration


def _check_required(tool: Tool, constrained: ConstrainedSampling, exc: StrictSchemaError) -> None:
    if constrained == "require" and tool.name in CONSTRAINED_TOOLS:
        raise ValueError(
            f'constrained_sampling="require": the {tool.name} tool cannot be declared strict ({exc})'
        ) from exc


class _BadCall(Exception):
    pass


def _field(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _parse_call(call: Any, format: str) -> tuple[str, Any]:
    """The tool name and the raw arguments (parsed by the caller, so a refusal can be recorded)."""
    if format == "anthropic":
        name, raw = _field(call, "name"), _field(call, "input")
    elif format == "responses":
        kind = _field(call, "type")
        if kind not in (None, "function_call"):
            raise _BadCall(f"Malformed tool call: expected a function_call item, not {kind!r}.")
        name, raw = _field(call, "name"), _field(call, "arguments")
    else:
        function = _field(call, "function")
        if function is None:
            raise _BadCall('Malformed tool call: expected {"function": {"name", "arguments"}}.')
        name, raw = _field(function, "name"), _field(function, "arguments")
    if not isinstance(name, str) or not name:
        raise _BadCall("Malformed tool call: the tool name is missing.")
    return name, raw


def _error_parts(message: str) -> list[ContentPart]:
    return [{"type": "text", "text": f"Error: {message}"}]


def _function_call_output(call: Any, parts: list[ContentPart]) -> dict[str, Any]:
    """A Responses API ``function_call_output`` item: a string when all text, else input content items."""
    try:
        call_id = _field(call, "call_id")
    except Exception:
        call_id = None
    output: str | list[dict[str, Any]]
    if all(part.get("type") == "text" for part in parts):
        output = "\n".join(str(part["text"]) for part in parts)
    else:
        output = [_responses_part(part) for part in parts]
    return {"type": "function_call_output", "call_id": _call_id(call_id), "output": output}


def _call_id(value: Any) -> str:
    """The ``call_id`` echoed back: a string as it is; an integer (``7``, from a client that numbers its
    calls) as its digits, so the output still pairs with its call (it came back as ``""`` before, which
    pairs with nothing); anything else (missing, ``None``, a bool, an object) as ``""``."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ""


def _responses_part(part: ContentPart) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": part["text"]}
    media_type, data = part.get("media_type", "application/octet-stream"), part.get("data", "")
    url = f"data:{media_type};base64,{data}"
    if kind == "image":
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    return {"type": "input_file", "filename": part.get("filename") or "file", "file_data": url}


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
