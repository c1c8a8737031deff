"""The ``publish`` agent tool: ``{path, expiresAfterMs?}`` → ``{ok: true, url}`` or ``{ok: false, error}``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from computer import Workspace, config
from computer.assets import AssetStore, create_app
from computer.tools import Tool, create_publish_tool, create_tools

BASE = "http://127.0.0.1:8787"


@pytest.fixture
async def workspace(
    store: AssetStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> AsyncIterator[Workspace]:
    monkeypatch.setattr(config, "_active", config.Settings(data_dir=tmp_path, assets_url=BASE))
    ws = Workspace(assets=store)
    await ws.fs.mkdir("/workspace/private", recursive=True)
    await ws.fs.write_file("/workspace/private/chart.svg", "<svg/>")
    yield ws
    await ws.close()


@pytest.fixture
def tool(workspace: Workspace) -> Tool:
    return create_publish_tool(workspace)


async def fetch(store: AssetStore, url: str, **headers: str) -> httpx.Response:
    app = create_app(store, base_path="")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        return await client.get(url, headers=headers)


async def lifetime_of(store: AssetStore, url: str) -> float:
    record = await store.get(unquote(url[len(BASE) + 1 :]))
    assert record is not None
    return record.expires_at - record.created_at


async def test_publish_returns_ok_and_a_working_url(tool: Tool, store: AssetStore) -> None:
    result = await tool.run({"path": "/workspace/private/chart.svg"})
    assert set(result) == {"ok", "url"} and result["ok"] is True
    assert result["url"].startswith(BASE + "/") and result["url"].endswith("/chart.svg")
    assert "private" not in result["url"]
    response = await fetch(store, result["url"])
    assert response.content == b"<svg/>"
    assert response.headers["content-type"] == "image/svg+xml"


async def test_publish_defaults_to_one_hour(tool: Tool, store: AssetStore) -> None:
    result = await tool.run({"path": "/workspace/private/chart.svg"})
    assert await lifetime_of(store, result["url"]) == pytest.approx(3600, abs=1e-3)


@pytest.mark.parametrize(("ms", "seconds"), [(1, 1), (1500, 2), (60_000, 60), (30 * 86_400_000, 7 * 86400)])
async def test_expires_after_ms_is_rounded_up_and_capped(
    tool: Tool, store: AssetStore, ms: int, seconds: int
) -> None:
    result = await tool.run({"path": "/workspace/private/chart.svg", "expiresAfterMs": ms})
    assert result["ok"] is True
    assert await lifetime_of(store, result["url"]) == pytest.approx(seconds, abs=1e-3)


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("/workspace/missing.txt", "/workspace/missing.txt"),
        ("/workspace/private", "directory"),
        ("relative.txt", "absolute"),
    ],
)
async def test_operational_failures_are_ok_false_with_an_error(tool: Tool, path: str, needle: str) -> None:
    result = await tool.run({"path": path})
    assert result["ok"] is False
    assert needle in result["error"]
    assert set(result) == {"ok", "error"}


@pytest.mark.parametrize(
    "args", [{}, {"path": "/a", "expiresAfterMs": 0}, {"path": "/a", "expiresAfterMs": -1}]
)
async def test_bad_calls_are_errors_not_exceptions(tool: Tool, args: dict[str, Any]) -> None:
    result = await tool.run(args)
    assert "error" in result and result.get("ok") is not True


async def test_a_failing_store_is_ok_false(
    workspace: Workspace, tool: Tool, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert workspace.assets is not None

    async def broken_put(*args: object, **kwargs: object) -> object:
        raise ConnectionError("store unreachable")

    monkeypatch.setattr(workspace.assets, "store", type("Down", (), {"put": staticmethod(broken_put)})())
    result = await tool.run({"path": "/workspace/private/chart.svg"})
    assert result["ok"] is False and "store unreachable" in result["error"]


def test_tool_metadata_and_schemas(tool: Tool) -> None:
    assert tool.name == "publish"
    assert tool.mutating is True and tool.destructive is False
    assert set(tool.parameters["properties"]) == {"path", "expiresAfterMs"}
    assert tool.parameters["required"] == ["path"]
    for phrase in ("expire", "one hour", "7 days", "name"):
        assert phrase in tool.description
    schema = tool.output_schema
    assert schema is not None
    assert {"ok", "url", "error"} <= set(schema["properties"])


async def test_results_match_the_output_schema(tool: Tool) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    assert tool.output_schema is not None
    for args in ({"path": "/workspace/private/chart.svg"}, {"path": "/nope"}, {"path": 3}):
        jsonschema.validate(await tool.run(args), tool.output_schema)


def test_a_workspace_without_assets_has_no_publish_tool() -> None:
    ws = Workspace()
    with pytest.raises(ValueError):
        create_publish_tool(ws)
    assert "publish" not in create_tools(ws)


async def test_create_tools_offers_publish_only_with_assets_and_not_readonly(workspace: Workspace) -> None:
    assert "publish" in create_tools(workspace)
    assert "publish" not in create_tools(workspace, assets=False)
    assert "publish" not in create_tools(workspace, readonly=True)
    published = await create_tools(workspace)["publish"].run({"path": "/workspace/private/chart.svg"})
    assert published["ok"] is True


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
async def test_a_non_finite_lifetime_is_refused_naming_the_tool_s_argument(tool: Tool, value: float) -> None:
    """``expiresAfterMs: Infinity`` passed ``gt=0`` and was refused by the share as ``expires_after
    ... seconds, got inf``: a name and a unit the agent never sent."""
    result = await tool.run({"path": "/workspace/private/chart.svg", "expiresAfterMs": value})
    assert result.get("ok") is not True and "expiresAfterMs" in result["error"], result
    assert "finite" in result["error"], result
