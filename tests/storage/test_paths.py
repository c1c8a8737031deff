"""SPEC 1 and CASES 1-2: canonical paths and special names in every operation."""

from __future__ import annotations

import errno

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from computer.storage import FileSystem, FsInvalidError
from computer.storage.paths import canonical


@pytest.mark.parametrize("bad", ["", "a/b", "relative", "/..", "/a/../..", "/a\x00b"])
def test_bad_paths_are_einval(bad: str) -> None:
    with pytest.raises(FsInvalidError) as info:
        canonical(bad)
    assert info.value.errno == errno.EINVAL
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/workspace//src/./index.ts", "/workspace/src/index.ts"),
        ("/workspace/src/../README.md", "/workspace/README.md"),
        ("/a/b/", "/a/b"),
        ("/", "/"),
        ("//", "/"),
        ("/./.", "/"),
    ],
)
def test_canonical_form(raw: str, expected: str) -> None:
    assert canonical(raw) == expected


def test_name_over_255_bytes_is_enametoolong() -> None:
    with pytest.raises(OSError) as info:
        canonical("/" + "é" * 128)
    assert info.value.errno == errno.ENAMETOOLONG


def test_path_over_4096_bytes_is_enametoolong() -> None:
    with pytest.raises(OSError) as info:
        canonical("/" + "/".join(["abcdefgh"] * 500))
    assert info.value.errno == errno.ENAMETOOLONG


async def test_stat_root_has_empty_name(fs: FileSystem) -> None:
    st = await fs.stat("/")
    assert st.name == ""
    assert st.is_directory


async def test_operations_reject_relative_and_nul_paths(fs: FileSystem) -> None:
    for call in (fs.read_file("a/b"), fs.write_file("/x\x00y", b""), fs.mkdir("/.."), fs.stat("")):
        with pytest.raises(FsInvalidError):
            await call


async def test_a_relative_path_is_refused_with_the_absolute_one_it_likely_meant(fs: FileSystem) -> None:
    """A model writing ``notes.md`` was told only "path must be absolute" and guessed again."""
    with pytest.raises(FsInvalidError, match=r"did you mean /workspace/src/notes\.md\?") as info:
        await fs.read_file("./src/notes.md")
    assert info.value.filename == "./src/notes.md"
    with pytest.raises(FsInvalidError, match=r"did you mean /workspace/a\.txt\?"):
        await fs.read_file("workspace/a.txt")  # not /workspace/workspace/a.txt


async def test_errors_name_the_path(fs: FileSystem) -> None:
    with pytest.raises(FileNotFoundError) as info:
        await fs.read_file("/nope/file.txt")
    assert info.value.filename == "/nope/file.txt"
    assert "/nope/file.txt" in str(info.value)


async def test_dotdot_is_resolved_before_lookup(fs: FileSystem) -> None:
    await fs.mkdir("/workspace")
    await fs.write_file("/workspace/README.md", b"r")
    assert await fs.read_file("/workspace/src/../README.md") == b"r"


SPECIAL = ["100%", "a_b", "star*", "what?", "[x]", "with space", "emoji😀", "日本語", "Ελληνικά", "%_*?["]


@pytest.mark.parametrize("name", SPECIAL)
async def test_special_names_work_in_every_operation(fs: FileSystem, name: str) -> None:
    base = "/d" + name
    await fs.mkdir(base)
    # Decoys whose names a LIKE/GLOB pattern would confuse with the real one.
    await fs.mkdir("/dXX")
    await fs.write_file("/dXX/decoy.txt", b"needle decoy\n")
    path = f"{base}/{name}.txt"
    await fs.write_file(path, b"needle here\n")
    assert await fs.read_file(path) == b"needle here\n"
    assert (await fs.stat(path)).name == f"{name}.txt"
    assert [e.name for e in await fs.readdir(base)] == [f"{name}.txt"]
    assert await fs.exists(path)
    assert await fs.ls(base) == [path]
    found = await fs.find(base, f"{name}.txt")
    assert [e.path for e in found] == [path]
    hits = await fs.grep("needle", base)
    assert [(h.path, h.line) for h in hits] == [(path, 1)]
    await fs.copy(path, f"{base}/copy {name}")
    await fs.rename(f"{base}/copy {name}", f"{base}/moved {name}")
    assert await fs.read_file(f"{base}/moved {name}") == b"needle here\n"
    await fs.rm(base, recursive=True)
    assert not await fs.exists(base)
    assert await fs.read_file("/dXX/decoy.txt") == b"needle decoy\n"


async def test_listing_is_in_utf8_byte_order(fs: FileSystem) -> None:
    names = ["b", "a", "Z", "é", "z", "😀", "ａ", "_", "%"]
    for n in names:
        await fs.write_file("/" + n, b"")
    listed = [e.name for e in await fs.readdir("/")]
    assert listed == sorted(names, key=lambda s: s.encode("utf-8"))


@given(
    st.text(alphabet="/.aé\x00 \udcff", max_size=80) | st.text(alphabet="/ab.", min_size=200, max_size=300)
)
@settings(max_examples=500, deadline=None)
def test_the_fast_path_agrees_with_the_full_normalization(path: str) -> None:
    """``canonical`` returns a plain path as it is; that must be exactly what normalizing gives."""
    from computer.storage.paths import _normalize

    try:
        expected: str | tuple[type[BaseException], int | None] = _normalize(path)
    except OSError as exc:
        expected = (type(exc), exc.errno)
    try:
        got: str | tuple[type[BaseException], int | None] = canonical(path)
    except OSError as exc:
        got = (type(exc), exc.errno)
    assert got == expected


def test_long_and_non_ascii_names_still_get_their_length_checked() -> None:
    with pytest.raises(OSError) as raised:
        canonical("/" + "é" * 200)  # 200 characters, 400 bytes: over the 255-byte name limit
    assert raised.value.errno == errno.ENAMETOOLONG
    assert canonical("/" + "é" * 60) == "/" + "é" * 60


PLAIN = ["/w/a", "/w/é", "/w/" + "b" * 120, "/w/" + "é" * 30]


@given(
    st.lists(
        st.sampled_from(PLAIN) | st.text(alphabet="/.aé\x00 \udcff", max_size=70) | st.just("/"),
        max_size=6,
    )
)
@settings(max_examples=500, deadline=None)
def test_a_batch_of_paths_checked_at_once_agrees_with_one_at_a_time(paths: list[str]) -> None:
    """``Store.canon_many`` (``commit_batch``'s paths) keeps the batch as it is only when every path
    is canonical and valid UTF-8; otherwise each is canonicalised or refused like ``canon`` alone."""
    store = FileSystem.open(None)
    try:
        one_by_one: list[str] | tuple[type[BaseException], int | None, object] = []
        try:
            one_by_one = [store._store.canon(p, refresh=False) for p in paths]
        except OSError as exc:
            one_by_one = (type(exc), exc.errno, exc.filename)
        try:
            batch: list[str] | tuple[type[BaseException], int | None, object] = store._store.canon_many(paths)
        except OSError as exc:
            batch = (type(exc), exc.errno, exc.filename)
        assert batch == one_by_one
    finally:
        store.close()


def test_a_batch_with_one_odd_path_is_canonicalised_or_refused_whole() -> None:
    fs = FileSystem.open(None)
    try:
        fs.commit_batch({"/w/a": b"a", "/w/./b/": b"b", "/w/c/../d": b"d"}, mkdirs=["/w/e", "/w//f/"])
        assert [r.path for r in fs.manifest("/w")] == ["/w/a", "/w/b", "/w/d", "/w/e", "/w/f"]
        for writes, dirs, code in (
            ({"/w/x": b"x", "relative": b"r"}, [], errno.EINVAL),
            ({}, ["/w/y", "/w/z\x00"], errno.EINVAL),
            ({"/w/x": b"x", "/w/\udcff": b"s"}, [], errno.EINVAL),
            ({}, ["/w/y", "/w/" + "n" * 256], errno.ENAMETOOLONG),
        ):
            with pytest.raises(OSError) as raised:
                fs.commit_batch(writes, mkdirs=dirs)
            assert raised.value.errno == code
        assert [r.path for r in fs.manifest("/w")] == ["/w/a", "/w/b", "/w/d", "/w/e", "/w/f"]
    finally:
        fs.close()
    with pytest.raises(OSError) as raised:
        fs.commit_batch({"/w/a": None, "/w/b": None})
    assert raised.value.errno == errno.EIO and raised.value.filename == "/w/a"
