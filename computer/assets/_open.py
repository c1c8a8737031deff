"""Choosing a store: ``default_store`` from the settings and ``open_assets`` for ``Workspace(assets=...)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from ..config import Settings, settings
from ._assets import Assets
from ._sqlite_store import SqliteAssetStore
from ._store import AssetStore

if TYPE_CHECKING:
    from ..surface import AssetsSurface

__all__ = ["base_path_of", "default_store", "open_assets"]

# One store per configuration and process: many workspaces share one SQLite connection / Redis pool.
_stores: dict[tuple[str, str], AssetStore] = {}


def default_store(config: Settings | None = None) -> AssetStore:
    """The configured store: Redis (blobs under ``assets_dir/blobs``) when ``redis_url`` is set,
    else SQLite + files under ``assets_dir``. Workspaces and ``computer serve`` meet here."""
    config = config or settings()
    if config.redis_url:
        ident = ("redis", f"{config.redis_url} {config.assets_dir}")
    else:
        ident = ("sqlite", str(config.assets_dir))
    store = _stores.get(ident)
    if store is None:
        if config.redis_url:
            from ._redis_store import RedisAssetStore  # the Redis client only when configured

            store = RedisAssetStore(config.redis_url, config.assets_dir / "blobs")
        else:
            store = SqliteAssetStore(config.assets_dir)
        _stores[ident] = store
    return store


def base_path_of(url: str) -> str:
    """The path part of a public base URL, without a trailing ``/`` (``""`` for none)."""
    return urlsplit(url).path.rstrip("/")


def open_assets(spec: Any, workspace: Any) -> AssetsSurface:
    """The publisher for ``Workspace(assets=spec)``.

    ``True`` → the default store and ``settings().assets_url``; an :class:`AssetStore` → that store
    with the configured base URL; an object with a ``share`` coroutine → used as given.
    """
    if spec is True:
        return Assets(default_store(), workspace, base_url=settings().assets_url)
    if callable(getattr(spec, "share", None)):
        return cast("AssetsSurface", spec)
    if isinstance(spec, AssetStore):
        return Assets(spec, workspace, base_url=settings().assets_url)
    raise TypeError(
        f"assets must be True, an AssetStore or an object with a share() method, not {type(spec).__name__}"
    )
