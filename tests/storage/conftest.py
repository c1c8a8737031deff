"""Fixtures for storage tests: a fresh in-memory store, or one backed by a file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from computer.storage import FileSystem


@pytest.fixture
def fs() -> Iterator[FileSystem]:
    store = FileSystem.open(None)
    yield store
    store.close()


@pytest.fixture
def file_fs(tmp_path: Path) -> Iterator[FileSystem]:
    store = FileSystem.open(str(tmp_path / "ws.sqlite"))
    yield store
    store.close()
