"""The other Unicode spelling of a missing path, for the tools' "not found" answers.

SPEC section 1 compares names as bytes, so ``café.txt`` in NFD (``e`` + U+0301) is not the NFC
``café.txt`` a program wrote, though both print the same. A bare "File not found" for a path that
looks exactly like one ``ls`` shows sent agents round in circles. Asked only once a path is found
missing, and only for a path that is not ASCII (ASCII is the same in every normal form): the store
is asked for the whole path in NFC and in NFD, so it works over any ``FileStore``.
"""

from __future__ import annotations

import unicodedata

from ..storage.errors import spelled_otherwise
from .file_store import FileStore

__all__ = ["other_form"]


async def other_form(store: FileStore, path: str) -> str | None:
    """A sentence naming the spelling of ``path`` in another normal form that exists, or None."""
    if path.isascii():
        return None
    for form in ("NFC", "NFD"):
        other = unicodedata.normalize(form, path)
        if other != path and await store.stat(other) is not None:
            return spelled_otherwise(other, form, other, path)
    return None
