"""The client's assets publisher: ``share`` runs on the owner."""

from __future__ import annotations

from ._connection import Connection

__all__ = ["ClientAssets"]


class ClientAssets:
    """Present on a client only when the owner has an assets publisher."""

    def __init__(self, connection: Connection) -> None:
        self._conn = connection

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
        url: str = await self._conn.request("assets_share", path, kwargs)
        return url
