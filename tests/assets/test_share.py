"""``workspace.assets.share``: a real Workspace publishing into each store, fetched over HTTP."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest

from computer import Workspace, config
from computer.assets import Assets, AssetStore, create_app

BASE = "https://links.example.test/s"
CROCKFORD_ID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


@pytest.fixture
async def workspace(
    store: AssetStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> AsyncIterator[Workspace]:
    """A workspace publishing into ``store`` under the configured public URL ``BASE``."""
    monkeypatch.setattr(config, "_active", config.Settings(data_dir=tmp_path, assets_url=BASE + "/"))
    ws = Workspace(assets=store)
    assert isinstance(ws.assets, Assets) and ws.assets.store is store
    await ws.fs.mkdir("/workspace/secret-project/reports", recursive=True)
    yield ws
    await ws.close()


@pytest.fixture
async def http(store: AssetStore) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(store, base_path="/s")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://links.example.test") as client:
        yield client


def key_of(url: str) -> str:
    assert url.startswith(BASE + "/")
    return unquote(url[len(BASE) + 1 :])


async def share(ws: Workspace, path: str, **kwargs: object) -> str:
    assert ws.assets is not None
    return await ws.assets.share(path, **kwargs)  # type: ignore[arg-type]


async def test_share_returns_a_link_that_serves_the_file(
    workspace: Workspace, http: httpx.AsyncClient
) -> None:
    await workspace.fs.write_file("/workspace/secret-project/reports/q1.csv", "a,b\n1,2\n")
    url = await share(workspace, "/workspace/secret-project/reports/q1.csv")
    response = await http.get(url)
    assert response.status_code == 200
    assert response.content == b"a,b\n1,2\n"
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"] == 'inline; filename="q1.csv"'


async def test_url_is_base_then_a_26_char_crockford_id_then_the_basename(workspace: Workspace) -> None:
    await workspace.fs.write_file("/workspace/secret-project/reports/q1.csv", "x")
    url = await share(workspace, "/workspace/secret-project/reports/q1.csv")
    asset_id, name = key_of(url).split("/")
    assert CROCKFORD_ID.match(asset_id)
    assert name == "q1.csv"


async def test_directory_names_never_appear_in_the_url(workspace: Workspace, http: httpx.AsyncClient) -> None:
    await workspace.fs.write_file("/workspace/secret-project/reports/q1.csv", "x")
    url = await share(workspace, "/workspace/secret-project/reports/../reports/q1.csv")
    for word in ("workspace", "secret-project", "reports", ".."):
        assert word not in url[len(BASE) :]
    response = await http.get(url)
    assert "secret-project" not in str(response.headers)


async def test_prefix_goes_before_the_id(workspace: Workspace, store: AssetStore) -> None:
    await workspace.fs.write_file("/workspace/a.txt", "x")
    url = await share(workspace, "/workspace/a.txt", prefix="/team/alpha/")
    prefix1, prefix2, asset_id, name = key_of(url).split("/")
    assert (prefix1, prefix2, name) == ("team", "alpha", "a.txt")
    assert CROCKFORD_ID.match(asset_id)
    record = await store.get(key_of(url))
    assert record is not None and record.prefix == "team/alpha"


async def test_share_records_source_path_workspace_and_expiry(
    workspace: Workspace, store: AssetStore
) -> None:
    await workspace.fs.write_file("/workspace/secret-project/r.txt", "x")
    before = time.time()
    url = await share(workspace, "/workspace/secret-project//r.txt", expires_after=90)
    record = await store.get(key_of(url))
    assert record is not None
    assert record.source_path == "/workspace/secret-project/r.txt"
    assert record.workspace_id == workspace.id
    assert record.expires_at - record.created_at == 90
    assert before <= record.created_at <= time.time()


@pytest.mark.parametrize(
    ("requested", "lifetime"), [(0.2, 1), (1.5, 2), (3600, 3600), (30 * 86400, 7 * 86400)]
)
async def test_expiry_is_rounded_up_and_capped_at_seven_days(
    workspace: Workspace, store: AssetStore, http: httpx.AsyncClient, requested: float, lifetime: int
) -> None:
    await workspace.fs.write_file("/workspace/a.txt", "x")
    url = await share(workspace, "/workspace/a.txt", expires_after=requested)
    record = await store.get(key_of(url))
    assert record is not None
    assert record.expires_at - record.created_at == pytest.approx(lifetime, abs=1e-3)
    response = await http.get(url)
    max_age = int(response.headers["cache-control"].split("max-age=")[1])
    assert lifetime - 2 <= max_age <= lifetime


async def test_default_expiry_is_one_hour(workspace: Workspace, store: AssetStore) -> None:
    await workspace.fs.write_file("/workspace/a.txt", "x")
    record = await store.get(key_of(await share(workspace, "/workspace/a.txt")))
    assert record is not None and record.expires_at - record.created_at == pytest.approx(3600, abs=1e-3)


@pytest.mark.parametrize("bad", [0, -5, math.nan, math.inf])
async def test_invalid_expiry_is_value_error_and_stores_nothing(workspace: Workspace, bad: float) -> None:
    await workspace.fs.write_file("/workspace/a.txt", "x")
    with pytest.raises(ValueError):
        await share(workspace, "/workspace/a.txt", expires_after=bad)


async def test_missing_path_is_file_not_found(workspace: Workspace) -> None:
    with pytest.raises(FileNotFoundError) as info:
        await share(workspace, "/workspace/nope.txt")
    assert info.value.filename == "/workspace/nope.txt"


async def test_directory_is_is_a_directory_error(workspace: Workspace) -> None:
    with pytest.raises(IsADirectoryError):
        await share(workspace, "/workspace/secret-project")
    with pytest.raises(IsADirectoryError):
        await share(workspace, "/")


async def test_relative_path_is_rejected(workspace: Workspace) -> None:
    with pytest.raises(ValueError):
        await share(workspace, "workspace/a.txt")


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("page.html", "text/html; charset=utf-8"),
        ("notes.md", "text/markdown; charset=utf-8"),
        ("data.json", "application/json"),
        ("pic.PNG", "image/png"),
        ("archive.tar.gz", "application/x-tar"),
        ("blob.zzqq", "application/octet-stream"),
        ("Makefile", "application/octet-stream"),
    ],
)
async def test_content_type_comes_from_the_extension(
    workspace: Workspace, http: httpx.AsyncClient, name: str, content_type: str
) -> None:
    await workspace.fs.write_file(f"/workspace/{name}", b"\x00\x01")
    response = await http.get(await share(workspace, f"/workspace/{name}"))
    assert response.headers["content-type"] == content_type


async def test_content_type_filename_and_disposition_can_be_given(
    workspace: Workspace, http: httpx.AsyncClient
) -> None:
    await workspace.fs.write_file("/workspace/out.bin", b"%PDF-1.7")
    url = await share(
        workspace,
        "/workspace/out.bin",
        content_type="application/pdf",
        filename="Rapport été.pdf",
        disposition="attachment",
    )
    assert key_of(url).endswith("/Rapport été.pdf")
    assert " " not in url and "é" not in url
    response = await http.get(url)
    assert response.headers["content-type"] == "application/pdf"
    assert response.headers["content-disposition"] == (
        "attachment; filename=\"Rapport _t_.pdf\"; filename*=UTF-8''Rapport%20%C3%A9t%C3%A9.pdf"
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"filename": "a/b.txt"},
        {"filename": ".."},
        {"filename": ""},
        {"prefix": "a/../b"},
        {"prefix": "a//b"},
        {"content_type": "text/plain\r\nX-Evil: 1"},
        # A list: browsers run the last type, past the sandbox the first decided (a script ran).
        {"content_type": "text/plain,text/html"},
        {"content_type": 'text/plain; x="a", text/html'},
        {"content_type": "image/png,text/html"},
        # Past Latin-1: every request of the link failed (500) when the header was encoded.
        {"content_type": "text/plain; x=\u20ac"},
        {"disposition": "form-data"},
    ],
)
async def test_bad_share_options_are_value_errors(workspace: Workspace, kwargs: dict[str, str]) -> None:
    await workspace.fs.write_file("/workspace/a.txt", "x")
    with pytest.raises(ValueError):
        await share(workspace, "/workspace/a.txt", **kwargs)


async def test_two_shares_of_one_file_are_two_independent_links(
    workspace: Workspace, store: AssetStore, http: httpx.AsyncClient
) -> None:
    await workspace.fs.write_file("/workspace/a.txt", "same")
    first = await share(workspace, "/workspace/a.txt")
    second = await share(workspace, "/workspace/a.txt")
    assert first != second
    assert await store.delete(key_of(first))
    assert (await http.get(first)).status_code == 404
    assert (await http.get(second)).content == b"same"


async def test_overwrite_or_removal_after_sharing_does_not_change_the_shared_bytes(
    workspace: Workspace, http: httpx.AsyncClient
) -> None:
    await workspace.fs.write_file("/workspace/a.txt", "version one")
    url = await share(workspace, "/workspace/a.txt")
    await workspace.fs.write_file("/workspace/a.txt", "version two, longer")
    assert (await http.get(url)).content == b"version one"
    await workspace.fs.rm("/workspace/a.txt")
    assert (await http.get(url)).content == b"version one"


async def test_a_file_larger_than_a_chunk_is_shared_byte_for_byte(
    workspace: Workspace, http: httpx.AsyncClient
) -> None:
    data = bytes(range(251)) * 5000  # 1.2 MiB: three storage chunks, not a multiple of anything
    await workspace.fs.write_file("/workspace/big.dat", data)
    url = await share(workspace, "/workspace/big.dat")
    assert (await http.get(url)).content == data
    ranged = await http.get(url, headers={"Range": "bytes=524280-524300"})
    assert ranged.status_code == 206 and ranged.content == data[524280:524301]


async def test_symlink_is_shared_under_the_link_name_with_the_target_bytes(
    workspace: Workspace, http: httpx.AsyncClient
) -> None:
    await workspace.fs.write_file("/workspace/secret-project/real.txt", "target")
    await workspace.fs.symlink("/workspace/secret-project/real.txt", "/workspace/alias.txt")
    url = await share(workspace, "/workspace/alias.txt")
    assert key_of(url).endswith("/alias.txt")
    assert (await http.get(url)).content == b"target"


async def test_an_expired_share_answers_exactly_like_an_unknown_one(
    workspace: Workspace, store: AssetStore, http: httpx.AsyncClient
) -> None:
    await workspace.fs.write_file("/workspace/a.txt", "short-lived")
    url = await share(workspace, "/workspace/a.txt", expires_after=1)
    assert (await http.get(url)).content == b"short-lived"
    deadline = time.monotonic() + 5
    while await store.get(key_of(url)) is not None:
        assert time.monotonic() < deadline, "link outlived its 1 s expiry"
        await asyncio.sleep(0.1)
    expired = await http.get(url)
    unknown = await http.get(BASE + "/0123456789ABCDEFGHJKMNPQRS/a.txt")
    assert expired.status_code == unknown.status_code == 404
    assert expired.content == unknown.content
    assert dict(expired.headers) == dict(unknown.headers)


async def test_sharing_a_large_file_streams_it_instead_of_loading_it(workspace: Workspace) -> None:
    import tracemalloc

    size = 12 * 1024 * 1024
    await workspace.fs.write_file(
        "/workspace/large.bin", (bytes([i % 251]) * 65536 for i in range(size // 65536))
    )
    tracemalloc.start()
    try:
        await share(workspace, "/workspace/large.bin")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size // 3, f"share held {peak} bytes of a {size}-byte file"
