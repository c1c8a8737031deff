"""Sharing through a client of a Ray owner: the owner publishes, the server finds the link."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import computer
from computer.assets import create_app
from computer.config import Settings

pytestmark = pytest.mark.ray


@pytest.fixture
def cluster(ray_session: Any, tmp_path: Path) -> Iterator[Settings]:
    yield computer.init(data_dir=tmp_path / "data", assets_url="http://127.0.0.1:8787/links")


@pytest.fixture
def name(ray_session: Any) -> Iterator[str]:
    from computer.actors import NAMESPACE, actor_name

    workspace = f"assets-{uuid.uuid4().hex[:12]}"
    yield workspace
    try:
        ray_session.kill(ray_session.get_actor(actor_name(workspace), namespace=NAMESPACE))
    except ValueError:
        pass  # never created, or already gone


async def test_a_client_share_is_served_from_the_configured_store(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        assert ws.assets is not None
        await ws.fs.mkdir("/workspace/private", recursive=True)
        await ws.fs.write_file("/workspace/private/result.json", '{"answer": 42}')
        url = await ws.assets.share("/workspace/private/result.json", expires_after=60)
        with pytest.raises(FileNotFoundError):
            await ws.assets.share("/workspace/missing.json")
        with pytest.raises(IsADirectoryError):
            await ws.assets.share("/workspace/private")
        with pytest.raises(ValueError):
            await ws.assets.share("/workspace/private/result.json", expires_after=0)
    assert url.startswith("http://127.0.0.1:8787/links/") and "private" not in url
    app = create_app()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8787"
    ) as c:
        response = await c.get(url)
    assert response.status_code == 200
    assert response.json() == {"answer": 42}
    assert response.headers["content-type"] == "application/json"
