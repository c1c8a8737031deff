"""The `assets` command inside the shell sandbox publishes through the workspace, never holding credentials."""

from __future__ import annotations

import hashlib
import resource
from typing import Any

import pytest

import computer
from computer.runtime import ShellBackend
from computer.runtime._assets_cli import parse_expiry
from computer.runtime._share_budget import ShareBudget


class RecordingPublisher:
    """An assets surface that records what it was asked to share."""

    def __init__(self) -> None:
        self.shared: list[tuple[str, float, bytes]] = []
        self.workspace: computer.Workspace | None = None

    async def share(self, path: str, *, expires_after: float = 3600.0, **options: Any) -> str:
        assert self.workspace is not None
        self.shared.append((path, expires_after, await self.workspace.fs.read_file(path)))
        return f"http://127.0.0.1:8787/share/{len(self.shared)}/{path.rsplit('/', 1)[1]}"


def test_expiry_accepts_ms_and_suffixes() -> None:
    assert [parse_expiry(t) for t in ("1500", "250ms", "30s", "5m", "2h")] == [1.5, 0.25, 30.0, 300.0, 7200.0]


def test_expiry_refuses_zero_negative_and_non_finite_lifetimes() -> None:
    for text in ("0", "0ms", "0.0h", "-5", "inf", "nan", "9" * 400, "9" * 400 + "h"):
        with pytest.raises(ValueError, match="invalid expiry"):
            parse_expiry(text)
    assert parse_expiry("9" * 30 + "h") > 7 * 24 * 3600  # long but finite: the workspace caps it


async def test_a_bad_lifetime_reaches_no_publisher_even_written_to_the_socket(
    shell_backend: ShellBackend,
) -> None:
    """The bridge took ``float(expires_after)`` as sent: NaN, inf or 0 written to the socket by any
    program of the run reached the publisher (a custom one has no check of its own)."""
    publisher = RecordingPublisher()
    raw = (
        "import json, socket, sys\n"
        "for bad in ('NaN', 'Infinity', '-1', '0', '\"60\"', 'true'):\n"
        "    s = socket.socket(socket.AF_UNIX); s.connect('/run/computer/assets.sock')\n"
        '    s.sendall((\'{"op": "publish", "path": "/workspace/a.txt", "expires_after": \' + bad + \'}\\n\').encode())\n'
        "    print(json.loads(s.makefile().readline()).get('error', 'PUBLISHED'))\n"
    )
    async with computer.Workspace(backends=[shell_backend], assets=publisher) as ws:
        publisher.workspace = ws
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/a.txt", "a")
        await ws.fs.write_file("/workspace/raw.py", raw)
        result = await (await ws.runtime.exec("assets publish a.txt 0; python3 raw.py")).result()
        assert result.status == "completed", result.stderr
        assert "assets: invalid expiry '0'" in result.stderr
        lines = result.stdout.splitlines()
        assert len(lines) == 6 and all("positive, finite" in line for line in lines), lines
        assert publisher.shared == []


async def test_assets_publish_prints_the_url_of_a_file_made_by_the_run(shell_backend: ShellBackend) -> None:
    publisher = RecordingPublisher()
    async with computer.Workspace(backends=[shell_backend], assets=publisher) as ws:
        publisher.workspace = ws
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/old.txt", "old")
        result = await (
            await ws.runtime.exec(
                "cd /workspace && echo chart > chart.png && assets publish chart.png 5m; assets publish old.txt"
            )
        ).result()
        assert result.status == "completed", result.stderr
        assert (
            result.stdout
            == "http://127.0.0.1:8787/share/1/chart.png\nhttp://127.0.0.1:8787/share/2/old.txt\n"
        )
        assert publisher.shared == [
            ("/workspace/chart.png", 300.0, b"chart\n"),
            ("/workspace/old.txt", 3600.0, b"old"),
        ]
        assert await ws.fs.read_text("/workspace/chart.png") == "chart\n"
        assert "/workspace/chart.png" in result.pulled and result.skipped == []


async def test_assets_publish_refuses_paths_outside_the_workspace_and_missing_files(
    shell_backend: ShellBackend,
) -> None:
    publisher = RecordingPublisher()
    async with computer.Workspace(backends=[shell_backend], assets=publisher) as ws:
        publisher.workspace = ws
        await ws.fs.mkdir("/workspace")
        result = await (
            await ws.runtime.exec("assets publish /etc/passwd; assets publish missing.txt")
        ).result()
        assert result.status == "failed"
        assert "outside /workspace" in result.stderr and "missing.txt: no such regular file" in result.stderr
        assert publisher.shared == []


async def test_assets_publish_saves_under_the_rules_of_the_pull() -> None:
    """Issue 17 finding 2: the bridge wrote the file into the workspace itself, over a protected file
    and over a file the workspace changed during the run."""
    publisher = RecordingPublisher()
    backend = ShellBackend(live=False, max_file_bytes=100)
    async with computer.Workspace(backends=[backend], assets=publisher) as ws:
        publisher.workspace = ws
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/big.bin", b"B" * 500)  # protected: not mirrored
        await ws.fs.write_file("/workspace/doc.txt", "v1\n")
        handle = await ws.runtime.exec(
            "echo mine > big.bin; assets publish big.bin; echo ready; sleep 1;"
            " echo sandbox > doc.txt; assets publish doc.txt; mkdir -p out; echo ok > out/c.txt;"
            " assets publish out/c.txt"
        )
        async for snapshot in handle:
            if "ready" in snapshot.stdout:
                await ws.fs.write_file("/workspace/doc.txt", "workspace\n")
                break
        result = await handle.result()
        assert await ws.fs.read_file("/workspace/big.bin") == b"B" * 500
        assert await ws.fs.read_text("/workspace/doc.txt") == "workspace\n"
        assert "big.bin was not published: protected" in result.stderr
        assert "doc.txt was not published: changed in the workspace" in result.stderr
        assert [p for p, _, _ in publisher.shared] == ["/workspace/out/c.txt"]
        # The directory the bridge saved with its file is the run's own change, not a conflict.
        assert "/workspace/out" not in result.skipped
        assert await ws.fs.read_text("/workspace/out/c.txt") == "ok\n"


async def test_assets_publish_through_a_link_to_the_root_maps_nothing_of_the_host(
    shell_backend: ShellBackend,
) -> None:
    """Issue 17 finding 7: through ``ln -s / root`` the answers told a host file, a host directory
    and a missing path apart."""
    publisher = RecordingPublisher()
    async with computer.Workspace(backends=[shell_backend], assets=publisher) as ws:
        publisher.workspace = ws
        await ws.fs.mkdir("/workspace")
        result = await (
            await ws.runtime.exec(
                "ln -s / root; for p in root/etc/passwd root/etc root/nonexistent; do assets publish $p; done"
            )
        ).result()
        lines = result.stderr.splitlines()
        assert len(lines) == 3 and publisher.shared == []
        assert len({line.split(": ", 2)[2] for line in lines}) == 1, lines


async def test_assets_publish_without_a_publisher_says_so(ws: computer.Workspace) -> None:
    result = await (await ws.runtime.exec("echo x > a.txt; assets publish a.txt")).result()
    assert (result.status, result.stdout) == ("failed", "")
    assert "no assets publisher" in result.stderr


def test_a_bridge_directory_listens_from_the_start_and_its_socket_closes_with_it(tmp_path: Any) -> None:
    """The socket is bound when the directory is made (before the sandbox starts, off the run's path);
    a directory removed unused (its standby discarded) closes that socket."""
    import socket

    from computer.runtime._assets_bridge import _LISTENING, AssetsBridge

    directory = AssetsBridge.make_directory(tmp_path / "run")
    listening = _LISTENING[directory]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(directory / "assets.sock"))  # accepted into the backlog until a run serves it
    AssetsBridge.remove_directory(directory)
    assert directory not in _LISTENING and listening.fileno() == -1
    assert not directory.exists()


async def test_a_run_whose_bridge_socket_was_prebound_still_publishes(shell_backend: ShellBackend) -> None:
    """Two runs in a row: the second takes a standby whose bridge socket was bound ahead."""
    publisher = RecordingPublisher()
    async with computer.Workspace(backends=[shell_backend], assets=publisher) as ws:
        publisher.workspace = ws
        await ws.fs.mkdir("/workspace")
        for i in range(2):
            result = await (await ws.runtime.exec(f"echo {i} > f{i}.txt && assets publish f{i}.txt")).result()
            assert result.status == "completed", result.stderr
            assert result.stdout.strip().endswith(f"/f{i}.txt")
    assert [path for path, _, _ in publisher.shared] == ["/workspace/f0.txt", "/workspace/f1.txt"]


class HeadPublisher:
    """Records each shared file's size and first bytes (never a whole file in memory)."""

    def __init__(self) -> None:
        self.shared: list[tuple[str, int, bytes]] = []
        self.workspace: computer.Workspace | None = None

    async def share(self, path: str, *, expires_after: float = 3600.0, **options: Any) -> str:
        assert self.workspace is not None
        size = (await self.workspace.fs.stat(path)).size
        self.shared.append((path, size, await self.workspace.fs.read_file(path, length=8)))
        return f"http://127.0.0.1:8787/share/{len(self.shared)}"


async def test_assets_publish_of_a_sparse_file_holds_no_more_than_its_data(
    shell_backend: ShellBackend,
) -> None:
    """The bridge read a file to publish into memory whole, to its end: ``truncate -s 1G`` cost the
    host 1 GB for a file that cost the sandbox nothing (16 GB: the host's memory), and parallel
    requests each held a copy. A large file goes as its chunks, a hole neither read nor held, one
    file read at a time; a dense one arrives whole and exact."""
    publisher = HeadPublisher()
    async with computer.Workspace(backends=[shell_backend], assets=publisher) as ws:
        publisher.workspace = ws
        ws.runtime.context.shares = ShareBudget(max_bytes=4 << 30)  # two links of 1 GiB: over the default
        await ws.fs.mkdir("/workspace")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        result = await (
            await ws.runtime.exec(
                "truncate -s 1G sparse && printf sparse | dd of=sparse conv=notrunc status=none"
                " && head -c 1500000 /dev/urandom > dense && sha256sum dense"
                " && for i in 1 2; do assets publish sparse & done; wait; assets publish dense",
                timeout=120,
            )
        ).result()
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
        assert result.status == "completed", result.stderr
        assert result.stderr == ""
        assert sorted(publisher.shared) == [
            ("/workspace/dense", 1_500_000, (await ws.fs.read_file("/workspace/dense", length=8))),
            *[("/workspace/sparse", 1 << 30, b"sparse\0\0")] * 2,
        ]
        assert grown < 512 << 20, f"the host's memory grew by {grown >> 20} MiB"
        digest = hashlib.sha256(await ws.fs.read_file("/workspace/dense")).hexdigest()
        assert result.stdout.split()[0] == digest
