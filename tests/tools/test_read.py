"""The read tool (SPEC 8 read, CASES 25-29), over a workspace store and a custom directory store."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from computer import Workspace
from computer.tools import ReadOptions, WorkspaceFileStore, create_read_tool, create_tools

from .conftest import Files
from .directory_store import DirectoryFileStore

THREE = b"first\nsecond\nthird\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


async def test_read_whole_small_file_is_complete_with_total_lines(files: Files) -> None:
    await files.put("/w/f.txt", THREE)
    result = await files.read().run({"path": "/w/f.txt"})
    assert result == {
        "path": "/w/f.txt",
        "content": "first\nsecond\nthird",
        "startLine": 1,
        "endLine": 3,
        "totalLines": 3,
        "truncated": False,
    }


async def test_read_max_lines_truncates_with_both_continuations(files: Files) -> None:
    await files.put("/f.txt", THREE)
    result = await files.read(max_lines=2).run({"path": "/f.txt"})
    assert result["content"] == "first\nsecond"
    assert result["truncated"] is True
    assert result["totalLines"] is None
    assert result["nextOffset"] == 3
    assert result["nextByteOffset"] == 13


async def test_read_limit_one_gives_next_byte_offset_after_first_line(files: Files) -> None:
    await files.put("/f.txt", THREE)
    result = await files.read().run({"path": "/f.txt", "limit": 1})
    assert (result["content"], result["nextOffset"], result["nextByteOffset"]) == ("first", 2, 6)


async def test_read_limit_is_capped_by_max_lines(files: Files) -> None:
    await files.put("/f.txt", THREE)
    result = await files.read(max_lines=1).run({"path": "/f.txt", "limit": 50})
    assert result["content"] == "first"
    assert result["nextOffset"] == 2


async def test_read_byte_continuation_does_not_read_earlier_bytes(tmp_path: Path) -> None:
    store = DirectoryFileStore(tmp_path)
    (tmp_path / "f.txt").write_bytes(THREE)
    result = await create_read_tool(store).run({"path": "/f.txt", "offset": 2, "byteOffset": 6, "limit": 1})
    assert result["content"] == "second"
    assert result["startLine"] == 2
    assert result["nextOffset"] == 3 and result["nextByteOffset"] == 13
    assert store.bytes_read <= len(THREE) - 6


async def test_read_continuation_opens_one_ranged_stream_at_the_byte(workspace) -> None:  # type: ignore[no-untyped-def]
    await workspace.fs.write_file("/f.txt", THREE)
    calls: list[tuple[int, int | None]] = []

    class CountingStore(WorkspaceFileStore):
        def read_chunks(self, path, byte_offset=0, byte_length=None):  # type: ignore[no-untyped-def]
            calls.append((byte_offset, byte_length))
            return super().read_chunks(path, byte_offset, byte_length)

    tool = create_read_tool(CountingStore(workspace))
    result = await tool.run({"path": "/f.txt", "offset": 2, "byteOffset": 6})
    assert result["content"] == "second\nthird"
    assert result["totalLines"] == 3
    assert len(calls) == 1 and calls[0][0] == 6


async def test_read_byte_offset_zero_with_offset_rescans_from_start(files: Files) -> None:
    await files.put("/f.txt", THREE)
    result = await files.read().run({"path": "/f.txt", "offset": 2, "byteOffset": 0, "limit": 1})
    assert result["content"] == "second"
    assert result["startLine"] == 2
    assert result["nextByteOffset"] == 13


async def test_read_offset_without_byte_offset_counts_lines(files: Files) -> None:
    await files.put("/f.txt", THREE)
    result = await files.read().run({"path": "/f.txt", "offset": 3})
    assert result["content"] == "third"
    assert (result["startLine"], result["endLine"], result["totalLines"]) == (3, 3, 3)


async def test_read_positive_byte_offset_without_offset_is_an_error(files: Files) -> None:
    await files.put("/f.txt", THREE)
    result = await files.read().run({"path": "/f.txt", "byteOffset": 6})
    assert "byteOffset" in result["error"] and "offset" in result["error"]


async def test_read_offset_past_end_names_line_count(files: Files) -> None:
    await files.put("/f.txt", THREE)
    result = await files.read().run({"path": "/f.txt", "offset": 4})
    assert "3 lines" in result["error"]


async def test_read_stale_byte_continuation_past_eof_is_an_error(files: Files) -> None:
    await files.put("/f.txt", b"short\n")
    result = await files.read().run({"path": "/f.txt", "offset": 7, "byteOffset": 100})
    assert "error" in result
    assert "byteOffset 100" in result["error"]


async def test_read_first_line_over_max_bytes_names_the_cap(files: Files) -> None:
    await files.put("/f.txt", b"abcdef\n")
    result = await files.read(max_bytes=3).run({"path": "/f.txt"})
    assert "3-byte" in result["error"]


async def test_read_max_bytes_stops_at_a_whole_line(files: Files) -> None:
    await files.put("/f.txt", b"aaaa\nbbbb\ncccc\n")
    result = await files.read(max_bytes=10).run({"path": "/f.txt"})
    assert result["content"] == "aaaa\nbbbb"
    assert (result["nextOffset"], result["nextByteOffset"]) == (3, 10)
    follow = await files.read(max_bytes=10).run(
        {"path": "/f.txt", "offset": result["nextOffset"], "byteOffset": result["nextByteOffset"]}
    )
    assert follow["content"] == "cccc"
    assert follow["truncated"] is False and follow["totalLines"] == 3


async def test_read_line_truncation_by_bytes_respects_utf8(files: Files) -> None:
    await files.put("/f.txt", "ééé\n")
    result = await files.read(line_truncation={"bytes": 5}).run({"path": "/f.txt"})
    assert result["content"] == "éé... (truncated)"


async def test_read_line_truncation_by_chars_counts_code_points(files: Files) -> None:
    await files.put("/f.txt", "a😀bc")
    result = await files.read(line_truncation={"chars": 2}).run({"path": "/f.txt"})
    assert result["content"] == "a😀... (truncated)"


async def test_read_line_truncation_keeps_a_huge_line_bounded(files: Files) -> None:
    await files.put("/f.txt", b"x" * 3_000_000 + b"\nnext\n")
    result = await files.read(line_truncation={"chars": 10}).run({"path": "/f.txt"})
    assert result["content"] == "xxxxxxxxxx... (truncated)\nnext"
    assert result["totalLines"] == 2


async def test_read_line_numbers_prefix_each_line(files: Files) -> None:
    await files.put("/f.txt", "one\ntwo\n")
    result = await files.read(include_line_numbers=True).run({"path": "/f.txt"})
    assert result["content"] == "1\tone\n2\ttwo"


async def test_read_line_numbers_continue_from_offset(files: Files) -> None:
    await files.put("/f.txt", THREE)
    result = await files.read(include_line_numbers=True).run({"path": "/f.txt", "offset": 2, "limit": 1})
    assert result["content"] == "2\tsecond"


async def test_read_options_accept_model_or_dict(files: Files) -> None:
    await files.put("/f.txt", THREE)
    by_model = create_read_tool(files.store, options=ReadOptions(max_lines=1))
    by_dict = create_read_tool(files.store, **{"max_lines": 1})
    assert (await by_model.run({"path": "/f.txt"}))["content"] == "first"
    assert (await by_dict.run({"path": "/f.txt"}))["content"] == "first"


async def test_read_last_line_without_newline_counts(files: Files) -> None:
    await files.put("/f.txt", b"a\nb")
    result = await files.read().run({"path": "/f.txt"})
    assert (result["content"], result["totalLines"]) == ("a\nb", 2)


async def test_read_empty_file_is_empty_complete_result(files: Files) -> None:
    await files.put("/f.txt", b"")
    tool = files.read()
    result = await tool.run({"path": "/f.txt"})
    assert (result["content"], result["totalLines"], result["truncated"]) == ("", 0, False)
    # An empty read goes to the model as JSON, not as an empty text.
    assert json.loads(tool.to_model_output(result)[0]["text"]) == result


async def test_read_crlf_keeps_every_byte_of_each_line(files: Files) -> None:
    await files.put("/f.txt", b"one\r\ntwo\r\n")
    result = await files.read().run({"path": "/f.txt"})
    assert result["content"] == "one\r\ntwo\r"
    assert result["totalLines"] == 2


async def test_read_missing_file_is_an_error_naming_the_path(files: Files) -> None:
    result = await files.read().run({"path": "/nope.txt"})
    assert "/nope.txt" in result["error"]


async def test_read_directory_is_an_error(files: Files) -> None:
    await files.put("/d/x.txt", b"x")
    result = await files.read().run({"path": "/d"})
    assert "directory" in result["error"].lower()


async def test_read_png_by_magic_is_an_image_with_base64(files: Files) -> None:
    await files.put("/pic", PNG)
    result = await files.read().run({"path": "/pic"})
    assert (result["kind"], result["mediaType"], result["size"]) == ("image", "image/png", len(PNG))
    assert base64.b64decode(result["data"]) == PNG


async def test_read_uppercase_jpg_extension_is_an_image(files: Files) -> None:
    await files.put("/photo.JPG", b"not really a jpeg")
    result = await files.read().run({"path": "/photo.JPG"})
    assert (result["kind"], result["mediaType"]) == ("image", "image/jpeg")


async def test_read_extensionless_pdf_magic_is_a_file(files: Files) -> None:
    await files.put("/report", b"%PDF-1.7\n...")
    result = await files.read().run({"path": "/report"})
    assert (result["kind"], result["mediaType"]) == ("file", "application/pdf")


async def test_read_svg_is_text(files: Files) -> None:
    await files.put("/logo.svg", '<svg xmlns="http://www.w3.org/2000/svg"/>\n')
    result = await files.read().run({"path": "/logo.svg"})
    assert result["content"] == '<svg xmlns="http://www.w3.org/2000/svg"/>'


async def test_read_latin1_byte_in_text_stays_text(files: Files) -> None:
    await files.put("/f.txt", b"caf\xe9\n")
    result = await files.read().run({"path": "/f.txt"})
    assert result["content"] == "caf\ufffd"


async def test_read_mostly_invalid_utf8_is_unsupported_binary(files: Files) -> None:
    await files.put("/blob", b"\xff\xfe\xfd\xfc\xfb")
    result = await files.read().run({"path": "/blob"})
    assert result == {
        "path": "/blob",
        "kind": "binary",
        "unsupported": True,
        "mediaType": "application/octet-stream",
    }


async def test_read_nul_byte_is_unsupported_binary(files: Files) -> None:
    await files.put("/f.txt", b"a\0b")
    result = await files.read().run({"path": "/f.txt"})
    assert result["kind"] == "binary" and result["unsupported"] is True


async def test_read_image_over_max_model_bytes_reads_at_most_cap_plus_one(tmp_path: Path) -> None:
    store = DirectoryFileStore(tmp_path)
    (tmp_path / "big.png").write_bytes(PNG * 10)
    result = await create_read_tool(store, max_model_bytes=1000).run({"path": "/big.png"})
    assert "1000" in result["error"] and "max_model_bytes" in result["error"]
    assert store.bytes_read <= 1001


async def test_read_sniffed_image_over_max_model_bytes_is_an_error(files: Files) -> None:
    await files.put("/big", PNG * 10)
    result = await files.read(max_model_bytes=1000).run({"path": "/big"})
    assert "max_model_bytes" in result["error"]


async def test_read_empty_image_is_an_error(files: Files) -> None:
    await files.put("/empty.png", b"")
    result = await files.read().run({"path": "/empty.png"})
    assert "empty" in result["error"]


async def test_model_output_of_complete_text_is_plain_text(files: Files) -> None:
    await files.put("/f.txt", THREE)
    tool = files.read()
    result = await tool.run({"path": "/f.txt"})
    assert tool.to_model_output(result) == [{"type": "text", "text": "first\nsecond\nthird"}]


async def test_model_output_of_truncated_or_positioned_text_is_json(files: Files) -> None:
    await files.put("/f.txt", THREE)
    tool = files.read()
    truncated = await tool.run({"path": "/f.txt", "limit": 1})
    positioned = await tool.run({"path": "/f.txt", "offset": 2})
    for result in (truncated, positioned):
        (part,) = tool.to_model_output(result)
        assert json.loads(part["text"]) == result


async def test_model_output_of_image_is_text_plus_captured_image_part(files: Files) -> None:
    await files.put("/a/pic.png", PNG)
    tool = files.read()
    result = await tool.run({"path": "/a/pic.png"})
    await files.put("/a/pic.png", b"changed later")  # the conversion must not look at the file again
    text, image = tool.to_model_output(result)
    assert text["type"] == "text" and "/a/pic.png" in text["text"]
    assert image == {
        "type": "image",
        "media_type": "image/png",
        "data": base64.b64encode(PNG).decode(),
        "filename": "pic.png",
    }


async def test_model_output_of_pdf_is_a_file_part(files: Files) -> None:
    await files.put("/doc.pdf", b"%PDF-1.4 tiny")
    tool = files.read()
    parts = tool.to_model_output(await tool.run({"path": "/doc.pdf"}))
    assert parts[1]["type"] == "file" and parts[1]["filename"] == "doc.pdf"


async def test_paging_through_a_file_with_continuations_returns_every_line_once(files: Files) -> None:
    lines = [f"line {i} " + "é" * (i % 7) for i in range(1, 1201)]
    await files.put("/big.txt", "\n".join(lines) + "\n")
    tool = files.read(max_lines=97, max_bytes=2000)
    seen: list[str] = []
    args: dict[str, object] = {"path": "/big.txt"}
    for _ in range(1000):
        result = await tool.run(args)
        seen.extend(result["content"].split("\n"))
        if not result["truncated"]:
            assert result["totalLines"] == 1200
            break
        args = {"path": "/big.txt", "offset": result["nextOffset"], "byteOffset": result["nextByteOffset"]}
    assert seen == lines


async def test_read_cap_error_quotes_the_size_that_was_over_the_cap(files: Files) -> None:
    # 40 undecodable bytes are 120 bytes as U+FFFD: over a 100-byte cap although the raw line is not.
    await files.put("/f.txt", b"x" * 200 + b"\n" + b"\xff" * 40 + b"\ntail\n")
    result = await files.read(max_bytes=100).run({"path": "/f.txt", "offset": 2})
    assert "Line 2 of /f.txt is 40 bytes but 120 bytes as read shows it" in result["error"], result
    assert "U+FFFD" in result["error"] and "over the 100-byte read cap" in result["error"]
    # A line of exactly the cap is over it once its line number is prefixed.
    await files.put("/g.txt", b"0123456789\n")
    numbered = await files.read(max_bytes=10, include_line_numbers=True).run({"path": "/g.txt"})
    assert "is 10 bytes but 12 bytes as read shows it" in numbered["error"], numbered
    assert "(its line number is prefixed)" in numbered["error"]
    # A line over the cap raw keeps its plain size.
    await files.put("/h.txt", b"abcdefghijklmnop\n")
    plain = await files.read(max_bytes=10).run({"path": "/h.txt"})
    assert "Line 1 of /h.txt is 16 bytes, over the 10-byte read cap" in plain["error"], plain


async def test_write_cap_error_gives_exact_sizes(files: Files) -> None:
    cap = 2 * 1024 * 1024
    result = await files.write().run({"path": "/big", "content": "x" * (cap + 1)})
    assert f"content is {cap + 1} bytes (2 MiB), over the 2 MiB ({cap}-byte) write cap" in result["error"]


async def test_every_tool_names_the_path_asked_through_a_dangling_link(workspace: Workspace) -> None:
    """An error through a dangling link named the link's target, a path the agent never sent."""
    fs = workspace.fs
    await fs.mkdir("/workspace", recursive=True)
    await fs.symlink("/workspace/nowhere/target.txt", "/workspace/link")
    await fs.symlink("/workspace/missing-dir", "/workspace/dir-link")
    tools = create_tools(workspace)
    calls = [
        ("read", {"path": "/workspace/link"}, "/workspace/link"),
        ("ls", {"path": "/workspace/dir-link"}, "/workspace/dir-link"),
        ("find", {"path": "/workspace/dir-link", "pattern": "*"}, "/workspace/dir-link"),
        ("grep", {"query": "x", "path": "/workspace/link"}, "/workspace/link"),
        ("write", {"path": "/workspace/link", "content": "x"}, "/workspace/link"),
        ("read", {"path": "/workspace/dir-link/f"}, "/workspace/dir-link/f"),
    ]
    for name, args, asked in calls:
        error = (await tools[name].run(args))["error"]
        assert error.endswith(f": {asked}"), (name, error)
        assert "a symbolic link on the way leads to /workspace/" in error, (name, error)
