"""Fixtures of the fault tests: ``computer.init`` over the shared Ray session, unique workspace names."""

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
    """``computer.init`` with a fresh data directory; the default settings are restored afterwards."""
    yield computer.init(data_dir=tmp_path / "data", shell_pool_size=2, python_pool_size=2)


@pytest.fixture
def name(ray_session: Any) -> Iterator[str]:
    """A workspace name no other test uses; its owner is stopped after the test."""
    workspace = f"rel-{uuid.uuid4().hex[:12]}"
    yield workspace
    try:
        ray_session.kill(ray_session.get_actor(actor_name(workspace), namespace=NAMESPACE))
    except ValueError:
        pass
