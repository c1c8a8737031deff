"""Fixtures for the adapter tests: a small tool set exercising every shape an adapter must map.

``sample_tools`` is a hand-made set over an in-memory dict (nested models, optional and nullable
fields, images, PDFs, failures, updates) so the adapters' own mechanics are tested apart from the core
tools; ``test_scenario.py`` runs the real ``create_tools`` over a real ``Workspace``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from computer.tools import Tool, create_tools

# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PutArgs(_Model):
    path: str = Field(description="Absolute path.")
    content: str


class GetArgs(_Model):
    path: str
    offset: int | None = Field(default=None, ge=1)
    limit: int = Field(default=10, ge=1)


class Change(_Model):
    old_text: str = Field(alias="oldText", min_length=1)
    new_text: str = Field(alias="newText")


class ChangeArgs(_Model):
    path: str
    edits: list[Change] = Field(min_length=1)


class ShowArgs(_Model):
    kind: str = Field(pattern="^(image|pdf)$")


class RunArgs(_Model):
    command: str
    input: Any = Field(default=None, description="JSON value.")


def make_sample_tools() -> dict[str, Tool]:
    files: dict[str, str] = {}

    async def put(p: PutArgs, _u: Any) -> dict[str, Any]:
        files[p.path] = p.content
        return {"path": p.path, "bytesWritten": len(p.content.encode())}

    async def get(p: GetArgs, _u: Any) -> dict[str, Any]:
        if p.path not in files:
            raise FileNotFoundError(2, "No such file or directory", p.path)
        lines = files[p.path].split("\n")
        start = (p.offset or 1) - 1
        return {"path": p.path, "content": "\n".join(lines[start : start + p.limit]), "offset": p.offset}

    async def change(p: ChangeArgs, _u: Any) -> dict[str, Any]:
        text = files[p.path]
        for e in p.edits:
            if e.old_text not in text:
                return {"error": f"oldText not found: {e.old_text!r}"}
            text = text.replace(e.old_text, e.new_text, 1)
        files[p.path] = text
        return {"path": p.path, "editsApplied": len(p.edits)}

    async def show(p: ShowArgs, _u: Any) -> dict[str, Any]:
        if p.kind == "image":
            return {
                "path": "/p.png",
                "kind": "image",
                "mediaType": "image/png",
                "data": base64.b64encode(PNG).decode(),
            }
        return {
            "path": "/d.pdf",
            "kind": "file",
            "mediaType": "application/pdf",
            "data": base64.b64encode(PDF).decode(),
        }

    def show_output(result: dict[str, Any]) -> list[dict[str, Any]]:
        media: dict[str, Any] = {
            "type": result["kind"],
            "media_type": result["mediaType"],
            "data": result["data"],
        }
        if result["kind"] == "file":
            media["filename"] = "d.pdf"
        return [{"type": "text", "text": f"Read {result['path']}"}, media]

    async def run(p: RunArgs, update: Any) -> dict[str, Any]:
        if update is not None:
            await update({"status": "running", "stdout": "tick\n"})
        return {"status": "completed", "stdout": p.command, "value": p.input, "inputWasNull": p.input is None}

    return {
        "put": Tool("put", "Write a file.", PutArgs, put, mutating=True),
        "get": Tool("get", "Read a file.", GetArgs, get),
        "change": Tool("change", "Edit a file.", ChangeArgs, change, mutating=True),
        "show": Tool("show", "Show media.", ShowArgs, show, model_output=show_output),
        "run": Tool("run", "Run something.", RunArgs, run, mutating=True, destructive=True),
    }


@pytest.fixture
def sample_tools() -> dict[str, Tool]:
    return make_sample_tools()


def text_of(parts: list[dict[str, Any]]) -> str:
    return "".join(p["text"] for p in parts if p.get("type") == "text")


def json_of(parts: list[dict[str, Any]]) -> Any:
    return json.loads(text_of(parts))


@pytest.fixture
def workspace_name(ray_session: Any) -> Any:
    """A fresh workspace name; its owner actor is stopped after the test."""
    import uuid

    from computer.actors import NAMESPACE, actor_name

    name = f"adapters-{uuid.uuid4().hex[:12]}"
    yield name
    try:
        ray_session.kill(ray_session.get_actor(actor_name(name), namespace=NAMESPACE))
    except ValueError:
        pass  # never created


@pytest.fixture
async def surface() -> AsyncIterator[Any]:
    """Every surface a tool reaches (``_every_tool``), closed after the test."""
    from ._every_tool import every_surface

    s = await every_surface()
    yield s
    await s.close()


@pytest.fixture
def every_tool(surface: Any) -> dict[str, Tool]:
    """Every tool, the optional processes/kill among them, over :func:`surface`."""
    from ._every_tool import GOOD

    tools = create_tools(surface, processes=True)
    assert set(tools) == set(GOOD)
    return tools


def materialised(value: Any) -> Any:
    """``value`` as an openai ``TypeAdapter`` validated it, read whole: a validated ``Iterable[...]``
    field is a lazy iterator (each item validated when read)."""
    if isinstance(value, dict):
        return {key: materialised(item) for key, item in value.items()}
    if isinstance(value, list | tuple) or type(value).__name__ == "ValidatorIterator":
        return [materialised(item) for item in value]
    return value
