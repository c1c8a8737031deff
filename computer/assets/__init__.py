"""Share links: publish a workspace file as an expiring, unguessable URL (SPEC section 7).

``Workspace(assets=True)`` gets an :class:`Assets` publisher over the configured
:class:`AssetStore` (:class:`SqliteAssetStore` by default, :class:`RedisAssetStore` when a Redis URL
is configured); :func:`serve` (``computer serve``) answers the URLs from the same store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..lazy import lazy_attribute
from ._assets import Assets, asset_key, guess_content_type
from ._disposition import content_disposition
from ._expiry import DEFAULT_EXPIRES_AFTER, MAX_EXPIRES_AFTER, link_lifetime
from ._ids import CROCKFORD_ALPHABET, ID_LENGTH, new_asset_id
from ._open import base_path_of, default_store, open_assets
from ._record import AssetRecord
from ._sqlite_store import SqliteAssetStore
from ._store import AssetNotFoundError, AssetStore

if TYPE_CHECKING:
    from ._redis_store import RedisAssetStore
    from ._server import create_app, create_server, serve
    from ._slow_clients import HEAD_TIMEOUT, HeadDeadline, head_deadline

# Imported at first use (PEP 562): the Redis client (~0.25 s of CPU) and the web server (uvicorn,
# starlette) are not needed by a workspace that publishes to the default SQLite store, which is
# every CLI command and owner without ``redis_url``.
_LAZY = {
    "RedisAssetStore": "._redis_store",
    "create_app": "._server",
    "create_server": "._server",
    "serve": "._server",
    "HEAD_TIMEOUT": "._slow_clients",
    "HeadDeadline": "._slow_clients",
    "head_deadline": "._slow_clients",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, name)


__all__ = [
    "CROCKFORD_ALPHABET",
    "DEFAULT_EXPIRES_AFTER",
    "HEAD_TIMEOUT",
    "ID_LENGTH",
    "MAX_EXPIRES_AFTER",
    "AssetNotFoundError",
    "AssetRecord",
    "AssetStore",
    "Assets",
    "HeadDeadline",
    "RedisAssetStore",
    "SqliteAssetStore",
    "asset_key",
    "base_path_of",
    "content_disposition",
    "create_app",
    "create_server",
    "default_store",
    "guess_content_type",
    "head_deadline",
    "link_lifetime",
    "new_asset_id",
    "open_assets",
    "serve",
]
