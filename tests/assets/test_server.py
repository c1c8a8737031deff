"""The share-link HTTP app, exercised with httpx through ASGITransport on both stores."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from computer.assets import AssetRecord, AssetStore, RedisAssetStore, SqliteAssetStore, create_app

from .asset_helpers import make_record, pieces

BODY = b"0123456789abcdefghij"


@pytest.fixture
async def client(store: AssetStore) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(store, base_path="")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://assets.test") as c:
        yield c


async def put(store: AssetStore, data: bytes = BODY, **kwargs: object) -> AssetRecord:
    record = make_record(**kwargs)  # type: ignore[arg-type]
    return await store.put(record, pieces(data))


async def test_get_serves_bytes_with_type_length_disposition_and_safety_headers(
    store: AssetStore, client: httpx.AsyncClient
) -> None:
    record = await put(store, filename="notes.txt", content_type="text/plain")
    response = await client.get("/" + record.key)
    assert response.status_code == 200
    assert response.content == BODY
    assert response.headers["content-type"] == "text/plain"
    assert response.headers["content-length"] == str(len(BODY))
    assert response.headers["content-disposition"] == 'inline; filename="notes.txt"'
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["etag"] == f'"{record.etag}"'
    assert response.headers["accept-ranges"] == "bytes"


async def test_cache_control_is_private_and_bounded_by_the_remaining_lifetime(
    store: AssetStore, client: httpx.AsyncClient
) -> None:
    record = await put(store, lifetime=120)
    response = await client.get("/" + record.key)
    directives = [d.strip() for d in response.headers["cache-control"].split(",")]
    assert "private" in directives
    max_age = int(next(d for d in directives if d.startswith("max-age=")).split("=")[1])
    assert 115 <= max_age <= 120


async def test_head_has_the_headers_of_get_and_no_body(store: AssetStore, client: httpx.AsyncClient) -> None:
    record = await put(store)
    head = await client.head("/" + record.key)
    get = await client.get("/" + record.key)
    assert head.status_code == 200
    assert head.content == b""
    for name in ("content-type", "content-length", "content-disposition", "etag", "x-content-type-options"):
        assert head.headers[name] == get.headers[name]


@pytest.mark.parametrize(
    ("header", "expected", "content_range"),
    [
        ("bytes=0-3", BODY[0:4], "bytes 0-3/20"),
        ("bytes=5-", BODY[5:], "bytes 5-19/20"),
        ("bytes=-3", BODY[-3:], "bytes 17-19/20"),
        ("bytes=18-100", BODY[18:], "bytes 18-19/20"),
        ("bytes=-50", BODY, "bytes 0-19/20"),
    ],
)
async def test_single_range_gives_206_with_exactly_those_bytes(
    store: AssetStore, client: httpx.AsyncClient, header: str, expected: bytes, content_range: str
) -> None:
    record = await put(store)
    response = await client.get("/" + record.key, headers={"Range": header})
    assert response.status_code == 206
    assert response.content == expected
    assert response.headers["content-range"] == content_range
    assert response.headers["content-length"] == str(len(expected))


@pytest.mark.parametrize("header", ["bytes=20-", "bytes=25-30", "bytes=-0"])
async def test_unsatisfiable_range_gives_416_with_the_size(
    store: AssetStore, client: httpx.AsyncClient, header: str
) -> None:
    record = await put(store)
    response = await client.get("/" + record.key, headers={"Range": header})
    assert response.status_code == 416
    assert response.headers["content-range"] == "bytes */20"
    assert response.content == b""


@pytest.mark.parametrize("header", ["bytes=0-1,4-5", "items=0-3", "bytes=5-2", "bytes=x-"])
async def test_multi_or_malformed_ranges_are_ignored(
    store: AssetStore, client: httpx.AsyncClient, header: str
) -> None:
    record = await put(store)
    response = await client.get("/" + record.key, headers={"Range": header})
    assert response.status_code == 200
    assert response.content == BODY


async def test_if_range_with_another_etag_serves_everything(
    store: AssetStore, client: httpx.AsyncClient
) -> None:
    record = await put(store)
    stale = await client.get("/" + record.key, headers={"Range": "bytes=0-1", "If-Range": '"old"'})
    fresh = await client.get("/" + record.key, headers={"Range": "bytes=0-1", "If-Range": f'"{record.etag}"'})
    assert (stale.status_code, stale.content) == (200, BODY)
    assert (fresh.status_code, fresh.content) == (206, BODY[:2])


async def test_if_none_match_gives_304(store: AssetStore, client: httpx.AsyncClient) -> None:
    record = await put(store)
    response = await client.get("/" + record.key, headers={"If-None-Match": f'"{record.etag}"'})
    assert response.status_code == 304
    assert response.content == b""


async def test_empty_file_is_served_empty_and_any_range_is_416(
    store: AssetStore, client: httpx.AsyncClient
) -> None:
    record = await put(store, data=b"")
    response = await client.get("/" + record.key)
    assert (response.status_code, response.content, response.headers["content-length"]) == (200, b"", "0")
    ranged = await client.get("/" + record.key, headers={"Range": "bytes=0-"})
    assert ranged.status_code == 416


async def test_big_body_is_streamed_whole(store: AssetStore, client: httpx.AsyncClient) -> None:
    data = bytes(range(256)) * 2000
    record = await put(store, data=data)
    async with client.stream("GET", "/" + record.key) as response:
        received = [piece async for piece in response.aiter_raw()]
    assert b"".join(received) == data
    ranged = await client.get("/" + record.key, headers={"Range": "bytes=100000-300000"})
    assert ranged.content == data[100000:300001]


async def test_unknown_expired_and_prefix_paths_get_the_same_404(
    store: AssetStore, client: httpx.AsyncClient
) -> None:
    live = await put(store, prefix="team")
    dying = await put(store, lifetime=1.0)
    asset_id = live.key.split("/")[1]
    deadline = time.monotonic() + 5
    while await store.get(dying.key) is not None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    paths = [
        "/" + dying.key,
        "/0123456789ABCDEFGHJKMNPQRS/report.txt",
        "/",
        "/team",
        "/team/",
        f"/team/{asset_id}",
        f"/team/{asset_id}/",
        "/" + live.key + "/",
        "/" + live.key.replace("team/", "team//"),
    ]
    responses = [await client.get(p) for p in paths]
    reference = responses[1]
    assert reference.status_code == 404
    for path, response in zip(paths, responses, strict=True):
        assert response.status_code == 404, path
        assert response.content == reference.content, path
        assert dict(response.headers) == dict(reference.headers), path
    head = await client.head("/" + dying.key)
    assert head.status_code == 404 and head.content == b""


async def test_other_methods_are_405_whether_or_not_the_link_exists(
    store: AssetStore, client: httpx.AsyncClient
) -> None:
    record = await put(store)
    for path in ("/" + record.key, "/0123456789ABCDEFGHJKMNPQRS/x"):
        response = await client.post(path, content=b"x")
        assert response.status_code == 405
        assert response.headers["allow"] == "GET, HEAD"
    assert (await client.get("/" + record.key)).content == BODY


async def test_base_path_mounts_links_under_a_prefix(store: AssetStore) -> None:
    record = await put(store)
    app = create_app(store, base_path="/files/")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://assets.test") as c:
        assert (await c.get("/files/" + record.key)).content == BODY
        assert (await c.get("/" + record.key)).status_code == 404
        assert (await c.get("/filesX/" + record.key)).status_code == 404


async def test_base_path_defaults_to_the_path_of_the_configured_url(
    store: AssetStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from computer import config

    monkeypatch.setattr(config, "_active", config.Settings(assets_url="https://example.test/share/"))
    record = await put(store)
    app = create_app(store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://assets.test") as c:
        assert (await c.get("/share/" + record.key)).content == BODY
        assert (await c.get("/" + record.key)).status_code == 404


async def test_non_ascii_names_use_rfc5987_and_percent_encoded_paths(
    store: AssetStore, client: httpx.AsyncClient
) -> None:
    record = await put(store, filename="résumé 2024.pdf", content_type="application/pdf")
    response = await client.get("/" + httpx.URL("http://x/" + record.key).raw_path.decode().lstrip("/"))
    assert response.status_code == 200
    assert response.headers["content-disposition"] == (
        "inline; filename=\"r_sum_ 2024.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9%202024.pdf"
    )


async def test_headers_never_mention_the_source_path_or_workspace(
    store: AssetStore, client: httpx.AsyncClient
) -> None:
    record = await put(store, filename="data.bin")
    response = await client.get("/" + record.key)
    text = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
    assert "secret-dir" not in text and "ws-test" not in text


async def test_a_running_app_reclaims_expired_bytes_without_any_request(store: AssetStore) -> None:
    from computer.assets._blobs import key_digest

    dying = await put(store, data=b"x" * 5000, lifetime=1.0)
    app = create_app(store, base_path="", sweep_interval=0.1)
    assert isinstance(store, SqliteAssetStore | RedisAssetStore)
    blob_root = store.blobs.root

    def blob_exists() -> bool:
        return any(p.name.endswith(key_digest(dying.key)) for p in blob_root.iterdir())

    assert blob_exists()
    async with app.router.lifespan_context(app):
        deadline = time.monotonic() + 5
        while blob_exists():
            assert time.monotonic() < deadline, "expired bytes were not reclaimed"
            await asyncio.sleep(0.1)
