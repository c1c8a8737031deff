"""``owner_backends``: which pool backends an owner gets, in which order."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from computer.actors.pools import PoolBackend, owner_backends
from computer.config import Settings


def test_shell_comes_first_so_it_is_the_default(ray_session: Any, tmp_path: Path) -> None:
    backends = owner_backends(Settings(data_dir=tmp_path, shell_pool_size=2, python_pool_size=3), "w")
    assert [b.info.id for b in backends] == ["shell", "python"]
    assert all(isinstance(b, PoolBackend) for b in backends)


def test_a_pool_of_size_zero_is_left_out(ray_session: Any, tmp_path: Path) -> None:
    only_python = owner_backends(Settings(data_dir=tmp_path, shell_pool_size=0, python_pool_size=1), "w")
    assert [b.info.id for b in only_python] == ["python"]
    assert owner_backends(Settings(data_dir=tmp_path, shell_pool_size=0, python_pool_size=0), "w") == []


def test_a_minimum_of_zero_with_a_maximum_scales_from_zero(ray_session: Any, tmp_path: Path) -> None:
    config = Settings(data_dir=tmp_path, shell_pool_size=0, shell_pool_max=2, python_pool_size=0)
    assert [b.info.id for b in owner_backends(config, "w")] == ["shell"]


def test_outside_ray_there_are_no_pools_and_no_ray_is_started() -> None:
    code = (
        "from computer.actors.pools import owner_backends\n"
        "from computer.config import Settings\n"
        "import ray\n"
        "print(list(owner_backends(Settings(), 'w')), ray.is_initialized())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] False"
