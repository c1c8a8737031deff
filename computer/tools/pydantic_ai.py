"""pydantic-ai adapter: the workspace tools as a toolset for ``Agent(toolsets=[...])``.

::

    toolset = create_pydantic_ai_tools(workspace, approve="mutating")
    agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])

Names, descriptions and JSON schemas are the core tools' own (passed through, not re-derived from a
signature). A failed operation becomes a ``ToolFailed`` the model sees; images and PDFs from ``read``
reach the model as ``BinaryContent``.

Invalid arguments (an unknown name, with "did you mean"; a wrong type; a missing field) come back as a
retry prompt saying what to fix, ``max_retries`` times in a row per tool (default 3; a valid call of
the tool starts the count again). Past that budget, by default (``retries_exhausted="fail"``) each
further invalid call comes back as a failed tool call carrying the same message, so the run goes on and
the model can still correct itself or do something else: a bad call never ends the run.
``retries_exhausted="end_run"`` keeps pydantic-ai's own rule instead (``UnexpectedModelBehavior`` ends
the run once the budget is spent).
While exec runs, each snapshot is emitted as an :class:`ExecProgressEvent` (a pydantic-ai ``CustomEvent``)
into the run's event stream (``event_stream_handler``, ``run_stream_events``, UI adapters).
``approve`` (tool names or ``"mutating"``) wraps the toolset in pydantic-ai's ``ApprovalRequiredToolset``:
the run ends with ``DeferredToolRequests`` and resumes with ``DeferredToolResults(approvals=...)``.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai import BinaryContent, CustomEvent, ModelRetry, RunContext, ToolFailed
from pydantic_ai.exceptions import UserError
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ApprovalRequiredToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import from_json

from ..storage import audit_caller
from ..surface import WorkspaceSurface
from ._adapter_tools import build_tools, record_refused, select_tools, unknown_tool
from ._arguments import ArgumentError, parse_arguments
from ._tool import ContentPart, Tool

__all__ = ["ExecProgressEvent", "WorkspaceToolset", "create_pydantic_ai_tools"]


DEFAULT_MAX_RETRIES = 3  # retry prompts in a row per tool before invalid calls become failed calls
RetriesExhausted = Literal["fail", "end_run"]


@dataclass(kw_only=True)
class ExecProgressEvent(CustomEvent):
    """A running exec's latest snapshot in the run's event stream (the exec tool's camelCase dict)."""

    snapshot: dict[str, Any]


def create_pydantic_ai_tools(
    workspace: WorkspaceSurface,
    *,
    approve: Literal["mutating"] | Collection[str] | None = None,
    id: str | None = "computer",
    max_retries: int = DEFAULT_MAX_RETRIES,
    retries_exhausted: RetriesExhausted = "fail",
    **options: Any,
) -> AbstractToolset[Any]:
    """A pydantic-ai toolset over ``create_tools(workspace, **options)``.

    ``approve`` names the tools whose calls need human approval (``"mutating"``: write, edit, delete,
    exec, publish). ``max_retries`` is the per-tool budget of retry prompts for invalid arguments in a
    row; past it, ``retries_exhausted="fail"`` (default) answers each invalid call as a failed call and
    the run goes on, ``"end_run"`` lets pydantic-ai end the run (``UnexpectedModelBehavior``).
    """
    tools = build_tools(workspace, options)
    toolset: AbstractToolset[Any] = WorkspaceToolset(
        tools, toolset_id=id, max_retries=max_retries, retries_exhausted=retries_exhausted
    )
    needs_approval = select_tools(approve, tools, option="approve", groups=("mutating",))
    if needs_approval:
        toolset = ApprovalRequiredToolset(
            toolset, lambda ctx, tool_def, args: tool_def.name in needs_approval
        )
    return toolset


class WorkspaceToolset(AbstractToolset[Any]):
    """The core tools as a pydantic-ai leaf toolset (one ``ToolDefinition`` per ``Tool``)."""

    def __init__(
        self,
        tools: Mapping[str, Tool],
        *,
        toolset_id: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retries_exhausted: RetriesExhausted = "fail",
    ) -> None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be a non-negative integer, not {max_retries!r}")
        if retries_exhausted not in ("fail", "end_run"):
            raise ValueError(f'retries_exhausted must be "fail" or "end_run", not {retries_exhausted!r}')
        self.tools = dict(tools)
        self._id = toolset_id
        self.max_retries = max_retries
        self.retries_exhausted = retries_exhausted
        self._recorded_unknown: set[tuple[Any, Any]] = set()

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        self._record_unknown_calls(ctx)
        return {
            name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=name,
                    description=tool.description,
                    parameters_json_schema=tool.parameters,
                    metadata={"mutating": tool.mutating, "destructive": tool.destructive},
                ),
                max_retries=self.max_retries,
                args_validator=_ArgsValidator(
                    tool,
                    # pydantic-ai ends the run when a tool that already used its whole budget fails
                    # validation again: from then on an invalid call is a failed call instead.
                    fail_instead=self.retries_exhausted == "fail"
                    and ctx.retries.get(name, 0) >= self.max_retries,
                ),
            )
            for name, tool in self.tools.items()
        }

    def _record_unknown_calls(self, ctx: RunContext[Any]) -> None:
        """Audit the calls of unknown tool names that pydantic-ai answered since the last model response.

        The agent resolves names itself and never reaches a toolset with an unknown one; its retry
        (a ``retried`` return with cause ``unknown_tool``) is in the request that the next step sends,
        which is when the tools are asked for again. Each call is recorded once (by run and call id).
        """
        messages = getattr(ctx, "messages", None) or []
        if not messages or not self.tools:
            return
        last = messages[-1]
        if getattr(last, "kind", None) != "request":
            return
        run_id = getattr(ctx, "run_id", None)
        for part in getattr(last, "parts", ()):
            retry = getattr(part, "retry", None)
            if getattr(part, "outcome", None) != "retried" or getattr(retry, "cause", None) != "unknown_tool":
                continue
            key = (run_id, getattr(part, "tool_call_id", None))
            if key in self._recorded_unknown:
                continue
            if len(self._recorded_unknown) >= 10_000:
                self._recorded_unknown.clear()
            self._recorded_unknown.add(key)
            calls = getattr(messages[-2], "parts", ()) if len(messages) > 1 else ()
            args = next(
                (
                    call.args
                    for call in calls
                    if getattr(call, "part_kind", None) == "tool-call" and call.tool_call_id == key[1]
                ),
                None,
            )
            with audit_caller(adapter="pydantic_ai"):
                record_refused(
                    self.tools, str(part.tool_name), args, unknown_tool(self.tools, part.tool_name)
                )

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        core = self.tools[name]

        async def forward(snapshot: dict[str, Any]) -> None:
            try:
                await ctx.emit(ExecProgressEvent(snapshot=snapshot))
            except UserError:
                pass  # a context without an event stream (a direct call outside an agent run)

        with audit_caller(adapter="pydantic_ai"):
            result = await core.run(tool_args, on_update=forward)
        if "error" in result and len(result) == 1:
            raise ToolFailed(str(result["error"]))
        output = core.to_model_output(result)
        if "error" in result:
            # A failed call with more to show (an exec's partial output, publish's ok: false): a failure,
            # as OpenAI's is_error and MCP's isError say, whose message is that whole output.
            raise ToolFailed("\n".join(str(p["text"]) for p in output if p["type"] == "text"))
        return _to_pydantic_ai(output)


def _to_pydantic_ai(parts: list[ContentPart]) -> str | list[str | BinaryContent]:
    out: list[str | BinaryContent] = []
    for part in parts:
        if part["type"] == "text":
            out.append(part["text"])
        else:
            out.append(BinaryContent(data=base64.b64decode(part["data"]), media_type=part["media_type"]))
    if len(out) == 1 and isinstance(out[0], str):
        return out[0]
    return out


@dataclass
class _ArgsValidator:
    """Validates arguments as the core tool does and hands the cleaned dict on.

    An invalid call raises ``ModelRetry`` (a retry prompt with the tool's own message), or
    ``ToolFailed`` with the same message when ``fail_instead`` (the tool's retry budget is spent):
    pydantic-ai reports that as a failed call without ending the run. The core tool validates again
    when it runs, so the adapter never re-implements a rule.
    """

    tool: Tool
    fail_instead: bool = False

    def validate_json(
        self, input: str | bytes | bytearray, *, allow_partial: Any = False, **kwargs: Any
    ) -> Any:
        if allow_partial not in (False, "off"):
            try:
                return from_json(input or b"{}", allow_partial=True)
            except Exception as exc:  # a call still streaming: nothing to check yet
                raise ModelRetry(f"The arguments are not valid JSON ({exc}); send a JSON object.") from None
        return self.validate_python(input, allow_partial=allow_partial)

    def validate_python(self, input: Any, *, allow_partial: Any = False, **kwargs: Any) -> Any:
        if allow_partial not in (False, "off"):
            return input  # streaming a call in progress: nothing to check yet
        try:
            arguments, _ = self.tool.check_arguments(parse_arguments(input, self.tool.name))
        except ArgumentError as exc:
            # pydantic-ai never runs the tool for this call, so it is recorded here.
            with audit_caller(adapter="pydantic_ai"):
                self.tool.record_refused(input, str(exc))
            if self.fail_instead:
                raise ToolFailed(f"{exc} The call was not run; send corrected arguments.") from None
            raise ModelRetry(str(exc)) from None
        return arguments
