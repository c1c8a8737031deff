"""``open_assets`` / ``Workspace(assets=...)``: which store and base URL a workspace publishes to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from computer import Workspace, config
from computer.assets import (
    Assets,
    RedisAssetStore,
    SqliteAssetStore,
    create_app,
    default_store,
    open_assets,
)
from computer.surface import AssetsSurface


def use_settings(monkeypatch: pytest.MonkeyPatch, **values: Any) -> config.Settings:
    active = config.Settings(**values)
    monkeypatch.setattr(config, "_active", active)
    return active


async def test_assets_true_uses_sqlite_under_the_data_dir_and_the_configured_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_settings(monkeypatch, data_dir=tmp_path, assets_url="http://127.0.0.1:9999/pub")
    async with Workspace(assets=True) as ws:
        assert isinstance(ws.assets, Assets) and isinstance(ws.assets, AssetsSurface)
        assert isinstance(ws.assets.store, SqliteAssetStore)
        assert ws.assets.store.directory == tmp_path / "assets"
        await ws.fs.write_file("/r.txt", "hello")
        url = await ws.assets.share("/r.txt")
    assert url.startswith("http://127.0.0.1:9999/pub/")
    # The server finds the same store through the same configuration.
    app = create_app()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:9999"
    ) as c:
        assert (await c.get(url)).content == b"hello"


async def test_assets_true_uses_redis_when_a_redis_url_is_configured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, redis_url: str
) -> None:
    use_settings(monkeypatch, data_dir=tmp_path, redis_url=redis_url)
    async with Workspace(assets=True) as ws:
        assert isinstance(ws.assets, Assets)
        store = ws.assets.store
        assert isinstance(store, RedisAssetStore)
        assert store.url == redis_url and store.blobs.root == tmp_path / "assets" / "blobs"
        await ws.fs.write_file("/r.txt", "via redis")
        url = await ws.assets.share("/r.txt")
    assert url.startswith("http://127.0.0.1:8787/")
    app = create_app()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8787"
    ) as c:
        assert (await c.get(url)).content == b"via redis"


def test_default_store_is_shared_by_workspaces_of_one_configuration(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    active = use_settings(monkeypatch, data_dir=tmp_path)
    assert default_store() is default_store(active)
    other = config.Settings(data_dir=tmp_path / "other")
    assert default_store(other) is not default_store(active)


async def test_an_object_with_share_is_used_as_given() -> None:
    class Recorder:
        async def share(self, path: str, **kwargs: Any) -> str:
            return "https://elsewhere.test/" + path

    publisher = Recorder()
    async with Workspace(assets=publisher) as ws:
        assert ws.assets is publisher


@pytest.mark.parametrize("spec", [None, False])
async def test_no_assets_means_no_publisher(spec: object) -> None:
    async with Workspace(assets=spec) as ws:
        assert ws.assets is None


def test_anything_else_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        open_assets("yes please", object())
