"""SPEC 4 find and CASES 14-16."""

from __future__ import annotations

import pytest

from computer.storage import FileSystem


async def _files(fs: FileSystem, *paths: str) -> None:
    for path in paths:
        parent = path.rsplit("/", 1)[0] or "/"
        await fs.mkdir(parent, recursive=True)
        await fs.write_file(path, b"x")


async def _paths(fs: FileSystem, directory: str, pattern: str | None = None, **kw: object) -> list[str]:
    return [e.path for e in await fs.find(directory, pattern, **kw)]  # type: ignore[arg-type]


async def test_find_in_empty_directory_is_empty(fs: FileSystem) -> None:
    await fs.mkdir("/e")
    assert await fs.find("/e") == []
    assert await fs.find("/e", "**") == []


async def test_find_without_pattern_lists_everything_depth_first(fs: FileSystem) -> None:
    await _files(fs, "/a/z.ts", "/a/b/2.ts", "/a/1.ts", "/a/b/3.ts")
    entries = await fs.find("/a")
    assert [(e.path, e.type) for e in entries] == [
        ("/a/1.ts", "file"),
        ("/a/b", "dir"),
        ("/a/b/2.ts", "file"),
        ("/a/b/3.ts", "file"),
        ("/a/z.ts", "file"),
    ]
    assert await _paths(fs, "/a", "") == [e.path for e in entries]


async def test_star_stays_within_one_segment(fs: FileSystem) -> None:
    await _files(fs, "/a/x.ts", "/a/b/y.ts")
    assert await _paths(fs, "/a", "*.ts") == ["/a/x.ts"]


async def test_question_mark_matches_one_character(fs: FileSystem) -> None:
    await _files(fs, "/a/a.ts", "/a/ab.ts")
    assert await _paths(fs, "/a", "?.ts") == ["/a/a.ts"]


async def test_double_star_slash_matches_zero_or_more_segments(fs: FileSystem) -> None:
    await _files(fs, "/r/top.md", "/r/one/mid.md", "/r/one/two/deep.md", "/r/one/two/no.txt")
    assert await _paths(fs, "/r", "**/*.md") == ["/r/one/mid.md", "/r/one/two/deep.md", "/r/top.md"]


async def test_dot_is_literal(fs: FileSystem) -> None:
    await _files(fs, "/a/fileXts", "/a/file.ts")
    assert await _paths(fs, "/a", "*.ts") == ["/a/file.ts"]


async def test_regex_characters_are_literal(fs: FileSystem) -> None:
    await _files(fs, "/a/x+(1).ts", "/a/xx(1).ts", "/a/[a].ts", "/a/b.ts")
    assert await _paths(fs, "/a", "x+(1).ts") == ["/a/x+(1).ts"]
    assert await _paths(fs, "/a", "[a].ts") == ["/a/[a].ts"]


async def test_results_never_escape_the_start_directory(fs: FileSystem) -> None:
    await _files(fs, "/a/in.ts", "/ab/out.ts", "/out.ts")
    assert await _paths(fs, "/a", "**") == ["/a/in.ts"]
    assert await _paths(fs, "/a", "../*.ts") == []


async def test_find_missing_is_enoent_and_file_is_enotdir(fs: FileSystem) -> None:
    await _files(fs, "/f")
    with pytest.raises(FileNotFoundError):
        await fs.find("/missing")
    with pytest.raises(NotADirectoryError):
        await fs.find("/f")


async def test_offset_and_limit_count_matches_in_walk_order(fs: FileSystem) -> None:
    await _files(fs, "/a/1.ts", "/a/b/2.ts", "/a/b/3.ts", "/a/z.ts")
    assert await _paths(fs, "/a", "**/*.ts", offset=1, limit=2) == ["/a/b/2.ts", "/a/b/3.ts"]
    assert await _paths(fs, "/a", "**/*.ts", limit=0) == []
    assert await _paths(fs, "/a", "**/*.ts", offset=10) == []


async def test_limit_stops_the_walk_early(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    for d in range(20):
        await fs.mkdir(f"/w/{d:02}")
        for f in range(50):
            await fs.write_file(f"/w/{d:02}/{f:02}", b"")
    before = fs.queries
    assert await _paths(fs, "/w", "**", limit=3) == ["/w/00", "/w/00/00", "/w/00/01"]
    assert fs.queries - before < 10


async def test_exclude_prunes_node_modules_with_bounded_queries(fs: FileSystem) -> None:
    await _files(fs, "/p/src/a.ts", "/p/node_modules_extra/c.ts", "/p/z.ts")
    await fs.mkdir("/p/node_modules/pkg", recursive=True)
    for i in range(100):
        await fs.mkdir(f"/p/node_modules/pkg/{i}")
        for j in range(100):
            await fs.write_file(f"/p/node_modules/pkg/{i}/{j}.ts", b"x")
    assert fs.stats()["files"] >= 10_000
    before = fs.queries
    found = await _paths(fs, "/p", "**/*.ts", exclude=["node_modules", "node_modules/**"])
    assert found == ["/p/node_modules_extra/c.ts", "/p/src/a.ts", "/p/z.ts"]
    assert fs.queries - before < 20
    before = fs.queries
    assert await _paths(fs, "/p", exclude=["node_modules/**"]) == [
        "/p/node_modules",
        "/p/node_modules_extra",
        "/p/node_modules_extra/c.ts",
        "/p/src",
        "/p/src/a.ts",
        "/p/z.ts",
    ]
    assert fs.queries - before < 20


async def test_exclude_single_file_and_combined_excludes(fs: FileSystem) -> None:
    await _files(fs, "/a/keep.ts", "/a/drop.ts", "/a/gen/x.ts", "/a/b/keep2.ts")
    assert await _paths(fs, "/a", "**/*.ts", exclude=["drop.ts"]) == [
        "/a/b/keep2.ts",
        "/a/gen/x.ts",
        "/a/keep.ts",
    ]
    assert await _paths(fs, "/a", "**/*.ts", exclude=["drop.ts", "gen"]) == ["/a/b/keep2.ts", "/a/keep.ts"]
    assert await _paths(fs, "/a", "**/*.ts", exclude=[]) == await _paths(fs, "/a", "**/*.ts")


async def test_exclude_wins_over_pattern(fs: FileSystem) -> None:
    await _files(fs, "/a/x.ts")
    assert await _paths(fs, "/a", "*.ts", exclude=["*.ts"]) == []


async def test_find_lists_symlinks_without_descending(fs: FileSystem) -> None:
    await _files(fs, "/t/inner/f")
    await fs.symlink("/t", "/t/inner/loop")
    entries = await fs.find("/t")
    assert [(e.path, e.type) for e in entries] == [
        ("/t/inner", "dir"),
        ("/t/inner/f", "file"),
        ("/t/inner/loop", "dir"),
    ]


async def test_find_through_symlinked_start_directory(fs: FileSystem) -> None:
    await _files(fs, "/real/a.ts")
    await fs.symlink("/real", "/alias")
    assert await _paths(fs, "/alias", "*.ts") == ["/alias/a.ts"]


async def test_pattern_without_double_star_does_not_read_deeper_levels(fs: FileSystem) -> None:
    await fs.mkdir("/deep")
    for i in range(50):
        await fs.mkdir(f"/deep/{i}")
        await fs.write_file(f"/deep/{i}/x.ts", b"")
    await fs.write_file("/deep/top.ts", b"")
    before = fs.queries
    assert await _paths(fs, "/deep", "*.ts") == ["/deep/top.ts"]
    assert fs.queries - before < 10


async def test_leading_dot_slash_in_pattern_is_relative(fs: FileSystem) -> None:
    await _files(fs, "/a/x.ts", "/a/b/y.ts")
    assert await _paths(fs, "/a", "./*.ts") == ["/a/x.ts"]
