"""Programs of ``tests/fidelity/test_user_programs.py`` through Ray: a client of a named workspace, its
owner actor stopped between steps (a reopen: a new owner over the same SQLite file) and the shell
pool's workers. A venv's entry-point scripts (absolute shebangs), an editable install, ``make -j2``'s
incremental decisions, an atomic symlink swap read meanwhile, a server and a lock held by the pool's live
sandbox for later calls, each step its own call."""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import pytest
from fidelity import test_program_edges as edges
from fidelity import test_user_programs as programs
from fidelity._support import MARGIN, ROOT

import computer
from computer.config import Settings


def _stop_owner(name: str) -> None:
    import ray

    from computer.actors import NAMESPACE, actor_name

    try:
        ray.kill(ray.get_actor(actor_name(name), namespace=NAMESPACE))
    except ValueError:
        pass  # never made, or gone already


async def _run(ws: Any, source: str, **options: Any) -> Any:
    options.setdefault("timeout", 120.0)
    result = await asyncio.wait_for(
        (await ws.runtime.exec(source, **options)).result(), options["timeout"] + MARGIN
    )
    assert result.status == "completed", (
        source,
        result.exit_code,
        result.stdout,
        result.stderr,
        result.error,
    )
    return result


async def _reopened(name: str, restart: bool = True) -> Any:
    if restart:
        _stop_owner(name)
    ws = await computer.get_workspace(name)
    if not await ws.fs.exists(ROOT):
        await ws.fs.mkdir(ROOT)
    return ws


@pytest.mark.slow
async def test_a_venv_with_installed_packages_and_an_incremental_build_through_the_pool(
    cluster: Settings, name: str
) -> None:
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("make and cc are needed")
    env = {"BACKEND": programs.BACKEND, "PYPROJECT": programs.PYPROJECT}
    ws = await _reopened(name, restart=False)
    try:
        await _run(ws, f"{programs.package('plain')} && {programs.package('edit')}", env=env)
        await _run(ws, "python3 -m venv --system-site-packages v", timeout=240)
        await _run(ws, f"{programs.PIP} ./plain && {programs.PIP} -e ./edit", timeout=240)
        await ws.fs.mkdir(f"{ROOT}/b")
        for file, text in programs.SOURCES.items():
            await ws.fs.write_file(f"{ROOT}/b/{file}", text)
        await _run(ws, "cd b && make -s -j2")
    finally:
        await ws.close()
    ws = await _reopened(name)
    try:
        seen = await _run(ws, "v/bin/plain | cut -d' ' -f1 && v/bin/edit && head -1 v/bin/edit")
        assert seen.stdout == f"plain\nedit {ROOT}/edit/src/edit/__init__.py\n#!{ROOT}/v/bin/python\n"
        assert (await _run(ws, programs.PLAN)).stdout == "2\n"
        await ws.fs.write_file(f"{ROOT}/b/util.c", '#include "util.h"\nint twice(int x) { return 3 * x; }\n')
        await ws.fs.write_file(f"{ROOT}/edit/src/edit/__init__.py", "def main():\n    print('edited')\n")
        assert (await _run(ws, programs.PLAN)).stdout == "-c -o util.o -o app 2\n"
        await _run(ws, "cd b && make -s -j2")
    finally:
        await ws.close()
    ws = await _reopened(name)
    try:
        assert (await _run(ws, f"{programs.PLAN}; ../v/bin/edit")).stdout == "3\nedited\n"
    finally:
        await ws.close()


async def test_an_atomic_symlink_swap_through_the_pool_while_a_call_reads_through_it(
    cluster: Settings, name: str
) -> None:
    ws = await _reopened(name, restart=False)
    try:
        await _run(ws, "for r in 0 1 2 3; do mkdir r$r && echo r$r > r$r/v; done && ln -s r0 current")
        reader = await ws.runtime.exec(programs.READER, timeout=120)
        for r in range(1, 4):
            await _run(ws, f"ln -s r{r} tmp && mv -T tmp current")
        result = await asyncio.wait_for(reader.result(), 120 + MARGIN)
        assert (result.status, result.stdout.splitlines()[-1]) == ("completed", "done"), result
    finally:
        await ws.close()
    ws = await _reopened(name)
    try:
        assert (
            await _run(ws, "cat current/v; readlink current; ls | tr '\\n' ' '")
        ).stdout == "r3\nr3\ncurrent r0 r1 r2 r3 "
        assert await ws.fs.readlink(f"{ROOT}/current") == "r3"
    finally:
        await ws.close()


async def test_a_server_and_a_lock_held_in_the_pools_live_sandbox_serve_later_calls(
    cluster: Settings, name: str
) -> None:
    ws = await _reopened(name, restart=False)
    try:
        await ws.fs.mkdir(f"{ROOT}/site")
        await ws.fs.write_file(f"{ROOT}/site/a.txt", "one\n")
        port = (await _run(ws, programs.SERVE)).stdout.split()[1]
        holder = await ws.runtime.exec(
            "exec 9> lk && flock 9 && echo ready && sleep 4 && echo released", timeout=60
        )

        async def until_ready() -> None:
            async for snapshot in holder:
                if "ready" in snapshot.stdout or snapshot.done:
                    return

        await asyncio.wait_for(until_ready(), 60 + MARGIN)
        for i in range(3):
            await ws.fs.write_file(f"{ROOT}/site/a.txt", f"v{i}\n")
            seen = await _run(
                ws, f"{programs.GET} {port} site/a.txt; flock -n lk true && echo free || echo busy"
            )
            assert seen.stdout == f"v{i}\nbusy\n"
        result = await asyncio.wait_for(holder.result(), 60 + MARGIN)
        assert result.stdout == "ready\nreleased\n", result
    finally:
        await ws.close()


async def test_link_dest_snapshots_modes_and_make_after_a_workspace_write_through_the_pool(
    cluster: Settings, name: str
) -> None:
    """``tests/fidelity/test_program_edges.py`` through Ray, the owner stopped between steps: ``rsync
    --link-dest`` hard links, a mode-000 file and directory, and ``make`` rebuilding only what a
    workspace write made stale."""
    if shutil.which("rsync") is None or shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("rsync, make and cc are needed")
    ws = await _reopened(name, restart=False)
    try:
        await ws.fs.write_file(f"{ROOT}/Makefile", edges.MAKEFILE)
        for file, text in edges.SOURCES.items():
            await ws.fs.write_file(f"{ROOT}/{file}", text)
        await _run(ws, "make -s && mkdir -p src/s && echo 1 > src/s/f1 && rsync -a src/ snap1/")
        await _run(ws, "rsync -a --link-dest=../snap1 src/ snap2/ && echo z > zero && chmod 0 zero")
        await _run(ws, "mkdir shut && echo x > shut/in && chmod 0 shut")
    finally:
        await ws.close()
    ws = await _reopened(name)
    try:
        seen = await _run(ws, "stat -c '%h %a %n' snap1/s/f1 snap2/s/f1 zero shut && make -q; echo $?")
        assert seen.stdout == "2 644 snap1/s/f1\n2 644 snap2/s/f1\n1 0 zero\n2 0 shut\n0\n"
        await asyncio.sleep(0.01)
        await ws.fs.write_file(f"{ROOT}/b.c", "int b(void) { return 1; } /* ws */\n")
    finally:
        await ws.close()
    ws = await _reopened(name)
    try:
        assert (await _run(ws, "make")).stdout == "CC b.o\nLD prog\n"
        assert (await ws.fs.stat(f"{ROOT}/snap2/s/f1")).nlink == 2
    finally:
        await ws.close()
