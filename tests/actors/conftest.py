"""Fixtures of the cluster tests: ``computer.init`` over the shared Ray session, unique names."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.actors import NAMESPACE, actor_name
from computer.config import Settings


@pytest.fixture
def cluster(ray_session: Any, tmp_path: Path) -> Iterator[Settings]:
    """``computer.init`` with a fresh data directory for this test."""
    yield computer.init(data_dir=tmp_path / "data")


@pytest.fixture
def name(ray_session: Any) -> Iterator[str]:
    """A workspace name no other test uses; its owner is stopped after the test (saves memory)."""
    workspace = f"t-{uuid.uuid4().hex[:12]}"
    yield workspace
    try:
        ray_session.kill(ray_session.get_actor(actor_name(workspace), namespace=NAMESPACE))  # type: ignore[attr-defined]
    except ValueError:
        pass  # never created, or already gone
