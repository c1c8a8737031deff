"""A large output flood keeps memory bounded and saves the log byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend

FLOOD_BYTES = 200 * 1000 * 1000
LINE = b"the quick brown fox jumps over the lazy dog 0123456789\n"


def _rss_peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _reset_rss_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


@pytest.mark.slow
async def test_a_200_mb_flood_keeps_memory_bounded_and_saves_the_log_exactly(
    tmp_path: Path, shell_backend: ShellBackend
) -> None:
    expected = hashlib.sha256()
    whole, rest = divmod(FLOOD_BYTES, len(LINE))
    block = LINE * 10_000
    for _ in range(whole // 10_000):
        expected.update(block)
    expected.update(LINE * (whole % 10_000) + LINE[:rest])

    async with computer.Workspace(str(tmp_path / "flood.sqlite"), backends=[shell_backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()  # warm up: first-run allocations are not the flood's
        _reset_rss_peak()
        before = _rss_peak_kib()
        line = LINE.decode().rstrip("\n")
        result = await (await ws.runtime.exec(f"yes '{line}' | head -c {FLOOD_BYTES}")).result()
        growth_mib = (_rss_peak_kib() - before) / 1024

        assert result.status == "completed"
        cut = result.truncated["stdout"]
        assert (cut.status, cut.total_bytes) == ("saved", FLOOD_BYTES)
        assert len(result.stdout.encode()) <= 64 * 1024
        print(f"flood: peak RSS grew by {growth_mib:.1f} MiB")
        assert growth_mib < 64, f"memory grew by {growth_mib:.0f} MiB for a {FLOOD_BYTES // 10**6} MB flood"

        assert cut.path is not None
        saved = hashlib.sha256()
        size = 0
        async for piece in ws.fs.stream(cut.path):
            saved.update(piece)
            size += len(piece)
        assert size == FLOOD_BYTES
        assert saved.hexdigest() == expected.hexdigest()
