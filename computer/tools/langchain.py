"""LangChain adapter: the workspace tools as LangChain tools (the seed's "TanStack" shape).

::

    tools = create_langchain_tools(workspace, approve="mutating", stream_event_name="exec")
    agent = create_react_agent(model, tools, checkpointer=InMemorySaver())

Each tool is a :class:`WorkspaceTool` (a ``BaseTool``) whose ``args_schema`` is the core tool's JSON
schema, async, with ``response_format="content_and_artifact"``: the model sees text (or multimodal
content blocks for an image or PDF from ``read``) and the raw result dict is the message's ``artifact``.
A failed call is a ``ToolMessage`` with ``status="error"`` whose artifact is the result (``{"error":
...}`` at least). ``get_input_schema()`` is the core tool's input model. langchain-tests' standard
``ToolsUnitTests`` and ``ToolsIntegrationTests`` pass on every tool (``tests/adapters``).

Options (besides ``create_tools``' own):

- ``format``: ``"array"`` (a list) or ``"object"`` (a dict keyed by tool name).
- ``approve``: tool names or ``"mutating"``. The call pauses with LangGraph's ``interrupt()`` carrying
  ``{"type": "approval", "tool", "args"}``; resume with ``Command(resume=True)`` to run it,
  ``Command(resume={"approved": True, "args": {...}})`` to run it with edited arguments, or anything
  else (``False``, ``{"approved": False, "message": "..."}``) to deny it. Needs a checkpointer. Parallel
  calls pause separately; resume them together with ``Command(resume={interrupt.id: decision, ...})``.
- ``lazy``: tool names or ``"all"``. Those tools are withheld from the prompt until the model calls
  ``discover_tools``, which lists them and enables the ones it names. Bind the model to
  :func:`visible_tools` each turn (``create_react_agent(lambda state, runtime:
  model.bind_tools(visible_tools(tools)), tools)``); every tool stays executable by the tool node.
- ``stream_event_name``: each running exec snapshot is forwarded under this name as a LangChain custom
  event (``astream_events``: ``on_custom_event``) and, inside a LangGraph run, to the ``custom`` stream
  mode as ``{"event": name, "data": snapshot}``.

OpenAI strict mode: bind the declarations of :func:`computer.tools.openai.create_openai_tools`, not
``model.bind_tools(tools, strict=True)``, and run the calls with these tools::

    declarations, _ = create_openai_tools(workspace)
    agent = create_react_agent(model.bind_tools(declarations), create_langchain_tools(workspace))

LangChain passes those dicts on unchanged, each tool strict or not as its schema allows. ``strict=True``
closes every tool's schema itself: exec's ``env`` (a map) becomes an object that takes no name and its
free-form ``input`` stays without a ``type``, which strict mode refuses (one such tool fails the whole
request). The ``default`` keywords it keeps are not the problem: OpenAI's own strict converter
(``openai.lib._pydantic``, openai 3.63) keeps a non-null ``default`` and drops ``default: null`` only
as meaningless; the schemas stay those of every adapter (SPEC 8).

Cancelling the run (cancelling the task that streams or invokes the graph) kills a running exec.
``write``, ``edit``, ``delete`` and ``publish`` carry ``output_json_schema`` (the result's JSON
schema; ``output_schema`` is taken by LangChain's ``Runnable``), covering failures too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
from collections.abc import Collection, Coroutine, Mapping
from typing import Any, Literal, overload

from langchain_core.callbacks import AsyncCallbackManagerForToolRun
from langchain_core.callbacks.manager import adispatch_custom_event
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import patch_config
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ..storage import audit_caller
from ..surface import WorkspaceSurface
from ._adapter_tools import build_tools, select_tools
from ._arguments import ArgumentError, parse_arguments
from ._tool import ContentPart, Tool, error_result

__all__ = ["DiscoverToolsTool", "WorkspaceTool", "create_langchain_tools", "visible_tools"]

DISCOVER_TOOL_NAME = "discover_tools"
_FIXED_RESULT_TOOLS = ("write", "edit", "delete", "publish")
_DISCOVER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "names": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Tools to enable; omit to only list them.",
        }
    },
    "additionalProperties": False,
}


class _DiscoverInput(BaseModel):
    """``discover_tools``' arguments as a model: what ``get_input_schema`` answers for it."""

    model_config = ConfigDict(extra="forbid", title="discover_tools")

    names: list[str] | None = Field(default=None, description="Tools to enable; omit to only list them.")


@overload
def create_langchain_tools(
    workspace: WorkspaceSurface,
    *,
    format: Literal["array"] = "array",
    approve: Literal["mutating"] | Collection[str] | None = None,
    lazy: Literal["all"] | Collection[str] | None = None,
    stream_event_name: str | None = None,
    **options: Any,
) -> list[BaseTool]: ...


@overload
def create_langchain_tools(
    workspace: WorkspaceSurface,
    *,
    format: Literal["object"],
    approve: Literal["mutating"] | Collection[str] | None = None,
    lazy: Literal["all"] | Collection[str] | None = None,
    stream_event_name: str | None = None,
    **options: Any,
) -> dict[str, BaseTool]: ...


def create_langchain_tools(
    workspace: WorkspaceSurface,
    *,
    format: Literal["array", "object"] = "array",
    approve: Literal["mutating"] | Collection[str] | None = None,
    lazy: Literal["all"] | Collection[str] | None = None,
    stream_event_name: str | None = None,
    **options: Any,
) -> list[BaseTool] | dict[str, BaseTool]:
    """LangChain tools over ``create_tools(workspace, **options)``."""
    if format not in ("array", "object"):
        raise ValueError(f'format must be "array" or "object", not {format!r}')
    core = build_tools(workspace, options)
    approved = select_tools(approve, core, option="approve", groups=("mutating",))
    withheld = select_tools(lazy, core, option="lazy", groups=("all",))
    registry = _LazyRegistry(withheld) if withheld else None
    tools: list[BaseTool] = [
        WorkspaceTool.wrap(
            tool,
            needs_approval=name in approved,
            stream_event_name=stream_event_name,
            lazy=registry if name in withheld else None,
        )
        for name, tool in core.items()
    ]
    if registry is not None:
        registry.tools = {t.name: t for t in tools if t.name in withheld}
        tools.append(DiscoverToolsTool(registry=registry))
    if format == "object":
        return {t.name: t for t in tools}
    return tools


def visible_tools(tools: list[BaseTool] | Mapping[str, BaseTool]) -> list[BaseTool]:
    """The tools to bind to the model now: every tool except lazy ones not yet enabled."""
    items = list(tools.values()) if isinstance(tools, Mapping) else list(tools)
    return [t for t in items if not isinstance(t, WorkspaceTool) or t.visible]


class _LazyRegistry:
    """Which withheld tools ``discover_tools`` has enabled, shared by one tool set."""

    def __init__(self, withheld: frozenset[str]) -> None:
        self.withheld = withheld
        self.enabled: set[str] = set()
        self.tools: dict[str, BaseTool] = {}


class _ScreenedTool(BaseTool):
    """A tool whose raw input is screened before LangChain parses it: input it cannot parse (nested
    too deep, not an object…) becomes a tool error, never an exception out of ``run``/``arun``."""

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return super().invoke(_screened_call(input, self.name), config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return await super().ainvoke(_screened_call(input, self.name), config, **kwargs)

    def run(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        return super().run(_screened(tool_input, self.name), *args, **kwargs)

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        return await super().arun(_screened(tool_input, self.name), *args, **kwargs)

    def _to_args_and_kwargs(
        self, tool_input: Any, tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if isinstance(tool_input, dict) and _BAD_ARGUMENTS in tool_input:
            # Raised inside BaseTool.arun's error handling: a ToolMessage with status="error".
            raise ToolException(f"Error: {tool_input[_BAD_ARGUMENTS]}")
        args, kwargs = super()._to_args_and_kwargs(tool_input, tool_call_id)
        # The model's arguments travel under one key: spread as keywords, `self` clashed with the method
        # (TypeError out of ainvoke) and LangChain replaced `config`/`run_manager` with its own values.
        # The call's id rides along: a failed result is answered as its own error ToolMessage.
        return args, {_MODEL_ARGUMENTS: kwargs, _CALL_ID: tool_call_id}


class WorkspaceTool(_ScreenedTool):
    """One core tool as a LangChain tool; ``core`` does the work, this class only shapes it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: Any = True
    core: Tool = Field(exclude=True)
    needs_approval: bool = False
    stream_event_name: str | None = None
    output_json_schema: dict[str, Any] | None = None
    _lazy: _LazyRegistry | None = PrivateAttr(default=None)

    @classmethod
    def wrap(
        cls,
        tool: Tool,
        *,
        needs_approval: bool = False,
        stream_event_name: str | None = None,
        lazy: _LazyRegistry | None = None,
    ) -> WorkspaceTool:
        wrapped = cls(
            name=tool.name,
            description=tool.description,
            args_schema=tool.parameters,
            core=tool,
            needs_approval=needs_approval,
            stream_event_name=stream_event_name,
            output_json_schema=_output_schema(tool),
            metadata={"mutating": tool.mutating, "destructive": tool.destructive, "lazy": lazy is not None},
        )
        wrapped._lazy = lazy
        return wrapped

    def _to_args_and_kwargs(
        self, tool_input: Any, tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if isinstance(tool_input, dict) and _BAD_ARGUMENTS in tool_input:
            with audit_caller(adapter="langchain"):  # refused before the core tool runs: record it here
                self.core.record_refused({}, str(tool_input[_BAD_ARGUMENTS]))
            if tool_call_id is not None:  # answered by _arun as an error message with its artifact
                return (), {_REFUSED: str(tool_input[_BAD_ARGUMENTS]), _CALL_ID: tool_call_id}
        return super()._to_args_and_kwargs(tool_input, tool_call_id)

    def get_input_schema(self, config: RunnableConfig | None = None) -> type[BaseModel]:
        """The core tool's input model, whose JSON schema is ``args_schema``.

        For a JSON-schema ``args_schema`` LangChain answers ``Runnable``'s generic input (a string, any
        dict or a ``ToolCall``), so ``get_input_jsonschema()`` described no argument of the tool and
        langchain-tests' ``ToolsUnitTests`` refused a call with no arguments (``processes``).
        """
        return self.core.input_model

    @property
    def visible(self) -> bool:
        """Whether the model should see this tool now (lazy tools only once discovered)."""
        return self._lazy is None or self.name in self._lazy.enabled

    def _run(self, *args: Any, config: RunnableConfig, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return _run_on_sync_loop(self._arun(*args, config=config, **kwargs))
        raise RuntimeError(f"{self.name} is async: use ainvoke inside a running event loop")

    async def _arun(
        self,
        *args: Any,
        config: RunnableConfig,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
        **kwargs: Any,
    ) -> tuple[str | list[dict[str, Any]] | ToolMessage, dict[str, Any] | None]:
        if args:
            raise ToolException(f"{self.name} takes keyword arguments only")
        call_id = kwargs.pop(_CALL_ID, None)
        refused = kwargs.pop(_REFUSED, None)
        if refused is not None:
            return self._failed(error_result(refused), call_id)
        packed = kwargs.pop(_MODEL_ARGUMENTS, None)
        arguments: dict[str, Any] = dict(kwargs) if packed is None else {**kwargs, **packed}
        if self.needs_approval:
            decision = _ask_approval(self.name, arguments)
            if isinstance(decision, str):
                return self._failed(error_result(decision), call_id)
            arguments = decision
        on_update = None
        if self.stream_event_name is not None:
            # Custom events need the tool's own run as their parent, as in LangChain's own tools.
            child = patch_config(config, callbacks=run_manager.get_child()) if run_manager else config
            on_update = _stream_forwarder(self.stream_event_name, child)
        with audit_caller(adapter="langchain"):
            result = await self.core.run(arguments, on_update=on_update)
        if "error" in result:
            return self._failed(result, call_id)
        return _to_langchain(self.core.to_model_output(result)), result

    def _failed(
        self, result: dict[str, Any], call_id: str | None
    ) -> tuple[str | list[dict[str, Any]] | ToolMessage, dict[str, Any] | None]:
        """A failed call as an error ``ToolMessage`` (as OpenAI's is_error and MCP's isError say) that
        keeps its content and, as its artifact, the result: the bare ``{"error"}``, an exec's partial
        output, publish's ``ok: false``. ``content_and_artifact`` promises an artifact on every message
        (langchain-tests' ``ToolsIntegrationTests``); a bare error used to be raised as a
        ``ToolException``, whose message has none. Without a call id (arguments invoked bare, so no
        message) a bare error is still raised, so ``invoke`` answers its text (``handle_tool_error``),
        and a fuller one is answered as its content."""
        content = _to_langchain(self.core.to_model_output(result))
        if call_id is None:
            if len(result) == 1:
                raise ToolException(f"Error: {result['error']}")
            return content, result
        blocks: Any = content  # text, or the content blocks ToolMessage takes
        failed = ToolMessage(blocks, artifact=result, tool_call_id=call_id, name=self.name, status="error")
        return failed, None


class DiscoverToolsTool(_ScreenedTool):
    """Lists the withheld tools and enables the ones named, so the next model turn can call them."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = DISCOVER_TOOL_NAME
    handle_tool_error: Any = True
    description: str = (
        "List more tools you can use, or enable some. Call with no names to see the available tools "
        "and what they do; call with `names` to enable those tools for your next steps."
    )
    args_schema: Any = Field(default_factory=lambda: dict(_DISCOVER_SCHEMA))
    registry: _LazyRegistry = Field(exclude=True)

    def get_input_schema(self, config: RunnableConfig | None = None) -> type[BaseModel]:
        """A model of ``args_schema`` (see :meth:`WorkspaceTool.get_input_schema`)."""
        return _DiscoverInput

    def _run(self, names: list[str] | None = None, **kwargs: Any) -> str:
        kwargs.pop(_CALL_ID, None)
        if _MODEL_ARGUMENTS in kwargs:
            names = kwargs[_MODEL_ARGUMENTS].get("names")
        registry = self.registry
        if not names:
            lines = ["Tools you can enable (call discover_tools with their names):"]
            for name, tool in registry.tools.items():
                state = " (enabled)" if name in registry.enabled else ""
                summary = tool.description.strip().split("\n", 1)[0]
                lines.append(f"- {name}{state}: {summary}")
            return "\n".join(lines)
        unknown = [n for n in names if n not in registry.tools]
        if unknown:
            raise ToolException(
                f"Error: unknown tool(s) {', '.join(unknown)}; available: {', '.join(registry.tools)}"
            )
        registry.enabled.update(names)
        return "Enabled: " + ", ".join(names) + ". You can call them now."

    async def _arun(self, names: list[str] | None = None, **kwargs: Any) -> str:
        return self._run(names, **kwargs)


# The key of the stand-in input that carries a parse failure through BaseTool's own error handling.
_BAD_ARGUMENTS = "__computer_bad_arguments__"
# The one keyword that carries the model's arguments from ``_to_args_and_kwargs`` to ``_run``/``_arun``.
_MODEL_ARGUMENTS = "__computer_arguments__"
# The keyword that carries the tool call's id along (None when invoked with bare arguments).
_CALL_ID = "__computer_call_id__"
# The keyword that carries, instead of arguments, why they were refused (a call with an id only).
_REFUSED = "__computer_refused__"


def _screened(tool_input: Any, name: str) -> Any:
    """``tool_input`` if it is a usable arguments object, else a stand-in carrying the error.

    LangChain turns its input into a string for callbacks (``str()``, recursive) before any error
    handling, and refuses a string or non-dict input with a plain exception; both would escape the
    tool. A JSON string holding an object is accepted as that object.
    """
    try:
        return parse_arguments(tool_input, name)
    except ArgumentError as exc:
        return {_BAD_ARGUMENTS: str(exc)}


def _screened_call(value: Any, name: str) -> Any:
    """A ``ToolCall`` whose ``args`` is not an object gets them screened (LangChain would ``.copy()``
    them and raise); anything else is passed on as it is."""
    if (
        isinstance(value, Mapping)
        and value.get("type") == "tool_call"
        and not isinstance(value.get("args"), dict)
    ):
        return {**value, "args": _screened(value.get("args"), name)}
    return value


_SYNC_LOOP: asyncio.AbstractEventLoop | None = None
_SYNC_LOOP_LOCK = threading.Lock()


def _forget_sync_loop() -> None:
    """In a forked child: the parent's loop thread is not there, so a call would wait for ever."""
    global _SYNC_LOOP, _SYNC_LOOP_LOCK
    _SYNC_LOOP, _SYNC_LOOP_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_sync_loop)


def _sync_loop() -> asyncio.AbstractEventLoop:
    """The one event loop (in a daemon thread) that runs every synchronous call of this process's tools.

    A workspace keeps loop-bound state between calls (a live sandbox's pipes and readers, locks), so
    each call on a loop of its own (``asyncio.run``, closed at its end) broke every exec after the first
    ("Event loop is closed"); LangGraph's synchronous tool node also calls from several threads at once.
    """
    global _SYNC_LOOP
    with _SYNC_LOOP_LOCK:
        if _SYNC_LOOP is None or _SYNC_LOOP.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="computer-langchain-sync", daemon=True).start()
            _SYNC_LOOP = loop
            # Before the interpreter stops its thread pools (registered later, so run earlier): a live
            # sandbox's idle end needs one, and failed with "cannot schedule new futures after shutdown".
            register = getattr(threading, "_register_atexit", None)
            if register is not None:
                register(_finish_sync_loop, loop, os.getpid())
        return _SYNC_LOOP


def _finish_sync_loop(loop: asyncio.AbstractEventLoop, pid: int) -> None:
    """At exit, end what is left on the shared loop as ``asyncio.run`` would (its tasks cancelled and
    awaited, at most 10 s), then stop it."""

    async def finish() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        await loop.shutdown_asyncgens()

    if pid != os.getpid() or loop.is_closed() or not loop.is_running():
        return  # (a forked child inherits the registration, not the loop's thread)
    with contextlib.suppress(Exception):  # exiting anyway: never block or fail the interpreter's exit
        asyncio.run_coroutine_threadsafe(finish(), loop).result(timeout=15)
    loop.call_soon_threadsafe(loop.stop)


def _run_on_sync_loop(call: Coroutine[Any, Any, Any]) -> Any:
    """Run ``call`` on the shared loop in the caller's context (LangGraph's config, for ``interrupt()``
    and the stream writer, lives in context variables) and wait for it; an interrupted wait (Ctrl-C)
    cancels the call, which kills a running exec."""
    context = contextvars.copy_context()

    async def in_callers_context() -> Any:
        return await asyncio.get_running_loop().create_task(call, context=context)

    future = asyncio.run_coroutine_threadsafe(in_callers_context(), _sync_loop())
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def _ask_approval(name: str, arguments: dict[str, Any]) -> dict[str, Any] | str:
    """Pause the graph for a human decision; returns the arguments to run with, or the denial's error."""
    from langgraph.types import interrupt

    decision = interrupt({"type": "approval", "tool": name, "args": arguments})
    if decision is True or decision in ("approve", "approved", "yes"):
        return arguments
    if isinstance(decision, Mapping) and decision.get("approved") is True:
        edited = decision.get("args")
        return dict(edited) if isinstance(edited, Mapping) else arguments
    message = decision.get("message") if isinstance(decision, Mapping) else None
    return f"the user denied this {name} call." + (f" {message}" if message else "")


def _stream_forwarder(event_name: str, config: RunnableConfig) -> Any:
    try:
        from langgraph.config import get_stream_writer

        writer = get_stream_writer()
    except (ImportError, RuntimeError, LookupError):  # not inside a LangGraph run
        writer = None

    async def forward(snapshot: dict[str, Any]) -> None:
        await adispatch_custom_event(event_name, snapshot, config=config)
        if writer is not None:
            writer({"event": event_name, "data": snapshot})

    return forward


def _to_langchain(parts: list[ContentPart]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if part["type"] == "text":
            blocks.append({"type": "text", "text": part["text"]})
        elif part["type"] == "image":
            blocks.append({"type": "image", "base64": part["data"], "mime_type": part["media_type"]})
        else:
            block = {"type": "file", "base64": part["data"], "mime_type": part["media_type"]}
            if part.get("filename"):
                block["extras"] = {"filename": part["filename"]}
            blocks.append(block)
    return blocks


def _output_schema(tool: Tool) -> dict[str, Any] | None:
    """The tool's result schema with the failure shape added, for the fixed-result tools."""
    if tool.name not in _FIXED_RESULT_TOOLS:
        return tool.output_schema
    failure = {
        "type": "object",
        "properties": {"error": {"type": "string"}},
        "required": ["error"],
    }
    success = tool.output_schema
    if success is None:
        return None
    branches = success.get("anyOf", [success])
    if any(_has_error_branch(b) for b in branches):
        return success
    return {"anyOf": [*branches, failure]}


def _has_error_branch(schema: Any) -> bool:
    return isinstance(schema, dict) and "error" in schema.get("properties", {})
