"""SPEC 2: every fs error is the right OSError subclass, names the path and survives the wire form."""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from computer.storage import FileSystem, error_from_wire, error_to_wire

Case = tuple[str, Callable[[FileSystem], Awaitable[object]], type[OSError], int, str]

CASES: list[Case] = [
    ("missing", lambda fs: fs.read_file("/missing"), FileNotFoundError, errno.ENOENT, "/missing"),
    ("exists", lambda fs: fs.mkdir("/d"), FileExistsError, errno.EEXIST, "/d"),
    ("notdir", lambda fs: fs.readdir("/d/f"), NotADirectoryError, errno.ENOTDIR, "/d/f"),
    ("isdir", lambda fs: fs.read_file("/d"), IsADirectoryError, errno.EISDIR, "/d"),
    ("notempty", lambda fs: fs.rm("/d"), OSError, errno.ENOTEMPTY, "/d"),
    ("invalid", lambda fs: fs.rename("/d", "/d/sub"), OSError, errno.EINVAL, "/d/sub"),
    ("perm", lambda fs: fs.rm("/"), PermissionError, errno.EPERM, "/"),
    ("loop", lambda fs: fs.stat("/loop"), OSError, errno.ELOOP, "/loop"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
async def test_error_class_errno_and_path_survive_the_wire(fs: FileSystem, case: Case) -> None:
    _, call, cls, code, path = case
    await fs.mkdir("/d")
    await fs.write_file("/d/f", b"")
    await fs.symlink("/loop", "/loop")
    with pytest.raises(cls) as info:
        await call(fs)
    err = info.value
    assert (err.errno, err.filename) == (code, path)
    assert path in str(err)
    again = error_from_wire(error_to_wire(err))
    assert type(again) is type(err)
    assert (again.errno, again.filename, again.strerror) == (err.errno, err.filename, err.strerror)


@pytest.mark.parametrize(
    "err",
    [
        ProcessLookupError("no process 999999 in the sandbox"),
        FileNotFoundError("gone"),
        PermissionError("not yours"),
        TimeoutError("too slow"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_error_raised_without_an_errno_crosses_as_its_class(err: OSError) -> None:
    """``kill_process`` of a pid the sandbox lacks raises ``ProcessLookupError(message)``: no errno, so
    it crossed as EIO and a client's ``except ProcessLookupError`` did not catch it."""
    again = error_from_wire(error_to_wire(err))
    assert isinstance(again, type(err)), again
    assert str(err) in str(again)


@pytest.mark.parametrize("parent", ["missing", "file"])
def test_a_store_in_a_directory_that_is_missing_or_a_file_names_it(tmp_path: Path, parent: str) -> None:
    (tmp_path / "file").write_text("")
    path = str(tmp_path / parent / "w.db")
    cls, code, says = (
        (FileNotFoundError, errno.ENOENT, "does not exist")
        if parent == "missing"
        else (NotADirectoryError, errno.ENOTDIR, "is not a directory")
    )
    with pytest.raises(cls) as info:
        FileSystem.open(path)
    assert (info.value.errno, info.value.filename) == (code, path)
    assert f"{tmp_path / parent} {says}" in str(info.value)


def test_a_store_path_that_is_a_directory_is_is_a_directory_error(tmp_path: Path) -> None:
    """``Workspace("/tmp")`` (a directory given for the file) said "unable to open database file" (EIO)."""
    with pytest.raises(IsADirectoryError) as info:
        FileSystem.open(str(tmp_path))
    assert info.value.filename == str(tmp_path) and "give a file's path" in str(info.value)


@pytest.mark.parametrize("data", [123, None, 1.5])
async def test_write_file_with_data_of_the_wrong_type_says_which_types_it_takes(
    fs: FileSystem, data: object
) -> None:
    with pytest.raises(TypeError, match=r"data must be bytes, str or an iterable of bytes, not "):
        await fs.write_file("/f", data)  # type: ignore[arg-type]
    assert not await fs.exists("/f")


@pytest.mark.parametrize("data", [{"a": 1}, {b"ab": b"cd"}, {b"x"}, frozenset({"y"})])
async def test_write_file_of_a_mapping_or_a_set_is_refused_not_its_keys_written(
    fs: FileSystem, data: object
) -> None:
    """They are iterable, so ``write_file("/f", {"a": 1})`` wrote the file ``a`` (the keys, joined)."""
    with pytest.raises(TypeError, match=rf"data must be bytes, .* not {type(data).__name__}"):
        await fs.write_file("/f", data)  # type: ignore[arg-type]
    assert not await fs.exists("/f")
    if isinstance(data, dict):
        with pytest.raises(TypeError, match=r"for JSON, pass json\.dumps\(data\)"):
            await fs.write_file("/f", data)


async def test_a_call_while_another_thread_is_inside_a_transaction_says_what_to_do(
    file_fs: FileSystem,
) -> None:
    """A Workspace shared by threads (each ``asyncio.run`` in its own thread) failed "storage failure:
    cannot start a transaction within a transaction" (EIO), which said neither cause nor remedy."""
    import threading

    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with file_fs._store.db.transaction():  # another thread, in the middle of a write
            inside.set()
            leave.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert inside.wait(30)
        with pytest.raises(OSError) as info:
            await file_fs.write_file("/f", b"x")
        assert info.value.errno == errno.EBUSY
        assert "one thread at a time" in str(info.value) and "a Workspace of its own" in str(info.value)
    finally:
        leave.set()
        thread.join(30)
    await file_fs.write_file("/f", b"x")  # the thread is done: the store works as before
    assert await file_fs.read_file("/f") == b"x"


@pytest.mark.parametrize("mode", [-1, 0o10000, 2**40, True, 0.5])
async def test_a_mode_that_is_not_permission_bits_is_einval_and_nothing_is_made(
    fs: FileSystem, mode: object
) -> None:
    """``mode=-1`` was kept as ``-0o6001`` and ``2**40`` as is (``stat`` answered them)."""
    await fs.mkdir("/d")
    writes: list[Callable[[], Awaitable[object]]] = [
        lambda: fs.write_file("/d/f", b"x", mode=mode),  # type: ignore[arg-type]
        lambda: fs.write_chunks("/d/g", [b"x"], mode=mode),  # type: ignore[arg-type]
        lambda: fs.mkdir("/d/e", mode=mode),  # type: ignore[arg-type]
        lambda: fs.mkdir("/d/e/f", recursive=True, mode=mode),  # type: ignore[arg-type]
    ]
    for write in writes:
        with pytest.raises(OSError) as info:
            await write()
        assert info.value.errno == errno.EINVAL and "mode" in str(info.value)
    assert await fs.readdir("/d") == []


async def test_a_page_past_sqlites_integers_is_all_or_nothing_not_an_overflow(fs: FileSystem) -> None:
    """``readdir`` with an offset or limit over 2**63 - 1 (a python run's ``workspace.readdir`` can
    send up to 2**64 - 1) raised ``OverflowError``, not an ``OSError`` nor a page."""
    await fs.mkdir("/d")
    await fs.write_file("/d/a", b"x")
    assert await fs.readdir("/d", offset=2**63) == []
    assert [e.name for e in await fs.readdir("/d", limit=10**30)] == ["a"]
    assert [e.name for e in await fs.readdir("/d", limit=2**64 - 1, offset=0)] == ["a"]


async def test_a_missing_name_names_its_spelling_in_another_normal_form(fs: FileSystem) -> None:
    """Names stay bytes (SPEC 1), but the ENOENT of an NFD ``café`` names the NFC one that exists (and
    the reverse), wherever the segment is; an ASCII name keeps the bare message."""
    import unicodedata

    nfc, nfd = "caf\u00e9", "cafe\u0301"
    assert unicodedata.normalize("NFD", nfc) == nfd
    await fs.mkdir(f"/w/{nfc}", recursive=True)
    await fs.write_file(f"/w/{nfd}.txt", b"x")
    cases: list[tuple[Callable[[], Awaitable[object]], str, str]] = [
        (
            lambda: fs.stat(f"/w/{nfc}.txt"),
            f"/w/{nfc}.txt",
            f"/w/{nfd}.txt exists in another Unicode normal form (NFD",
        ),
        (
            lambda: fs.read_file(f"/w/{nfc}.txt"),
            f"/w/{nfc}.txt",
            "(NFD: 'cafe\\u0301.txt', not 'caf\\xe9.txt')",
        ),
        (lambda: fs.rm(f"/w/{nfc}.txt"), f"/w/{nfc}.txt", f"/w/{nfd}.txt exists in another"),
        (
            lambda: fs.readdir(f"/w/{nfd}"),
            f"/w/{nfd}",
            f"/w/{nfc} exists in another Unicode normal form (NFC",
        ),
        (
            lambda: fs.write_file(f"/w/{nfd}/f", b"x"),
            f"/w/{nfd}",
            f"/w/{nfc} exists in another",
        ),  # its parent
    ]
    for call, path, hint in cases:
        with pytest.raises(FileNotFoundError) as caught:
            await call()
        assert (caught.value.errno, caught.value.filename) == (errno.ENOENT, path)
        assert hint in str(caught.value.strerror), caught.value.strerror
    assert await fs.read_file(f"/w/{nfd}.txt") == b"x"  # nothing is matched across forms
    with pytest.raises(FileNotFoundError) as plain:
        await fs.stat("/w/cafe.txt")
    assert plain.value.strerror == "No such file or directory"
