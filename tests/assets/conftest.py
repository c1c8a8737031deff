"""Fixtures for the assets tests: every store implementation."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from computer.assets import AssetStore, RedisAssetStore, SqliteAssetStore

STORE_KINDS = ["sqlite", "redis"]


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AssetStore]:
    """Each store implementation, empty, with a small inline limit so Redis exercises both paths."""
    the_store: AssetStore
    if request.param == "sqlite":
        the_store = SqliteAssetStore(tmp_path / "assets")
    else:
        url = request.getfixturevalue("redis_url")
        the_store = RedisAssetStore(
            url, tmp_path / "blobs", inline_max_bytes=1024, namespace=f"test:{secrets.token_hex(6)}"
        )
    yield the_store
    await the_store.close()
