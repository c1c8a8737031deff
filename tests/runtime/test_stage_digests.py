"""A pull's new chunks are staged under the names the pull computed (``SyncPull.stage_digests``), not
hashed again by the owner: SHA-256 of every new byte of a large file was computed twice on the way in
(the pull's, then ``_stage``'s for its staged file's name), besides the store's own (s65)."""

from __future__ import annotations

import hashlib
import types

import pytest

import computer
from computer.runtime import ShellBackend, _pull_commit


async def test_a_large_files_new_chunks_are_not_hashed_again_to_stage_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hashed: list[int] = []

    def sha256(data: bytes = b"") -> hashlib._Hash:
        hashed.append(len(data))
        return hashlib.sha256(data)

    monkeypatch.setattr(_pull_commit, "hashlib", types.SimpleNamespace(sha256=sha256))
    async with computer.Workspace(backends=[ShellBackend()]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (
            await ws.runtime.exec("head -c 3000000 /dev/urandom > big; sha256sum < big | cut -c1-64")
        ).result()
        assert result.status == "completed", result
        data = await ws.fs.read_file("/workspace/big")
        assert len(data) == 3000000 and hashlib.sha256(data).hexdigest() == result.stdout.strip()
    assert hashed == []  # (before: one call for each of its 6 chunks)
