"""``Agent``: a Ray actor that owns one workspace and runs a pydantic-ai agent loop per turn.

Subclass it, decorate the subclass with ``@ray.remote`` (or let :func:`computer.agent.spawn` do it),
implement ``get_model()``, and optionally ``get_tools()``, ``before_turn()`` and ``get_backends()``.
The conversation, paused approvals, MCP servers, extensions and execution records live as files
under ``/.computer/agent`` in the agent's workspace (its SQLite file), so a killed or hibernated
agent continues where it stopped. ``get_workspace(agent_handle)`` reaches the same workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic_ai import Agent as ModelAgent
from pydantic_ai import DeferredToolRequests, DeferredToolResults, RunContext, ToolApproved, ToolDenied
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessagesTypeAdapter,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.tools import Tool
from pydantic_ai.toolsets import AbstractToolset, ApprovalRequiredToolset
from pydantic_core import to_jsonable_python

from ..actors import OwnerActor, owner_backends
from ..config import Settings
from ..runtime import Runtime
from ..storage import audit_caller
from ._execute import EXECUTE_DESCRIPTION, CodeRunner
from ._extensions import ExtensionManager, ExtensionToolset
from ._guard import GuardedWorkspace
from ._mcp import McpRegistry
from ._merge import MergedToolset
from ._sandbox_calls import AgentExecContext
from ._store import AgentState, AgentStore, PausedTurn
from ._tools import as_tools, user_toolset, workspace_toolset
from ._turn import AgentMovedError, PendingCall, Reply, TurnBusyError, TurnConfig, TurnContext

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from ..runtime import Backend

__all__ = ["Agent"]

log = logging.getLogger(__name__)

ROOT = "/workspace"

EventHandler = Callable[[RunContext[Any], AsyncIterable[Any]], Awaitable[None]]


class Agent(OwnerActor):
    """An agent that owns workspace ``name``: ``chat`` runs one turn; state survives restarts.

    Class attributes configure it: ``workspace_bash`` (the ``bash`` tool), ``include_mcp_tools``,
    ``extension_tools`` (give the model ``load_extension``/``list_extensions``),
    ``approve_workspace_tools`` (``"mutating"``, which also gates ``execute``, extension tools and
    ``load_extension``, or workspace tool names needing approval), ``hibernate_after``
    (seconds idle before the actor exits; ``None``: the configured default), ``instructions``,
    ``execute_timeout`` (seconds one ``execute`` run or extension sandbox run may take; ``None``: no bound).
    """

    managed = False  # clients never re-create an agent by its workspace name: only spawn() does
    workspace_bash: bool = True
    include_mcp_tools: bool = True
    extension_tools: bool = False
    approve_workspace_tools: Literal["mutating"] | Collection[str] | None = None
    hibernate_after: float | None = None
    instructions: str | None = None
    execute_timeout: float | None = 120.0

    def __init__(self, name: str, config: Settings | dict[str, Any] | None = None) -> None:
        # The concurrency groups Ray gave it: the class ``spawn`` makes says (``_spawn._with_groups``),
        # a class made otherwise has none (Ray ends a worker sent a group it lacks).
        cls = type(self)
        super().__init__(
            name,
            config,
            probe_group=cls.probe_group,
            control_group=cls.control_group,
            wait_group=cls.wait_group,
            stream_group=cls.stream_group,
        )
        if self.hibernate_after is not None:
            # The idle loop reads the setting when it first runs, which is after __init__ returns.
            self.config = self.config.model_copy(update={"hibernate_after": float(self.hibernate_after)})
        self._agent_exec = AgentExecContext(self.workspace)
        # The agent's own runtime: its backends (get_backends) and a context that lets sandboxed code
        # call the agent's tools. Nothing has run on the first runtime yet, so swapping it is safe.
        self.workspace.runtime = Runtime(self.workspace, list(self.get_backends()), context=self._agent_exec)
        self._store = AgentStore(self.workspace.fs)
        # What the model's tools work on: the same workspace, but the agent's own state is read-only.
        self._tool_workspace = GuardedWorkspace(self.workspace)
        self._turn_lock = asyncio.Lock()
        self._extensions = ExtensionManager(self.workspace, self._store, timeout=self.execute_timeout)
        self._mcp = McpRegistry(self._store)
        self._code = CodeRunner(self.workspace, self._agent_exec, self._store, timeout=self.execute_timeout)
        self._turn_tools: AbstractToolset[Any] | None = None
        self._root_ready = False
        self._resuming = False  # a paused turn is resuming after its approvals (under the turn lock)

    # -- hooks a subclass overrides -------------------------------------------------------------------

    def get_model(self) -> Model:
        """The pydantic-ai model of a turn (any ``Model``; ``FunctionModel``/``TestModel`` in tests)."""
        raise NotImplementedError("an Agent subclass must implement get_model()")

    def get_tools(self) -> Sequence[Any] | Mapping[str, Any]:
        """The agent's own tools: pydantic-ai ``Tool`` objects, plain functions, or ``computer.agent.tool``."""
        return []

    def get_backends(self) -> Sequence[Backend]:
        """The exec backends of the workspace (default: the cluster's pools, when configured)."""
        return owner_backends(self.config, self.name)

    def get_instructions(self) -> str | None:
        return self.instructions

    def before_turn(self, ctx: TurnContext) -> TurnConfig | Mapping[str, Any] | None:
        """Restrict (``active_tools``) or extend (``tools``) the tools of one turn; may be async."""
        return None

    def create_execute_tool(self) -> Tool[Any]:
        """The ``execute`` tool (put it in ``get_tools()``): Python with ``tools.*`` and ``workspace``."""

        async def execute(ctx: RunContext[Any], code: str) -> dict[str, Any]:
            return await self._execute(ctx, code)

        return Tool(execute, takes_ctx=True, name="execute", description=EXECUTE_DESCRIPTION)

    # -- RPC: conversation ----------------------------------------------------------------------------

    async def ping(self) -> str:
        self._check_open()
        return self.name

    async def chat(self, message: str, turn_id: str | None = None) -> Reply:
        """Run one turn with ``message``; the reply, or the calls the turn now waits on.

        With a ``turn_id``, a retry of a turn that was already committed returns its reply again
        instead of running the message twice (what :class:`~computer.agent.AgentClient` relies on).
        """
        return await self._on_own_loop(self._serialized(lambda: self._turn(message, key=turn_id)), self._gone)

    async def chat_stream(self, message: str, turn_id: str | None = None) -> AsyncIterator[dict[str, Any]]:
        """One turn as events: ``text`` deltas, ``tool_call``, ``tool_result``, then ``reply`` (last).

        The model must support streaming (real ones do; a ``FunctionModel`` needs a ``stream_function``).
        """
        async with contextlib.aclosing(
            self._hopped(self._events(message, turn_id), self._moved_error())
        ) as events:
            async for event in events:  # each step on the agent's loop (sent on its wait group)
                yield event

    async def _events(self, message: str, turn_id: str | None) -> AsyncIterator[dict[str, Any]]:
        self._check_open()
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        async def handler(ctx: RunContext[Any], events: AsyncIterable[Any]) -> None:
            async for event in events:
                shaped = _event_dict(event)
                if shaped is not None:
                    queue.put_nowait(shaped)

        async def run() -> Reply:
            try:
                return await self._serialized(lambda: self._turn(message, events=handler, key=turn_id))
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(run())
        try:
            while (item := await queue.get()) is not None:
                yield item
            reply = await task
            yield {"type": "reply", "reply": reply}
        finally:
            if not task.done():
                task.cancel()

    async def pending(self) -> list[PendingCall]:
        """The calls of the paused turn that wait for a decision.

        When every call is decided but the turn did not resume to its end (a tool raised, the actor
        died, the approve was cancelled) and no resume is running here, those calls: approving or
        rejecting one of them again resumes the turn.
        """
        state = await self._store.load_state()
        if state.paused is None:
            return []
        return state.paused.undecided() or ([] if self._resuming else list(state.paused.calls))

    async def approve(self, call_id: str) -> Reply:
        """Approve a pending call; once every call is decided the turn resumes and its reply returns."""
        return await self._on_own_loop(self._serialized(lambda: self._decide(call_id, True)), self._gone)

    async def reject(self, call_id: str, reason: str | None = None) -> Reply:
        """Reject a pending call (the model sees ``reason``); resumes like ``approve``."""
        rejected = reason or "The user rejected this call."
        return await self._on_own_loop(self._serialized(lambda: self._decide(call_id, rejected)), self._gone)

    async def history(self) -> list[dict[str, Any]]:
        """The stored conversation, as pydantic-ai's JSON form of its messages."""
        state = await self._store.load_state()
        return list(ModelMessagesTypeAdapter.dump_python(state.messages, mode="json"))

    # -- RPC: MCP, extensions, executions ---------------------------------------------------------------

    async def add_mcp_server(self, name: str, url: str) -> str:
        """Connect an MCP server (streamable HTTP ``url``) for every later turn; returns its id."""
        self._check_open()
        return await self._mcp.add(name, url)

    async def remove_mcp_server(self, server_id: str) -> None:
        self._check_open()
        await self._mcp.remove(server_id)

    async def mcp_servers(self) -> list[dict[str, str]]:
        return await self._mcp.servers()

    async def load_extension(self, manifest: dict[str, Any], source: str) -> dict[str, Any]:
        """Load (or replace) an extension; returns ``{name, version, description, tools}``."""
        self._check_open()
        return await self._extensions.load(manifest, source)

    async def list_extensions(self) -> list[dict[str, Any]]:
        return await self._extensions.summaries()

    async def remove_extension(self, name: str) -> None:
        self._check_open()
        await self._extensions.remove(name)

    async def executions(self) -> list[dict[str, Any]]:
        """The records of ``execute`` runs, oldest first."""
        return await self._code.records()

    # -- the turn -----------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closing:
            raise self._moved_error()

    def _moved_error(self) -> AgentMovedError:
        return AgentMovedError(f"agent {self.name!r} is hibernating or was taken over; spawn it again")

    def _gone(self) -> Reply:
        """A turn's call that arrived while the agent exits (its loop closed): never run, and said so
        as its callers expect (not the owners' wire reply)."""
        raise self._moved_error()

    async def _serialized(self, turn: Callable[[], Awaitable[Reply]]) -> Reply:
        """One turn at a time; counts as activity, so the agent never hibernates mid-turn."""
        self._check_open()
        with self._activity():
            async with self._turn_lock:
                self._check_open()
                if not self._root_ready:
                    # The tools' default root; sandboxes start in it and fs writes need their parent.
                    await self.workspace.fs.mkdir(ROOT, recursive=True)
                    self._root_ready = True
                return await turn()

    async def _turn(
        self,
        message: str | None,
        *,
        events: EventHandler | None = None,
        resume: DeferredToolResults | None = None,
        state: AgentState | None = None,
        key: str | None = None,
    ) -> Reply:
        if state is None:
            state = await self._store.load_state()
        replayed = state.replay(key) if resume is None else None
        if replayed is not None:
            return replayed
        if resume is None and state.paused is not None:
            undecided = state.paused.undecided()
            if undecided:
                waiting = ", ".join(c.id for c in undecided)
                raise TurnBusyError(f"the last turn waits for approval of {waiting}: approve or reject first")
            # Every call is decided, yet the turn is still paused: its resume failed (and none runs
            # now, the turn lock is held here). Deciding one of them again resumes it.
            decided = ", ".join(c.id for c in state.paused.calls)
            raise TurnBusyError(
                f"the last turn did not finish resuming after its approvals of {decided}: "
                "approve or reject one of them again to resume it"
            )
        ctx = TurnContext(message=message, history_length=len(state.messages), resumed=resume is not None)
        toolset = await self._toolset(ctx)
        runner = ModelAgent(
            self.get_model(),
            toolsets=[toolset],
            output_type=[str, DeferredToolRequests],
            instructions=self.get_instructions(),
        )
        with audit_caller(agent=self.name):  # its tool calls carry the agent's name in the audit log
            result = await runner.run(
                None if resume is not None else message,
                message_history=state.messages or None,
                deferred_tool_results=resume,
                event_stream_handler=events,
            )
        state.messages = list(result.all_messages())
        output = result.output
        if isinstance(output, DeferredToolRequests):
            if output.calls:
                # Nothing here could answer an external call later; the turn is not committed.
                names = ", ".join(c.tool_name for c in output.calls)
                raise NotImplementedError(
                    f"tools deferred with CallDeferred ({names}) are not supported; use needs_approval"
                )
            calls = [PendingCall(c.tool_call_id, c.tool_name, c.args_as_dict()) for c in output.approvals]
            reply = Reply(None, tuple(calls))
            keys = list(state.paused.decisions) if state.paused else []
            state.paused = PausedTurn(message, calls)
        else:
            reply = Reply(str(output))
            keys = list(state.paused.decisions) if state.paused else []
            state.paused = None
        if key is not None:
            keys.append(key)
        state.remember(keys, reply)
        await self._store.save_state(state)
        return reply

    async def _decide(self, call_id: str, decision: bool | str) -> Reply:
        # Set before the decision is saved: pending() must not offer the calls again meanwhile.
        self._resuming = True
        try:
            return await self._decide_and_resume(call_id, decision)
        finally:
            self._resuming = False

    async def _decide_and_resume(self, call_id: str, decision: bool | str) -> Reply:
        state = await self._store.load_state()
        paused = state.paused
        if paused is None or all(c.id != call_id for c in paused.calls):
            replayed = state.replay(call_id)  # a retry of the approval that resumed the turn
            if replayed is not None:
                return replayed
            raise LookupError(f"no pending call with id {call_id!r}")
        paused.decisions[call_id] = decision
        await self._store.save_state(state)  # the decision is durable before the turn resumes
        if paused.undecided():
            return Reply(None, tuple(paused.undecided()))
        approvals: dict[str, bool | ToolApproved | ToolDenied] = {
            cid: True if d is True else ToolDenied(str(d)) for cid, d in paused.decisions.items()
        }
        return await self._turn(paused.message, resume=DeferredToolResults(approvals=approvals), state=state)

    async def _toolset(self, ctx: TurnContext) -> AbstractToolset[Any]:
        """The merged tools: workspace, get_tools(), extensions, MCP; later wins; then before_turn."""
        user = user_toolset(as_tools(self.get_tools()), id="tools")
        # Sandboxed code (execute, extension tools) changes workspace files as freely as write and
        # delete do: when those need approval, so do execute, extension tools and load_extension.
        gate_code = self.approve_workspace_tools == "mutating"
        if user is not None and gate_code:
            user = ApprovalRequiredToolset(user, lambda ctx, tool_def, args: tool_def.name == "execute")
        sources: list[AbstractToolset[Any]] = [
            workspace_toolset(
                self._tool_workspace, bash=self.workspace_bash, approve=self.approve_workspace_tools
            )
        ]
        if user is not None:
            sources.append(user)
        extensions: AbstractToolset[Any] = ExtensionToolset(self._extensions, management=self.extension_tools)
        if gate_code:
            extensions = ApprovalRequiredToolset(
                extensions, lambda ctx, tool_def, args: tool_def.name != "list_extensions"
            )
        sources.append(extensions)
        if self.include_mcp_tools:
            sources.extend(await self._mcp.toolsets())
        toolset: AbstractToolset[Any] = MergedToolset(sources)
        config = self.before_turn(ctx)
        if inspect.isawaitable(config):
            config = await config
        turn = TurnConfig.coerce(config)
        if turn.active_tools is not None:
            allowed = frozenset(turn.active_tools)
            toolset = toolset.filtered(lambda run_ctx, tool_def: tool_def.name in allowed)
            if user is not None:  # execute's tools.* obey the same restriction
                user = user.filtered(lambda run_ctx, tool_def: tool_def.name in allowed)
        self._turn_tools = user
        extra = user_toolset(as_tools(turn.tools), id="turn")
        if extra is not None:
            toolset = MergedToolset([toolset, extra])
        return toolset

    async def _execute(self, ctx: RunContext[Any], code: str) -> dict[str, Any]:
        """Run ``code`` with ``tools.*`` = the agent's own tools of this turn (``execute`` excluded),
        as ``before_turn``'s ``active_tools`` left them."""
        toolset = self._turn_tools
        # A call from code is never pre-approved, even when the execute call itself was approved.
        inner_ctx = dataclasses.replace(ctx, tool_call_approved=False)
        available = await toolset.get_tools(inner_ctx) if toolset is not None else {}
        available.pop("execute", None)

        async def dispatch(name: str, args: dict[str, Any]) -> Any:
            tool = available.get(name)
            if tool is None or toolset is None:
                raise LookupError(f"no tool {name!r}; available: {', '.join(sorted(available))}")
            if tool.tool_def.kind == "unapproved":  # pydantic-ai's Tool(requires_approval=True)
                raise PermissionError(
                    f"{name} needs human approval and cannot be called from code; call it directly"
                )
            validated = tool.args_validator.validate_python(args)
            try:
                return await toolset.call_tool(name, validated, inner_ctx, tool)
            except ApprovalRequired:
                raise PermissionError(
                    f"{name} needs human approval and cannot be called from code; call it directly"
                ) from None

        return await self._code.run(code, sorted(available), dispatch)


def _event_dict(event: Any) -> dict[str, Any] | None:
    """A plain, picklable view of a pydantic-ai stream event (None for the ones not forwarded)."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart) and event.part.content:
        return {"type": "text", "delta": event.part.content}
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return {"type": "text", "delta": event.delta.content_delta}
    if isinstance(event, FunctionToolCallEvent):
        part = event.part
        return {
            "type": "tool_call",
            "id": part.tool_call_id,
            "tool": part.tool_name,
            "args": part.args_as_dict(),
        }
    if isinstance(event, FunctionToolResultEvent):
        done = event.part
        return {
            "type": "tool_result",
            "id": done.tool_call_id,
            "tool": done.tool_name,
            "content": to_jsonable_python(getattr(done, "content", None), fallback=str),
        }
    return None
