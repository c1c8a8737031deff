"""The library-neutral tool: a name, a description, a JSON Schema, and a ``run`` that never raises.

Adapters (pydantic-ai, OpenAI-format, LangChain, MCP) wrap these objects; they never re-implement a
tool. Model content is described by plain dicts (:data:`ContentPart`) that each adapter maps onto its
own library's types.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from ..storage import ToolCall, current_tool_call
from ._adapter_schema import drop_unaccepted_nulls
from ._arguments import ArgumentError, nesting_problem, unknown_arguments_problem

__all__ = ["ContentPart", "Tool", "ToolUpdate", "error_result", "format_validation_error"]

log = logging.getLogger(__name__)

# {"type": "text", "text": str}
# {"type": "image", "media_type": str, "data": base64 str}
# {"type": "file", "media_type": str, "data": base64 str, "filename": str}
ContentPart = dict[str, Any]

# Called with progress while a tool runs (exec snapshots); adapters forward it as stream events.
ToolUpdate = Callable[[dict[str, Any]], Awaitable[None] | None]

Handler = Callable[[Any, "ToolUpdate | None"], Awaitable[dict[str, Any]]]
ModelOutput = Callable[[dict[str, Any]], list[ContentPart]]


@runtime_checkable  # pydantic models holding a Tool (the LangChain adapter) check the field with isinstance
class ToolAudit(Protocol):
    """Where tool calls are recorded: a workspace's audit log (``workspace.audit``, owner or client)."""

    def record_tool(self, name: str, args: Any, result: Any, duration_s: float) -> None: ...


ERROR_CHARS = 4000  # the longest error message a tool returns (its middle elided past it)


def error_result(message: str) -> dict[str, Any]:
    """The one shape of a failed call: ``{"error": message}``. A message over :data:`ERROR_CHARS`
    keeps its start and end with the middle elided and counted: an error naming a 100 KB path (a model
    can send one) echoed all of it back into the model's context."""
    if len(message) > ERROR_CHARS:
        keep = ERROR_CHARS // 2 - 40
        message = f"{message[:keep]}…({len(message) - 2 * keep:,} characters elided)…{message[-keep:]}"
    return {"error": message}


def format_validation_error(exc: ValidationError) -> str:
    """A short, model-actionable description of invalid arguments."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        problems.append(f"{where}: {err.get('msg', 'invalid')}{_sent(err)}")
    return "Invalid arguments: " + "; ".join(problems)


_WANTED = {"bool_type": "JSON true or false", "int_type": "a JSON integer", "float_type": "a JSON number"}


def _sent(err: Any) -> str:
    """What a strict boolean or number argument was sent instead (``"yes"``), and what it takes."""
    wanted = _WANTED.get(str(err.get("type")))
    given = err.get("input")
    if wanted is None or not isinstance(given, str | int | float | bool):
        return ""
    shown = json.dumps(given, ensure_ascii=False)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f" (sent {shown}; send {wanted})"


def default_model_output(result: dict[str, Any]) -> list[ContentPart]:
    """Plain JSON text of the result."""
    return [{"type": "text", "text": json.dumps(result, ensure_ascii=False)}]


@dataclass(eq=False)
class Tool:
    """One agent tool.

    ``parameters`` is the JSON Schema of ``input_model`` (camelCase field names, as in the seed).
    ``run`` validates, calls the handler and turns every failure into ``{"error": ...}``.
    ``to_model_output`` converts a result into model content and does no I/O.
    """

    name: str
    description: str
    input_model: type[BaseModel]
    handler: Handler
    mutating: bool = False
    destructive: bool = False
    output_schema: dict[str, Any] | None = None
    model_output: ModelOutput = default_model_output
    # Where each call is recorded (the workspace's audit log; ``create_tools`` sets it). None: not audited.
    audit: ToolAudit | None = field(default=None, repr=False)

    @functools.cached_property
    def parameters(self) -> dict[str, Any]:
        """Made at first use: a command that runs one tool (``computer tool``) builds no other tool's
        schema, nor, with the input models' ``defer_build``, their validators (~0.1 s in all)."""
        return self.input_model.model_json_schema(by_alias=True)

    def check_arguments(self, args: Any) -> tuple[dict[str, Any], BaseModel]:
        """``(arguments, params)``: the arguments as the tool takes them and their validated model.

        A ``null`` sent for an optional field whose schema takes no null means "not given" and is
        dropped (strict-mode callers send every field); unknown names, too-deep nesting and invalid
        values raise :class:`ArgumentError` with the message the model should see.
        """
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise ArgumentError(f"Invalid arguments: expected an object, got {type(args).__name__}")
        try:
            problem = nesting_problem(args)
            if problem is None:
                args = drop_unaccepted_nulls(args, self.parameters)
                problem = unknown_arguments_problem(self.input_model, args)
            if problem is not None:
                raise ArgumentError(f"Invalid arguments: {problem}")
            return args, self.input_model.model_validate(args)
        except ValidationError as exc:
            raise ArgumentError(format_validation_error(exc)) from None
        except ArgumentError:
            raise
        except Exception as exc:  # a validator that fails in an unexpected way is still a bad call
            raise ArgumentError(f"Invalid arguments: {type(exc).__name__}: {exc}") from None

    async def run(
        self, args: dict[str, Any] | None, *, on_update: ToolUpdate | None = None
    ) -> dict[str, Any]:
        """Run the tool; bad arguments and failed operations come back as ``{"error": ...}``.

        With ``audit`` set, the call leaves one audit record (a cancelled call too), unless its
        transport had it recorded where it ran (a client forwarding the call whole to its owner).
        """
        if self.audit is None:
            return await self._run(args, on_update)
        call = ToolCall(self.name)
        token = current_tool_call.set(call)
        started = time.perf_counter()
        result = error_result("cancelled")
        try:
            result = await self._run(args, on_update)
            return result
        finally:
            current_tool_call.reset(token)
            if not call.recorded_elsewhere:
                self.audit.record_tool(self.name, args, result, time.perf_counter() - started)

    def record_refused(self, args: Any, message: str, *, name: str | None = None) -> None:
        """Record a call an adapter refused before :meth:`run` (so no :meth:`run` records it).

        Arguments that are not JSON, not an object, or that a library validated before running the
        tool (pydantic-ai's retries), and a call to a tool of another ``name`` that is not in the set:
        each is a failed call the audit log shows, with the message the model got.
        """
        if self.audit is not None:
            self.audit.record_tool(name or self.name, args, error_result(message), 0.0)

    async def _run(self, args: dict[str, Any] | None, on_update: ToolUpdate | None) -> dict[str, Any]:
        try:
            _, params = self.check_arguments(args)
        except ArgumentError as exc:
            return error_result(str(exc))
        try:
            return await self.handler(params, on_update)
        except OSError as exc:
            return error_result(_describe_os_error(exc, self.name))
        except (ValueError, LookupError, TypeError) as exc:
            return error_result(str(exc) or type(exc).__name__)
        except Exception as exc:
            log.exception("tool %s failed", self.name)
            return error_result(f"{self.name} failed: {type(exc).__name__}: {exc}")

    def to_model_output(self, result: dict[str, Any]) -> list[ContentPart]:
        if "error" in result and len(result) == 1:
            return [{"type": "text", "text": f"Error: {result['error']}"}]
        return self.model_output(result)


# What to do instead, for an error of a tool that has one answer (the errno as the store raises it for
# the path the tool was given): "directory not empty" alone left a model to guess ``recursive``, "Is a
# directory" after ``read`` to guess ``ls``.
_NEXT_STEPS: dict[tuple[str, int], str] = {
    ("delete", errno.ENOTEMPTY): "set recursive: true to delete it with everything in it",
    ("read", errno.EISDIR): "use ls to list a directory",
    ("edit", errno.EISDIR): "edit takes a file; use ls to list a directory",
    ("write", errno.EISDIR): "write takes a file's path; a directory is never replaced by a file",
    ("ls", errno.ENOTDIR): "ls lists a directory; use read to open a file",
}


def _describe_os_error(exc: OSError, tool: str = "") -> str:
    reason = exc.strerror or str(exc)
    step = _NEXT_STEPS.get((tool, exc.errno or 0))
    if step is not None and ";" not in reason:  # a reason with a ";" says what to do already
        reason = f"{reason} ({step})"
    return f"{reason}: {exc.filename}" if exc.filename else reason
