"""The ``AssetStore`` protocol: where share links and their bytes live (SQLite + files, or Redis)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Protocol, runtime_checkable

from ._record import AssetRecord

__all__ = ["AssetNotFoundError", "AssetStore"]


class AssetNotFoundError(LookupError):
    """The key is unknown, expired or was deleted (callers must not tell these apart)."""


@runtime_checkable
class AssetStore(Protocol):
    """Stores share links until they expire. Every method is safe to call from several processes.

    - ``put`` streams ``data`` in (never holding more than one piece plus the inline limit), fills
      in ``size`` and ``etag`` and returns the stored record; an already-expired record is ``ValueError``.
    - ``get`` returns the record, or ``None`` when unknown or expired.
    - ``read`` yields the bytes ``[offset, offset + length)``; it raises :class:`AssetNotFoundError`
      before yielding anything when the key is unknown or expired. Once the first piece is out, the
      rest is delivered even if the link expires meanwhile.
    - ``delete`` removes a link now (``True`` when it existed).
    - ``sweep`` reclaims the records and bytes of expired links; returns how many it removed.

    Both built-in stores also have ``delete_workspace_links(workspace_id) -> int`` (every link shared
    from one workspace, for :func:`computer.delete_workspace`); it is not part of the protocol, so a
    custom store without it still qualifies.
    """

    async def put(self, record: AssetRecord, data: AsyncIterable[bytes]) -> AssetRecord: ...
    async def get(self, key: str) -> AssetRecord | None: ...
    def read(self, key: str, *, offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]: ...
    async def delete(self, key: str) -> bool: ...
    async def sweep(self) -> int: ...
    async def close(self) -> None: ...
