"""What a hostile program does to a mirror in the tests of its hardening: a host directory holding a
file of the host's, and a mirror's directory replaced by a link to it."""

from __future__ import annotations

import shutil
from pathlib import Path


def host_with(tmp_path: Path, name: str) -> Path:
    """A directory outside the mirror holding ``name`` (the host's bytes)."""
    host = tmp_path / "host"
    host.mkdir()
    (host / name).write_bytes(b"the host's")
    return host


def plant_link(directory: Path, rel: str, host: Path) -> None:
    """Replace the directory ``rel`` of a mirror (with what it holds) by a link to ``host``."""
    shutil.rmtree(directory / rel)
    (directory / rel).symlink_to(host)
