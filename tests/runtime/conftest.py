"""Fixtures of the runtime tests: one shell (per-call) and one python backend per session, a fresh
workspace per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.storage import FileSystem


@pytest.fixture(scope="session")
def shell_backend() -> ShellBackend:
    """Per-call sandboxes (``live=False``): these tests pin down the sync bracket of one run, which a
    live sandbox repeats continuously; ``test_live.py`` covers the live default."""
    return ShellBackend(live=False)


@pytest.fixture(scope="session")
def python_backend() -> PythonBackend:
    return PythonBackend()


@pytest.fixture
def fs() -> Iterator[FileSystem]:
    """A bare store in memory (for the rules computed from a real change log)."""
    store = FileSystem.open(None)
    yield store
    store.close()


@pytest.fixture
async def ws(shell_backend: ShellBackend, python_backend: PythonBackend) -> AsyncIterator[computer.Workspace]:
    workspace = computer.Workspace(backends=[shell_backend, python_backend])
    await workspace.fs.mkdir("/workspace", recursive=True)
    yield workspace
    await workspace.close()
