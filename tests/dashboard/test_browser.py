"""The dashboard in a real browser: Playwright driving the distribution's Chromium (``apt-get install
chromium``, passed as the executable; nothing is downloaded). Screenshots of the main views are saved
under docs/screenshots/ (linked from the README)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from computer.config import Settings
from computer.dashboard import AccessPolicy, DataDirSource
from computer.runtime.shell import ShellBackend
from computer.storage import audit_caller
from computer.tools import create_tools

from .conftest import PNG, Serve, open_workspace

playwright = pytest.importorskip("playwright.async_api")
expect = playwright.expect

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs the distribution's chromium (apt-get install chromium)"
)


@pytest.fixture
async def page() -> AsyncIterator[Any]:
    async with playwright.async_playwright() as pw:
        # --no-sandbox: the tests run as root, where Chromium's own sandbox refuses to start.
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        tab = await context.new_page()
        tab.set_default_timeout(15_000)
        try:
            yield tab
        finally:
            await browser.close()


async def _shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def test_the_dashboard_live_in_a_browser(settings: Settings, serve: Serve, page: Any) -> None:
    ws = open_workspace(settings, "agent-1", backends=[ShellBackend()])
    tools = create_tools(ws)
    with audit_caller(agent="agent-1", adapter="openai"):
        await tools["write"].run({"path": "/workspace/README.md", "content": "# Project\n\nFix the tests.\n"})
        await tools["write"].run(
            {"path": "/workspace/src/app.py", "content": "def add(a, b):\n    return a - b\n"}
        )
        await tools["read"].run({"path": "/workspace/src/missing.py"})
        await tools["exec"].run({"command": "echo building; ls src"})
    await ws.fs.write_file("/workspace/chart.png", PNG)
    ws.audit.flush()
    base = await serve(DataDirSource(settings, workspaces={"agent-1": ws}))

    # The list of workspaces; one appears while a script writes to it.
    await page.goto(base + "/")
    await page.wait_for_selector('#workspaces tr[data-name="agent-1"]')
    newcomer = open_workspace(settings, "agent-2")
    await create_tools(newcomer)["write"].run({"path": "/workspace/hello.txt", "content": "hi\n"})
    await page.wait_for_selector('#workspaces tr[data-name="agent-2"]')
    await _shot(page, "workspaces")

    # A tool call arrives live on the timeline.
    await page.goto(base + "/w/agent-1")
    await page.wait_for_selector("#timeline tr.record")
    before = await page.locator("#timeline tr.record").count()
    await page.wait_for_selector("#live-state.live:not(.off)")
    with audit_caller(agent="agent-1", adapter="openai"):
        await tools["edit"].run(
            {"path": "/workspace/src/app.py", "edits": [{"oldText": "a - b", "newText": "a + b"}]}
        )
    ws.audit.flush()
    newest = page.locator("#timeline tr.record").first
    await newest.filter(has_text="edit").wait_for()
    assert await page.locator("#timeline tr.record").count() == before + 1
    assert "agent-1 via openai" in await newest.inner_text()
    await _shot(page, "timeline")

    # Open a file from the tree, then view an image.
    await page.goto(base + "/w/agent-1/files?path=%2Fworkspace")
    await page.click("text=src/")
    await page.click("text=app.py")
    await page.wait_for_selector("#file-text")
    assert "return a + b" in await page.inner_text("#file-text")
    await _shot(page, "file")
    await page.goto(base + "/w/agent-1/files?path=%2Fworkspace")
    await page.click("text=chart.png")
    image = page.locator("img.viewer")
    await image.wait_for()
    # The page's own Content-Security-Policy stays on: assertions use Playwright's injected script,
    # never an eval in the page.
    await expect(image).to_have_js_property("naturalWidth", 48)
    await expect(image).to_have_js_property("naturalHeight", 32)
    await _shot(page, "image")

    # A running exec's output grows on its page.
    handle = await ws.runtime.exec("for i in $(seq 1 40); do echo line $i; sleep 0.1; done")
    await page.goto(f"{base}/w/agent-1/runs/{handle.id}")
    stdout = page.locator("#stdout")
    await expect(stdout).to_contain_text("line 3")
    early = await stdout.inner_text()
    assert "line 40" not in early
    await expect(stdout).to_contain_text("line 12")
    assert len(await stdout.inner_text()) > len(early)
    await _shot(page, "run")
    await expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
    assert "line 40" in await stdout.inner_text()
    await handle.result()

    await page.goto(base + "/cluster")
    await page.wait_for_selector("#cluster")
    await newcomer.close()
    await ws.close()


async def test_the_browser_is_refused_without_the_token(settings: Settings, serve: Serve, page: Any) -> None:
    policy = AccessPolicy.for_bind("192.0.2.7", None)  # a non-loopback bind: a token was made
    base = await serve(DataDirSource(settings), policy)
    refused = await page.goto(base + "/")
    assert refused is not None and refused.status == 401
    assert "needs its token" in await page.inner_text("body")
    opened = await page.goto(f"{base}/?token={policy.token}")
    assert opened is not None and opened.status == 200
    again = await page.goto(base + "/cluster")  # the cookie carries it from now on
    assert again is not None and again.status == 200
    await asyncio.sleep(0)


@pytest.mark.ray
async def test_the_cluster_view_in_a_browser(cluster: Settings, name: str, serve: Serve, page: Any) -> None:
    import computer
    from computer.dashboard import ClusterSource

    async with computer.get_workspace(name) as ws:
        await create_tools(ws)["exec"].run({"command": "echo warm"})  # a pool worker has run something
        base = await serve(ClusterSource(cluster))
        await page.goto(base + "/cluster")
        await expect(page.locator("#cluster")).to_contain_text("cluster view")
        await expect(page.locator("#cluster")).to_contain_text("shell")
        await expect(page.locator("#cluster")).to_contain_text(name)
        await _shot(page, "cluster")
