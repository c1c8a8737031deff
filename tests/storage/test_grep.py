"""SPEC 4 grep and CASES 17-22."""

from __future__ import annotations

import asyncio

import pytest

from computer.storage import CHUNK_SIZE, FileSystem, FsInvalidError, GrepContextLine
from computer.storage import _grep as _grep_module


async def _files(fs: FileSystem, files: dict[str, bytes | str]) -> None:
    for path, data in files.items():
        parent = path.rsplit("/", 1)[0] or "/"
        await fs.mkdir(parent, recursive=True)
        await fs.write_file(path, data)


async def test_empty_file_has_no_match(fs: FileSystem) -> None:
    await fs.write_file("/e", b"")
    assert await fs.grep("", "/e") == []
    assert await fs.grep("x", "/e") == []


async def test_lines_are_one_based_and_last_line_without_newline_counts(fs: FileSystem) -> None:
    await fs.write_file("/f", "alpha\nbeta\ngamma beta")
    hits = await fs.grep("beta", "/f")
    assert [(h.line, h.text) for h in hits] == [(2, "beta"), (3, "gamma beta")]
    assert all(h.path == "/f" and h.context is None for h in hits)


async def test_empty_lines_count(fs: FileSystem) -> None:
    await fs.write_file("/f", "\n\nx\n\n")
    assert [h.line for h in await fs.grep("", "/f")] == [1, 2, 3, 4]
    assert [h.line for h in await fs.grep("x", "/f")] == [3]


async def test_ignore_case(fs: FileSystem) -> None:
    await fs.write_file("/f", "todo\nTODO\nTodo\nnothing\n")
    assert len(await fs.grep("todo", "/f", ignore_case=True)) == 3
    assert len(await fs.grep("todo", "/f")) == 1
    assert len(await fs.grep("t.do", "/f", ignore_case=True)) == 0
    assert len(await fs.grep("t.do", "/f", ignore_case=True, regex=True)) == 3


async def test_literal_by_default_regex_on_request(fs: FileSystem) -> None:
    await fs.write_file("/f", "task 12\nliteral task \\d+ here\n")
    assert [h.line for h in await fs.grep(r"task \d+", "/f")] == [2]
    assert [h.line for h in await fs.grep(r"task \d+", "/f", regex=True)] == [1]


async def test_invalid_regex_is_einval(fs: FileSystem) -> None:
    await fs.write_file("/f", "x")
    with pytest.raises(FsInvalidError) as info:
        await fs.grep("[", "/f", regex=True)
    assert "Invalid regular expression" in str(info.value)
    assert await fs.grep("[", "/f") == []


async def test_regex_anchors_apply_per_line(fs: FileSystem) -> None:
    await fs.write_file("/f", "start mid\nmid start\nend\n")
    assert [h.line for h in await fs.grep("^start", "/f", regex=True)] == [1]
    assert [h.line for h in await fs.grep("start$", "/f", regex=True)] == [2]
    assert [h.line for h in await fs.grep(r"mid\s+start", "/f", regex=True)] == [2]
    assert [h.line for h in await fs.grep(r"mid\send", "/f", regex=True)] == []


async def test_context_gives_before_match_after(fs: FileSystem) -> None:
    await fs.write_file("/f", "a\nb\nHIT\nc\nd\n")
    [hit] = await fs.grep("HIT", "/f", context=1)
    assert hit.line == 3
    assert hit.context == [
        GrepContextLine(2, "b", False),
        GrepContextLine(3, "HIT", True),
        GrepContextLine(4, "c", False),
    ]


async def test_adjacent_matches_each_carry_their_own_context(fs: FileSystem) -> None:
    await fs.write_file("/f", "x\nHIT one\nHIT two\ny\n")
    first, second = await fs.grep("HIT", "/f", context=1)
    assert first.context == [
        GrepContextLine(1, "x", False),
        GrepContextLine(2, "HIT one", True),
        GrepContextLine(3, "HIT two", True),
    ]
    assert second.context == [
        GrepContextLine(2, "HIT one", True),
        GrepContextLine(3, "HIT two", True),
        GrepContextLine(4, "y", False),
    ]
    assert first.context is not second.context
    first.context.clear()
    assert len(second.context) == 3


async def test_context_is_clipped_at_file_edges(fs: FileSystem) -> None:
    await fs.write_file("/f", "HIT\nb\nHIT")
    hits = await fs.grep("HIT", "/f", context=5)
    assert [[c.line for c in h.context or []] for h in hits] == [[1, 2, 3], [1, 2, 3]]


@pytest.mark.parametrize("bad", [-1, 11])
async def test_context_out_of_range_is_einval(fs: FileSystem, bad: int) -> None:
    await fs.write_file("/f", "x")
    with pytest.raises(FsInvalidError):
        await fs.grep("x", "/f", context=bad)


async def test_offset_and_limit_count_matching_lines_across_files(fs: FileSystem) -> None:
    await _files(fs, {"/d/a.txt": "hit 1\nhit 2\n", "/d/b.txt": "hit 1\nhit 2\n"})
    hits = await fs.grep("hit", "/d", offset=1, limit=2)
    assert [(h.path, h.line) for h in hits] == [("/d/a.txt", 2), ("/d/b.txt", 1)]


async def test_include_filters_before_paging(fs: FileSystem) -> None:
    await _files(
        fs,
        {
            "/d/a.txt": "hit\n",
            "/d/b.ts": "hit 1\nhit 2\n",
            "/d/c.txt": "hit\n",
            "/d/sub/d.ts": "hit 3\n",
        },
    )
    hits = await fs.grep("hit", "/d", include="**/*.ts", offset=1, limit=2)
    assert [(h.path, h.line) for h in hits] == [("/d/b.ts", 2), ("/d/sub/d.ts", 1)]
    hits = await fs.grep("hit", "/d", include=["a.txt", "c.txt"])
    assert [h.path for h in hits] == ["/d/a.txt", "/d/c.txt"]


async def test_exclude_prunes_directories(fs: FileSystem) -> None:
    await _files(fs, {"/d/node_modules/x.js": "hit\n", "/d/src/y.js": "hit\n"})
    hits = await fs.grep("hit", "/d", exclude=["node_modules"])
    assert [h.path for h in hits] == ["/d/src/y.js"]


async def test_single_file_path_ignores_include_and_exclude(fs: FileSystem) -> None:
    await fs.write_file("/f.txt", "hit\n")
    assert len(await fs.grep("hit", "/f.txt", include="*.ts", exclude=["*"])) == 1


async def test_match_on_line_straddling_chunk_boundary_is_found(fs: FileSystem) -> None:
    head = b"x" * (CHUNK_SIZE - 5) + b"\nab"
    line = b"cdNEEDLEef\n"
    data = head + line + b"tail\n"
    assert data.index(b"abcd") < CHUNK_SIZE <= data.index(b"NEEDLE")  # the line starts in chunk 0
    await fs.write_file("/f", data)
    [hit] = await fs.grep("abcdNEEDLE", "/f")
    assert (hit.line, hit.text) == (2, "abcdNEEDLEef")
    [hit] = await fs.grep("ab.dneedle", "/f", regex=True, ignore_case=True)
    assert hit.line == 2
    [hit] = await fs.grep("NEEDLE", "/f", context=1)
    assert [c.line for c in hit.context or []] == [1, 2, 3]


async def test_needle_split_across_chunks_is_found(fs: FileSystem) -> None:
    data = b"y" * (CHUNK_SIZE - 3) + b"NEEDLE\n"
    await fs.write_file("/f", data)
    assert [h.line for h in await fs.grep("NEEDLE", "/f")] == [1]


async def test_binary_files_are_skipped(fs: FileSystem) -> None:
    await _files(fs, {"/d/bin": b"hit\x00hit\n", "/d/text": b"hit\n"})
    assert [h.path for h in await fs.grep("hit", "/d")] == ["/d/text"]


async def test_nul_after_first_8k_is_text(fs: FileSystem) -> None:
    await fs.write_file("/f", b"a" * 9000 + b"\nhit\x00\n")
    assert [h.line for h in await fs.grep("hit", "/f")] == [2]


async def test_pathological_regex_returns_promptly(fs: FileSystem) -> None:
    # A backtracking engine takes ~2**50 steps here (years); RE2 is linear. Bounded by the event, not
    # timed (was < 5 s, a loaded machine's margin).
    await fs.write_file("/f", "a" * 50 + "b\n")
    hits = await asyncio.wait_for(fs.grep("(a+)+$", "/f", regex=True), timeout=60)
    assert hits == []
    assert len(await asyncio.wait_for(fs.grep("(a+)+b", "/f", regex=True), timeout=60)) == 1


async def test_grep_missing_path_is_enoent(fs: FileSystem) -> None:
    with pytest.raises(FileNotFoundError):
        await fs.grep("x", "/nope")


async def test_grep_walk_order_then_line_order(fs: FileSystem) -> None:
    await _files(fs, {"/d/b/1": "hit\n", "/d/a": "x\nhit\nhit\n", "/d/c": "hit\n"})
    hits = await fs.grep("hit", "/d")
    assert [(h.path, h.line) for h in hits] == [("/d/a", 2), ("/d/a", 3), ("/d/b/1", 1), ("/d/c", 1)]


async def test_invalid_utf8_is_replaced_in_text(fs: FileSystem) -> None:
    await fs.write_file("/f", b"hit \xff\n")
    [hit] = await fs.grep("hit", "/f")
    assert hit.text == "hit \ufffd"


async def test_unicode_literal_and_ignore_case(fs: FileSystem) -> None:
    await fs.write_file("/f", "Ärger\närger\n日本語テキスト\n")
    assert [h.line for h in await fs.grep("ärger", "/f", ignore_case=True)] == [1, 2]
    assert [h.line for h in await fs.grep("本語", "/f")] == [3]


@pytest.mark.parametrize("regex", [False, True])
@pytest.mark.parametrize("context", [0, 2])
async def test_line_numbers_across_many_chunks_match_a_naive_scan(
    fs: FileSystem, regex: bool, context: int
) -> None:
    lines = []
    for i in range(120_000):
        lines.append(f"line {i} hit" if i % 9973 == 0 or i == 119_999 else f"line {i} filler text")
    data = "\n".join(lines)
    assert len(data) > 4 * CHUNK_SIZE
    await fs.write_file("/many", data)
    expected = [i + 1 for i, line in enumerate(lines) if "hit" in line]
    hits = await fs.grep("h.t" if regex else "hit", "/many", regex=regex, context=context)
    assert [h.line for h in hits] == expected
    assert all(h.text == lines[h.line - 1] for h in hits)


def test_lines_are_cut_the_same_however_the_chunks_fall() -> None:
    """A line longer than a chunk is gathered from its pieces once (it was joined again at every chunk:
    a 300 MB one-line file held the event loop 147 s); the blocks are those of that earlier cut."""
    import random

    from computer.storage._grep import _lines

    def joined_every_chunk(chunks: list[bytes]) -> list[bytes]:  # the earlier cut, the reference
        out, carry = [], b""
        for chunk in chunks:
            data = carry + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            out.append(data[:cut])
            carry = data[cut + 1 :]
        return [*out, carry] if carry else out

    rng = random.Random(7)
    for _ in range(5_000):
        data = bytes(rng.choice(b"ab\n") for _ in range(rng.randrange(0, 40)))
        cuts = sorted(rng.randrange(0, len(data) + 1) for _ in range(rng.randrange(0, 6)))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        assert list(_lines(chunks)) == joined_every_chunk(chunks), chunks


async def test_a_match_at_the_end_of_a_line_many_chunks_long(fs: FileSystem) -> None:
    line = b"x" * (5 * CHUNK_SIZE + 17) + b"needle" + b"y" * 3
    await fs.write_file("/long.txt", line + b"\nshort needle\n")
    matches = await fs.grep("needle", "/long.txt")
    assert [(m.line, len(m.text)) for m in matches] == [(1, len(line)), (2, len("short needle"))]


_PAGED_TREE = {
    "/p/a.txt": "".join(f"line {i} {'hit' if i % 3 else 'miss'}\n" for i in range(60)),
    "/p/b/c.txt": "hit\nHIT\nno\nhit hit\n" * 5,
    "/p/d.txt": b"x" * (CHUNK_SIZE - 4) + b"\nhit\n" + b"hit\nz\n" * 40,  # matches across a chunk edge
}


@pytest.mark.parametrize("context", [0, 2])
@pytest.mark.parametrize(("pattern", "regex", "ignore_case"), [("hit", False, False), ("h.t$", True, True)])
async def test_pages_are_slices_of_the_whole_result(
    fs: FileSystem,
    monkeypatch: pytest.MonkeyPatch,
    pattern: str,
    regex: bool,
    ignore_case: bool,
    context: int,
) -> None:
    """Every page (offset, limit) is that slice of the whole result, context lines included, and the
    matches before the page are never built: they cost ~2.5 us each when the pager dropped them."""
    await _files(fs, _PAGED_TREE)
    options = {"regex": regex, "ignore_case": ignore_case, "context": context}
    whole = await fs.grep(pattern, "/p", **options)
    assert len(whole) > 90
    built = 0
    original = _grep_module.GrepMatch

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal built
        built += 1
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_grep_module, "GrepMatch", counted)
    for offset in [0, 1, 2, 7, 39, 40, 41, 59, len(whole) - 1, len(whole), len(whole) + 5]:
        for limit in [1, 3, 50]:
            built = 0
            page = await fs.grep(pattern, "/p", offset=offset, limit=limit, **options)
            assert page == whole[offset : offset + limit], (offset, limit)
            assert built <= limit + 1, (
                offset,
                limit,
                built,
            )  # the page (and one more at most), never the offset
        assert (
            await fs.grep(pattern, "/p/d.txt", offset=offset, **options)
            == [m for m in whole if m.path == "/p/d.txt"][offset:]
        )
