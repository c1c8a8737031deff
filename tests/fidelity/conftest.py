"""The fidelity tests' shared fixture: ``db``, the path of a workspace's SQLite file in the test's
own directory (a test reopens the workspace from it)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ws.sqlite"
