"""Share-link server hardening (issue 17, item 8): absurd ``Range`` values and active content types.

A ``Range`` with thousands of digits used to reach ``int()`` (which refuses over 4,300 digits) and
answer 500 with a traceback; a published ``.html`` or ``.svg`` was served inline with its scripts on
the share-link origin. httpx's ``ASGITransport`` re-raises any exception of the app, so a 500 path
fails these tests loudly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from computer.assets import AssetRecord, AssetStore, SqliteAssetStore, create_app
from computer.assets._active_types import is_active_type

from .asset_helpers import make_record, pieces

BODY = b"0123456789abcdefghij"
MANY = "9" * 5000


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[AssetStore]:
    store = SqliteAssetStore(tmp_path / "assets")
    yield store
    await store.close()


@pytest.fixture
async def client(sqlite_store: AssetStore) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(sqlite_store, base_path="")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://assets.test") as c:
        yield c


async def put(store: AssetStore, **kwargs: object) -> AssetRecord:
    return await store.put(make_record(**kwargs), pieces(BODY))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("header", "status", "content_range"),
    [
        (f"bytes={MANY}-", 416, "bytes */20"),
        (f"bytes={MANY}-{MANY}", 416, "bytes */20"),
        ("bytes=18446744073709551616-", 416, "bytes */20"),
        (f"bytes=0-{MANY}", 206, "bytes 0-19/20"),
        (f"bytes=-{MANY}", 206, "bytes 0-19/20"),
        (f"bytes={'0' * 5000}3-{'0' * 5000}4", 206, "bytes 3-4/20"),
        (f"bytes={'0' * 5000}-", 206, "bytes 0-19/20"),
        (f"bytes={MANY}-3", 200, None),  # inverted: ignored
        ("bytes=9-3", 200, None),
        ("bytes=-5-3", 200, None),  # negative positions are malformed: ignored
        ("bytes=--5", 200, None),
        ("bytes=5--3", 200, None),
        ("bytes=-", 200, None),
        ("bytes=\u0663-\u0664", 200, None),  # non-ASCII digits are not digits here
        ("bytes=" + ",".join(f"{i}-{i}" for i in range(2000)), 200, None),  # many ranges: ignored
        ("bytes=0-1," + MANY, 200, None),
        ("bytes=" + "1" * 100_000 + "-", 416, "bytes */20"),
    ],
)
async def test_absurd_ranges_get_416_206_or_the_whole_body_never_500(
    sqlite_store: AssetStore, client: httpx.AsyncClient, header: str, status: int, content_range: str | None
) -> None:
    record = await put(sqlite_store)
    for method in ("GET", "HEAD"):
        response = await client.request(method, "/" + record.key, headers={"Range": header.encode()})
        assert response.status_code == status, (method, header[:40])
        assert response.headers.get("content-range") == content_range
        if method == "GET" and status == 200:
            assert response.content == BODY
        if status == 206:
            start, end = (int(n) for n in content_range.split()[1].split("/")[0].split("-"))  # type: ignore[union-attr]
            assert response.headers["content-length"] == str(end - start + 1)
            if method == "GET":
                assert response.content == BODY[start : end + 1]


ACTIVE = [
    ("page.html", "text/html; charset=utf-8"),
    ("page.htm", "TEXT/HTML"),
    ("logo.svg", "image/svg+xml"),
    ("page.xhtml", "application/xhtml+xml"),
    ("data.xml", "application/xml"),
    ("data.xml", "text/xml; charset=utf-8"),
    ("feed.atom", "application/atom+xml"),
    ("style.xsl", "text/xsl"),
    ("app.js", "text/javascript"),
    ("blob", "application/octet-stream"),
    ("weird", "nonsense"),
]
PASSIVE = [
    ("notes.txt", "text/plain; charset=utf-8"),
    ("photo.png", "image/png"),
    ("report.pdf", "application/pdf"),
    ("data.json", "application/json"),
    ("data.csv", "text/csv"),
]


@pytest.mark.parametrize(("filename", "content_type"), ACTIVE)
async def test_active_types_are_sandboxed_and_nosniff_on_every_response(
    sqlite_store: AssetStore, client: httpx.AsyncClient, filename: str, content_type: str
) -> None:
    record = await put(sqlite_store, filename=filename, content_type=content_type)
    url = "/" + record.key
    responses = [
        await client.get(url),
        await client.head(url),
        await client.get(url, headers={"Range": "bytes=0-3"}),
        await client.get(url, headers={"Range": "bytes=99-"}),
        await client.get(url, headers={"If-None-Match": f'"{record.etag}"'}),
    ]
    assert [r.status_code for r in responses] == [200, 200, 206, 416, 304]
    for response in responses:
        assert response.headers["content-security-policy"] == "sandbox"
        assert response.headers["x-content-type-options"] == "nosniff"
    assert responses[0].headers["content-type"].lower().startswith(content_type.split(";")[0].lower())


@pytest.mark.parametrize(("filename", "content_type"), PASSIVE)
async def test_passive_types_are_not_sandboxed_but_still_nosniff(
    sqlite_store: AssetStore, client: httpx.AsyncClient, filename: str, content_type: str
) -> None:
    record = await put(sqlite_store, filename=filename, content_type=content_type)
    response = await client.get("/" + record.key)
    assert response.status_code == 200
    assert "content-security-policy" not in response.headers
    assert response.headers["x-content-type-options"] == "nosniff"


def test_active_type_rules() -> None:
    assert is_active_type("image/svg+xml; charset=utf-8")
    assert is_active_type("application/vnd.custom+xml")
    assert is_active_type("")
    assert is_active_type("text/plain,text/html") and is_active_type("text/plain;,image/png")  # lists
    assert not is_active_type("image/jpeg")
    assert not is_active_type("text/markdown; charset=utf-8")
