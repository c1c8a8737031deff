"""``Assets``: publish a workspace file as an expiring, unguessable link (SPEC section 7)."""

from __future__ import annotations

import errno
import mimetypes
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol
from urllib.parse import quote

from ..storage.errors import fs_error
from ..storage.paths import canonical
from ._disposition import DISPOSITIONS
from ._expiry import DEFAULT_EXPIRES_AFTER, link_lifetime
from ._ids import new_asset_id
from ._record import AssetRecord
from ._store import AssetStore

__all__ = ["Assets", "asset_key", "guess_content_type"]

DEFAULT_CONTENT_TYPE = "application/octet-stream"


class _SharedFs(Protocol):
    async def stat(self, path: str) -> Any: ...
    def stream(self, path: str, *, offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]: ...


class _SharedWorkspace(Protocol):
    """What ``share`` needs of a workspace: its id and ``fs.stat`` / ``fs.stream``."""

    @property
    def id(self) -> str: ...
    @property
    def fs(self) -> _SharedFs: ...


class Assets:
    """The publisher of one workspace: copies a file into ``store`` and returns its public URL.

    ``base_url`` is where ``computer serve`` (or a proxy in front of it) answers; it may carry a path.
    The URL is ``<base_url>/<key>`` with each key segment percent-encoded.
    """

    def __init__(self, store: AssetStore, workspace: _SharedWorkspace, *, base_url: str) -> None:
        self.store = store
        self.workspace = workspace
        self.base_url = base_url.rstrip("/")

    async def share(
        self,
        path: str,
        *,
        expires_after: float = DEFAULT_EXPIRES_AFTER,
        prefix: str | None = None,
        content_type: str | None = None,
        filename: str | None = None,
        disposition: str = "inline",
    ) -> str:
        """Store the bytes of ``path`` as they are now and return a fresh link to them.

        Missing path → ``FileNotFoundError``; directory → ``IsADirectoryError``; a bad expiry,
        prefix, filename, content type or disposition → ``ValueError``. Only the basename (or
        ``filename``) appears in the URL; the source path stays in the store's bookkeeping.
        """
        lifetime = link_lifetime(expires_after)
        if disposition not in DISPOSITIONS:
            raise ValueError(f"disposition must be 'inline' or 'attachment', got {disposition!r}")
        if content_type is not None and (
            not content_type.strip()
            or any(ord(ch) < 0x20 or ord(ch) == 0x7F or ord(ch) > 0xFF for ch in content_type)
            or "," in content_type
        ):
            # One media type, sent as a Latin-1 header: a list (``text/plain,text/html``) is run by
            # browsers as its last type, past the sandbox its first decided; a character past
            # Latin-1 made every request of the link fail (500).
            raise ValueError(f"invalid content type {content_type!r}: one media type of Latin-1 characters")
        prefix = _check_prefix(prefix)
        path = canonical(path)
        if filename is not None:
            _check_filename(filename)
        fs = self.workspace.fs
        stat = await fs.stat(path)
        if stat.is_directory:
            raise fs_error(errno.EISDIR, path)
        name = _check_filename(filename if filename is not None else path.rsplit("/", 1)[-1])
        if content_type is None:
            content_type = guess_content_type(name)
        now = time.time()
        record = AssetRecord(
            key=asset_key(prefix, new_asset_id(), name),
            filename=name,
            content_type=content_type,
            disposition=disposition,
            created_at=now,
            expires_at=now + lifetime,
            source_path=path,
            workspace_id=str(self.workspace.id),
            prefix=prefix,
        )
        stored = await self.store.put(record, fs.stream(path))
        url = f"{self.base_url}/{quote(stored.key, safe='/')}"
        audit = getattr(self.workspace, "audit", None)  # every link created is in the audit log (SPEC 10)
        if audit is not None:
            options = {"expires_after": expires_after, "prefix": prefix, "filename": filename}
            detail = {"key": stored.key, "expires_at": stored.expires_at, "content_type": content_type}
            audit.record_share(path, url, options=options, detail=detail)
        return url

    def __repr__(self) -> str:
        return f"Assets({self.store!r}, base_url={self.base_url!r})"


def guess_content_type(filename: str) -> str:
    """The type for ``filename``'s extension; ``text/*`` says UTF-8 (what the workspace tools write),
    so browsers do not guess a legacy charset; unknown → ``application/octet-stream``."""
    guessed = mimetypes.guess_type(filename, strict=False)[0]
    if guessed is None:
        return DEFAULT_CONTENT_TYPE
    return f"{guessed}; charset=utf-8" if guessed.startswith("text/") else guessed


def asset_key(prefix: str | None, asset_id: str, filename: str) -> str:
    """``<prefix>/<id>/<filename>``, or ``<id>/<filename>`` without a prefix."""
    return f"{prefix}/{asset_id}/{filename}" if prefix else f"{asset_id}/{filename}"


def _bad_segment(segment: str) -> bool:
    return segment in ("", ".", "..") or any(
        ord(ch) < 0x20 or ord(ch) == 0x7F or ch == "\\" for ch in segment
    )


def _check_filename(name: str) -> str:
    if "/" in name or _bad_segment(name) or len(name.encode("utf-8", "surrogatepass")) > 255:
        raise ValueError(f"invalid file name for a share link: {name!r}")
    return name


def _check_prefix(prefix: str | None) -> str | None:
    if prefix is None:
        return None
    stripped = prefix.strip("/")
    if not stripped:
        return None
    if any(_bad_segment(seg) for seg in stripped.split("/")):
        raise ValueError(f"invalid prefix for a share link: {prefix!r}")
    return stripped
