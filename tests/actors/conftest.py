"""Fixtures of the cluster tests: ``computer.init`` over the shared Ray session, unique names."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.config import Settings


@pytest.fixture
def cluster(ray_session: Any, tmp_path: Path) -> Iterator[Settings]:
    """``computer.init`` with a fresh data directory for this test (settings restored afterwards)."""
    conf = computer.init(data_dir=tmp_path / "data")
    yield conf


@pytest.fixture
def name() -> str:
    """A workspace name no other test uses (owner actors are named cluster-wide)."""
    return f"t-{uuid.uuid4().hex[:12]}"
