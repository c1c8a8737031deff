"""Extensions: tools written in Python at run time, run in the python sandbox, kept across restarts.

An extension is a manifest (``{"name": "math", "version": "1.0.0", "description": ...}``) and a
source that defines ``tools``, the Python twin of the seed's JavaScript object::

    def add(a, b):
        return {"result": a + b}

    tools = {"add": {"description": "Add two numbers",
                     "parameters": {"a": {"type": "number"}, "b": {"type": "number"}},
                     "execute": add}}

``parameters`` maps argument names to JSON Schemas (all required), or is a whole object schema.
Loading runs the source once in the sandbox to describe its tools (a broken source fails the load,
not a later turn) and stores manifest, source and descriptions in
``/.computer/agent/extensions/<name>.json``. Each call runs the source again in a fresh sandbox and
calls ``execute(**arguments)``: extensions keep no state between calls except in the workspace.
The model sees the tools as ``<extension>_<tool>``. A load whose names clash with another
extension's (``a_b`` + ``c`` and ``a`` + ``b_c`` are both ``a_b_c``) or with ``load_extension`` /
``list_extensions`` is refused; a clashing set stored anyway (by hand, by older code) keeps the
first extension's tool (name order) and leaves the later one out with a logged warning.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

from pydantic import BaseModel, Field
from pydantic_ai import RunContext, ToolFailed
from pydantic_ai.tools import Tool
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from ..surface import WorkspaceSurface
from ._execute import python_backend_id, run_bounded, timed_out
from ._store import AgentStore

__all__ = ["ExtensionManager", "ExtensionManifest", "ExtensionToolset"]

log = logging.getLogger(__name__)

MANAGEMENT_TOOLS = frozenset({"load_extension", "list_extensions"})

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")

DRIVER = """
import workspace


def main(input):
    namespace = {"__name__": "__extension__", "workspace": workspace}
    exec(compile(input["source"], "<extension " + input["name"] + ">", "exec"), namespace)
    tools = namespace.get("tools")
    if not isinstance(tools, dict) or not tools:
        raise TypeError("an extension must define tools = {name: {description, parameters, execute}}")
    if input["op"] == "describe":
        described = []
        for name, spec in tools.items():
            if not callable(spec.get("execute")):
                raise TypeError("tool " + repr(name) + " has no callable execute")
            described.append(
                {"name": name, "description": str(spec.get("description", "")),
                 "parameters": spec.get("parameters") or {}}
            )
        return described
    return tools[input["tool"]]["execute"](**input["args"])
"""


class ExtensionManifest(BaseModel):
    """What an extension says about itself."""

    name: str = Field(pattern=_NAME.pattern)
    version: str = "0.0.0"
    description: str = ""


def _object_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    if parameters.get("type") == "object":
        return parameters
    return {"type": "object", "properties": parameters, "required": list(parameters)}


class ExtensionManager:
    """Loads, stores and runs the agent's extensions (the files are the truth, this is a cache)."""

    def __init__(self, workspace: WorkspaceSurface, store: AgentStore, timeout: float | None = None) -> None:
        self.workspace = workspace
        self.store = store
        self.timeout = timeout  # of each sandbox run (a load's description, each call)
        self._cache: dict[str, dict[str, Any]] | None = None
        self._toolset: FunctionToolset[Any] | None = None
        self._loading = asyncio.Lock()  # a load's clash check and its write, one load at a time

    async def _records(self) -> dict[str, dict[str, Any]]:
        if self._cache is None:
            records = await self.store.list_json("extensions")
            self._cache = {r["manifest"]["name"]: r for r in records}
        return self._cache

    async def _sandbox(self, payload: dict[str, Any]) -> Any:
        backend = python_backend_id(self.workspace.runtime)
        handle = await self.workspace.runtime.exec(
            DRIVER, backend=backend, input=payload, timeout=self.timeout
        )
        result = await run_bounded(handle)  # a cancelled turn kills the run
        if (error := timed_out(result, self.timeout)) is not None:
            raise RuntimeError(error)
        if result.status != "completed":
            lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
            raise RuntimeError(lines[-1] if lines else (result.error or result.status))
        return result.value

    async def load(self, manifest: dict[str, Any] | ExtensionManifest, source: str) -> dict[str, Any]:
        """Describe ``source`` in the sandbox, store it, and return ``{name, version, tools}``."""
        checked = ExtensionManifest.model_validate(manifest)
        described = await self._sandbox({"op": "describe", "name": checked.name, "source": source})
        tools = []
        for tool in described:
            if not _NAME.match(str(tool["name"])):
                raise ValueError(f"invalid tool name {tool['name']!r} in extension {checked.name!r}")
            params = tool["parameters"]
            if not isinstance(params, dict):
                raise ValueError(f"parameters of {tool['name']!r} must be a dict")
            tools.append({**tool, "parameters": _object_schema(params)})
        record = {"manifest": checked.model_dump(), "source": source, "tools": tools, "loaded": time.time()}
        async with self._loading:
            records = await self._records()
            taken = {name: f"the management tool {name!r}" for name in MANAGEMENT_TOOLS}
            for other, held in records.items():
                if other != checked.name:  # a reload replaces its own names
                    taken.update((f"{other}_{t['name']}", f"extension {other!r}") for t in held["tools"])
            for tool in tools:
                full = f"{checked.name}_{tool['name']}"
                if full in taken:
                    raise ValueError(
                        f"tool {full!r} of extension {checked.name!r} clashes with {taken[full]}; "
                        "rename the extension or the tool"
                    )
            await self.store.write_json(self.store.path("extensions", f"{checked.name}.json"), record)
            records[checked.name] = record
            self._toolset = None
        return self._summary(record)

    async def remove(self, name: str) -> None:
        records = await self._records()
        if records.pop(name, None) is None:
            raise LookupError(f"no extension named {name!r}")
        await self.workspace.fs.rm(self.store.path("extensions", f"{name}.json"), force=True)
        self._toolset = None

    async def summaries(self) -> list[dict[str, Any]]:
        return [self._summary(r) for r in (await self._records()).values()]

    @staticmethod
    def _summary(record: dict[str, Any]) -> dict[str, Any]:
        manifest = record["manifest"]
        return {
            "name": manifest["name"],
            "version": manifest["version"],
            "description": manifest["description"],
            "tools": [f"{manifest['name']}_{t['name']}" for t in record["tools"]],
        }

    async def call(self, extension: str, tool: str, args: dict[str, Any]) -> Any:
        record = (await self._records()).get(extension)
        if record is None:
            raise ToolFailed(f"extension {extension!r} is not loaded")
        payload = {"op": "call", "name": extension, "source": record["source"], "tool": tool, "args": args}
        try:
            return await self._sandbox(payload)
        except RuntimeError as exc:
            raise ToolFailed(f"{extension}_{tool} failed: {exc}") from None

    async def toolset(self) -> FunctionToolset[Any]:
        """The loaded extensions' tools, ``<extension>_<tool>``, as one toolset (rebuilt after a load)."""
        if self._toolset is None:
            tools: list[Tool[Any]] = []
            seen: dict[str, str] = {name: "a management tool" for name in MANAGEMENT_TOOLS}
            for name, record in (await self._records()).items():
                for spec in record["tools"]:
                    full = f"{name}_{spec['name']}"
                    if full in seen:  # stored before loads were checked: keep the first, skip this one
                        log.warning(
                            "extension %r: tool %r clashes with %s and is left out", name, full, seen[full]
                        )
                        continue
                    seen[full] = f"extension {name!r}"
                    tools.append(
                        Tool.from_schema(
                            self._caller(name, spec["name"]),
                            name=f"{name}_{spec['name']}",
                            description=spec["description"],
                            json_schema=spec["parameters"],
                        )
                    )
            self._toolset = FunctionToolset(tools, id="extensions")
        return self._toolset

    def _caller(self, extension: str, tool: str) -> Any:
        async def call(**args: Any) -> Any:
            return await self.call(extension, tool, args)

        return call

    def management_tools(self) -> list[Tool[Any]]:
        """``load_extension`` and ``list_extensions``, for the model."""

        async def load_extension(manifest: ExtensionManifest, source: str) -> dict[str, Any]:
            """Load an extension: Python source defining `tools = {name: {"description", "parameters",
            "execute"}}` (parameters: argument name -> JSON Schema). Its tools become <name>_<tool>."""
            try:
                return await self.load(manifest, source)
            except (RuntimeError, ValueError, LookupError) as exc:
                raise ToolFailed(f"loading extension {manifest.name!r} failed: {exc}") from None

        async def list_extensions() -> list[dict[str, Any]]:
            """List the loaded extensions and their tools."""
            return await self.summaries()

        return [Tool(load_extension), Tool(list_extensions)]


class ExtensionToolset(AbstractToolset[Any]):
    """Extension tools as they are *now*: a tool loaded mid-turn is callable at the next step."""

    def __init__(self, manager: ExtensionManager, *, management: bool) -> None:
        self.manager = manager
        self.management = (
            FunctionToolset(manager.management_tools(), id="extension-tools") if management else None
        )

    @property
    def id(self) -> str | None:
        return "extensions"

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = dict(await (await self.manager.toolset()).get_tools(ctx))
        if self.management is not None:  # last: an extension never takes a management tool's place
            tools.update(await self.management.get_tools(ctx))
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        return await tool.toolset.call_tool(name, tool_args, ctx, tool)
