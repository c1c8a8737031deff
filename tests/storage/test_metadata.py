"""Metadata round-trips (issue 16): modes never keep setuid/setgid; mtimes given by a caller stay exact."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computer.storage import FileSystem

PRIVILEGE = 0o6000
modes = st.integers(min_value=0, max_value=0o7777)
_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


@_settings
@given(mode=modes)
def test_write_file_never_stores_setuid_or_setgid(mode: int) -> None:
    async def go() -> None:
        fs = FileSystem.open(None)
        try:
            await fs.write_file("/new", b"x", mode=mode)
            await fs.write_file("/old", b"x")
            await fs.write_file("/old", b"y", mode=mode)  # an overwrite that sets the mode
            assert (await fs.stat("/new")).mode == mode & ~PRIVILEGE
            assert (await fs.stat("/old")).mode == mode & ~PRIVILEGE
            await fs.write_file("/it", [b"a", b"b"], mode=mode)  # iterable write

            async def pieces() -> AsyncIterator[bytes]:
                yield b"c"

            await fs.write_file("/stream", pieces(), mode=mode)
            assert (await fs.stat("/it")).mode == (await fs.stat("/stream")).mode == mode & ~PRIVILEGE
        finally:
            fs.close()

    _run(go())


@_settings
@given(mode=modes)
def test_mkdir_never_stores_setuid_or_setgid(mode: int) -> None:
    async def go() -> None:
        fs = FileSystem.open(None)
        try:
            await fs.mkdir("/plain", mode=mode)
            await fs.mkdir("/a/b/c", recursive=True, mode=mode)
            for p in ("/plain", "/a", "/a/b", "/a/b/c"):
                assert (await fs.stat(p)).mode == mode & ~PRIVILEGE
        finally:
            fs.close()

    _run(go())


@_settings
@given(file_mode=modes, dir_mode=modes, existing_mode=modes)
def test_commit_batch_never_stores_setuid_or_setgid(
    file_mode: int, dir_mode: int, existing_mode: int
) -> None:
    async def go() -> None:
        fs = FileSystem.open(None)
        try:
            await fs.write_file("/existing", b"e")
            fs.commit_batch(
                {"/w/f": b"x"},
                mkdirs=["/w/d"],
                modes={"/w/f": file_mode, "/w/d": dir_mode, "/existing": existing_mode},
            )
            assert (await fs.stat("/w/f")).mode == file_mode & ~PRIVILEGE
            assert (await fs.stat("/w/d")).mode == dir_mode & ~PRIVILEGE
            assert (await fs.stat("/existing")).mode == existing_mode & ~PRIVILEGE
            assert all(entry[3] & PRIVILEGE == 0 for entry in fs.manifest("/"))
        finally:
            fs.close()

    _run(go())


async def test_copy_and_rename_keep_clean_modes(fs: FileSystem) -> None:
    await fs.write_file("/f", b"x", mode=0o6755)
    await fs.mkdir("/d", mode=0o3777)
    await fs.write_file("/d/inner", b"y", mode=0o4700)
    await fs.copy("/f", "/f2")
    await fs.copy("/d", "/d2")
    await fs.rename("/f", "/f3")
    assert (await fs.stat("/f2")).mode == (await fs.stat("/f3")).mode == 0o755
    assert (await fs.stat("/d2")).mode == 0o1777  # the sticky bit is kept
    assert (await fs.stat("/d2/inner")).mode == 0o700


async def test_a_batch_mode_that_only_differs_in_setuid_changes_nothing(fs: FileSystem) -> None:
    await fs.write_file("/f", b"x", mode=0o755)
    rev = fs.rev
    result = fs.commit_batch({}, modes={"/f": 0o4755})
    assert result.rev == rev == fs.rev and result.applied == []


@pytest.mark.parametrize("mode", [0o4000, 0o2000, 0o6777])
async def test_stat_reports_no_privilege_bit(fs: FileSystem, mode: int) -> None:
    await fs.write_file("/f", b"", mode=mode)
    assert (await fs.stat("/f")).mode & PRIVILEGE == 0


mtimes = st.integers(min_value=0, max_value=2**41)


@_settings
@given(first=mtimes, second=mtimes)
def test_write_file_keeps_the_mtime_given(first: int, second: int) -> None:
    async def go() -> None:
        fs = FileSystem.open(None)
        try:
            await fs.write_file("/f", b"x", mtime=first)
            assert (await fs.stat("/f")).mtime == first
            await fs.write_file("/f", b"y", mtime=second)  # even an older one: the caller's word
            assert (await fs.stat("/f")).mtime == second
            await fs.write_file("/big", [b"z" * 600_000, b"z"], mtime=first)
            assert (await fs.stat("/big")).mtime == first
        finally:
            fs.close()

    _run(go())


@_settings
@given(file_mtime=mtimes, dir_mtime=mtimes, existing_mtime=mtimes)
def test_commit_batch_keeps_the_mtimes_given(file_mtime: int, dir_mtime: int, existing_mtime: int) -> None:
    async def go() -> None:
        fs = FileSystem.open(None)
        try:
            await fs.write_file("/existing", b"e")
            await fs.mkdir("/olddir")
            given_mtimes = {"/w/f": file_mtime, "/w/d": dir_mtime, "/existing": existing_mtime}
            given_mtimes["/olddir"] = dir_mtime
            fs.commit_batch({"/w/f": b"x"}, mkdirs=["/w/d"], mtimes=given_mtimes)
            for path, mtime in given_mtimes.items():
                assert (await fs.stat(path)).mtime == mtime, path
            listed = {e[0]: e[4] for e in fs.manifest("/")}
            assert all(listed[p] == m for p, m in given_mtimes.items())
        finally:
            fs.close()

    _run(go())


async def test_an_mtime_only_change_is_one_logged_revision(fs: FileSystem) -> None:
    await fs.write_file("/f", b"x", mtime=1_000)
    rev = fs.rev
    result = fs.commit_batch({}, mtimes={"/f": 2_000})
    assert result.rev == rev + 1 and result.applied == ["/f"]
    assert [(c.path, c.op) for c in fs.changes_since(rev).changes] == [("/f", "write")]
    again = fs.commit_batch({}, mtimes={"/f": 2_000})  # the same mtime: nothing changes
    assert again.rev == fs.rev == rev + 1 and again.applied == []


async def test_mtime_defaults_still_increase_on_overwrite(fs: FileSystem) -> None:
    await fs.write_file("/f", b"x", mtime=2**45)  # far in the future
    await fs.write_file("/f", b"y")
    assert (await fs.stat("/f")).mtime == 2**45 + 1


async def test_a_written_batch_file_keeps_its_mtime_and_mode_together(fs: FileSystem) -> None:
    fs.commit_batch({"/a/b": b"data"}, modes={"/a/b": 0o700}, mtimes={"/a/b": 123_456})
    st_ = await fs.stat("/a/b")
    assert (st_.mode, st_.mtime) == (0o700, 123_456)
