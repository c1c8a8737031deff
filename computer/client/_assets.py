"""The client's assets publisher: ``share`` runs on the owner."""

from __future__ import annotations

from collections.abc import Callable

from ._connection import Connection

__all__ = ["ClientAssets"]


class ClientAssets:
    """Present on a client only when the owner has an assets publisher."""

    def __init__(self, connection: Connection, *, caller: Callable[[], dict[str, str]] | None = None) -> None:
        self._conn = connection
        self._caller = caller  # who creates a link, for its audit record on the owner

    async def share(
        self,
        path: str,
        *,
        expires_after: float = 3600.0,
        prefix: str | None = None,
        content_type: str | None = None,
        filename: str | None = None,
        disposition: str = "inline",
    ) -> str:
        kwargs = {
            "expires_after": expires_after,
            "prefix": prefix,
            "content_type": content_type,
            "filename": filename,
            "disposition": disposition,
        }
        who = self._caller() if self._caller is not None else None
        url: str = await self._conn.request("assets_share", path, kwargs, who)
        return url
