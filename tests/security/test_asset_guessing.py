"""Guessing share links: random ids, one-character near misses and malformed keys all get the very
same 404 (status, headers, body) as an unknown link; only the shared key serves the file."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from computer import Workspace
from computer.assets import CROCKFORD_ALPHABET, ID_LENGTH, SqliteAssetStore, create_app


def _near_misses(asset_id: str) -> list[str]:
    """Each position changed to another symbol of the alphabet (two per position)."""
    out = []
    for i, ch in enumerate(asset_id):
        others = [c for c in CROCKFORD_ALPHABET if c != ch]
        for c in (others[0], others[-1]):
            out.append(asset_id[:i] + c + asset_id[i + 1 :])
    return out


async def test_guessed_and_near_miss_links_get_identical_404s(tmp_path: Path, record_property: Any) -> None:
    store = SqliteAssetStore(tmp_path / "assets")
    async with Workspace(assets=store) as ws:
        await ws.fs.write_file("/report.txt", "the shared bytes")
        url = await ws.assets.share("/report.txt")  # type: ignore[union-attr]
        # The configured base URL may carry a path (another test may have set one): the key follows it.
        base_path = urlsplit(ws.assets.base_url).path  # type: ignore[union-attr]
    key = urlsplit(url).path[len(base_path) :].lstrip("/")
    asset_id, filename = key.split("/")
    assert len(asset_id) == ID_LENGTH
    guesses = [
        *("".join(secrets.choice(CROCKFORD_ALPHABET) for _ in range(ID_LENGTH)) for _ in range(200)),
        *_near_misses(asset_id),
        asset_id[:-1],
        asset_id + "0",
        asset_id[::-1],
    ]
    paths = [f"/{g}/{filename}" for g in guesses]
    paths += [f"/{asset_id}/other.txt", f"/{asset_id}", f"/{asset_id}/", f"/{asset_id}/{filename}/x"]
    paths += [f"/{asset_id}/..%2f{filename}", f"/{asset_id.lower()}x/{filename}", "/", "/%00"]
    app = create_app(store, base_path="")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://assets.test"
    ) as http:
        real = await http.get("/" + key)
        assert (real.status_code, real.content) == (200, b"the shared bytes")
        reference = await http.get("/" + "0" * ID_LENGTH + "/" + filename)
        assert reference.status_code == 404
        for path in paths:
            response = await http.get(path)
            assert response.status_code == 404, path
            assert response.content == reference.content, path
            assert dict(response.headers) == dict(reference.headers), path
    await store.close()
    record_property("asset_guesses", len(paths))
