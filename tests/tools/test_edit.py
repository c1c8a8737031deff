"""The edit tool (SPEC 8 edit, Appendix A, CASES 24, 29-31), over both stores."""

from __future__ import annotations

import json

import pytest

from computer.tools import EditOptions, create_edit_tool

from .conftest import Files


async def edit(files: Files, path: str, *pairs: tuple[str, str], **options: object) -> dict[str, object]:
    return await files.edit(**options).run(
        {"path": path, "edits": [{"oldText": old, "newText": new} for old, new in pairs]}
    )


async def test_edit_replaces_one_line(files: Files) -> None:
    await files.put("/w/todo.txt", "one\ntwo\n")
    result = await edit(files, "/w/todo.txt", ("two", "three"))
    assert await files.get("/w/todo.txt") == b"one\nthree\n"
    assert result["editsApplied"] == 1
    assert result["firstChangedLine"] == 2
    assert result["path"] == "/w/todo.txt"


async def test_edit_returns_unified_patch_with_four_lines_of_context(files: Files) -> None:
    await files.put("/f.txt", "".join(f"l{i}\n" for i in range(1, 21)))
    result = await edit(files, "/f.txt", ("l10\n", "ten\n"))
    patch = str(result["patch"])
    assert patch.startswith("--- /f.txt\n+++ /f.txt\n@@ -6,9 +6,9 @@\n")
    assert " l6\n l7\n l8\n l9\n-l10\n+ten\n l11\n l12\n l13\n l14\n" in patch
    assert "-10 l10" in str(result["diff"]) and "+10 ten" in str(result["diff"])


async def test_edit_batch_matches_every_old_text_against_the_original(files: Files) -> None:
    await files.put("/f.txt", "alpha\nbeta\ngamma\n")
    # The second edit's oldText is the original "beta", not the first edit's output.
    result = await edit(files, "/f.txt", ("alpha", "beta"), ("beta", "BETA"))
    assert await files.get("/f.txt") == b"beta\nBETA\ngamma\n"
    assert result["editsApplied"] == 2


async def test_edit_batch_is_atomic(files: Files) -> None:
    await files.put("/f.txt", "alpha\nbeta\n")
    result = await edit(files, "/f.txt", ("alpha", "ALPHA"), ("missing", "x"))
    assert "edits[1]" in str(result["error"])
    assert await files.get("/f.txt") == b"alpha\nbeta\n"


async def test_edit_keeps_crlf_line_endings(files: Files) -> None:
    await files.put("/f.txt", b"one\r\ntwo\r\nthree\r\n")
    await edit(files, "/f.txt", ("two\nthree", "2\n3\n4"))
    assert await files.get("/f.txt") == b"one\r\n2\r\n3\r\n4\r\n"


async def test_edit_of_mixed_line_endings_keeps_untouched_lines_byte_for_byte(files: Files) -> None:
    await files.put("/f.txt", b"a\r\nb\nc\r\n")
    await edit(files, "/f.txt", ("c", "C"))
    assert await files.get("/f.txt") == b"a\r\nb\nC\r\n"


async def test_edit_keeps_the_bom(files: Files) -> None:
    await files.put("/f.txt", "\ufeffhello\nworld\n".encode())
    await edit(files, "/f.txt", ("hello", "bye"))
    assert await files.get("/f.txt") == "\ufeffbye\nworld\n".encode()


async def test_edit_keeps_the_mode(files: Files) -> None:
    await files.put("/run.sh", "echo hi\n", mode=0o755)
    await edit(files, "/run.sh", ("hi", "bye"))
    assert await files.mode("/run.sh") == 0o755


async def test_edit_keeps_undecodable_bytes_outside_the_match(files: Files) -> None:
    await files.put("/f.bin.txt", b"caf\xe9\nvalue = 1\n")
    await edit(files, "/f.bin.txt", ("value = 1", "value = 2"))
    assert await files.get("/f.bin.txt") == b"caf\xe9\nvalue = 2\n"


async def test_old_text_copied_from_a_read_of_undecodable_bytes_says_why_it_cannot_match(
    files: Files,
) -> None:
    # read shows the Latin-1 byte as U+FFFD; an agent copies that line into oldText. "Read the file
    # again and copy the text" sent it round the same loop: the error now names the cause and the way out.
    await files.put("/menu.txt", b"# caf\xe9 menu\nname = 'caf\xe9'\n")
    shown = (await files.read().run({"path": "/menu.txt"}))["content"]
    assert shown == "# caf\ufffd menu\nname = 'caf\ufffd'"
    copied = shown.splitlines()[1]
    result = await edit(files, "/menu.txt", (copied, "name = 'shop'"))
    error = str(result["error"])
    assert "U+FFFD" in error and "not valid UTF-8" in error and "read the file again" not in error
    # The way out it names works, and the undecodable bytes survive.
    await edit(files, "/menu.txt", ("name = 'caf", "title = 'caf"))
    assert await files.get("/menu.txt") == b"# caf\xe9 menu\ntitle = 'caf\xe9'\n"
    # Text that is simply absent keeps the usual advice, with or without undecodable bytes in the file.
    assert "read the file again" in str((await edit(files, "/menu.txt", ("absent \ufffd", "x")))["error"])
    await files.put("/ok.txt", "valid \ufffd text\n")
    assert "read the file again" in str((await edit(files, "/ok.txt", ("other \ufffd", "x")))["error"])


async def test_fuzzy_trailing_space_matches_and_only_that_span_changes(files: Files) -> None:
    original = "quote = “hi” — ok\nlet target = 1;\nend = ‘x’\n"
    await files.put("/f.js", original)
    result = await edit(files, "/f.js", ("let target = 1; ", "let target = 2;"))
    assert (await files.get("/f.js")).decode() == original.replace("let target = 1;", "let target = 2;")
    assert "“hi” — ok" in str(result["patch"]) and "-let target = 1;" in str(result["patch"])


async def test_fuzzy_ascii_quotes_and_dashes_find_curly_originals_and_keep_neighbours(files: Files) -> None:
    await files.put("/f.txt", "say “hello” – now\nkeep “this”\n")
    await edit(files, "/f.txt", ('say "hello" - now', "say goodbye"))
    assert (await files.get("/f.txt")).decode() == "say goodbye\nkeep “this”\n"


async def test_fuzzy_ligature_matched_by_fi_is_replaced_whole(files: Files) -> None:
    await files.put("/f.txt", "the ﬁle\n")
    await edit(files, "/f.txt", ("the file", "the doc"))
    assert (await files.get("/f.txt")).decode() == "the doc\n"


async def test_fuzzy_lone_f_inside_ligature_is_rejected_as_ambiguous(files: Files) -> None:
    await files.put("/f.txt", "ﬁ\n")
    result = await edit(files, "/f.txt", ("f", "g"))
    assert "larger exact range" in str(result["error"])
    assert (await files.get("/f.txt")).decode() == "ﬁ\n"


async def test_fuzzy_precomposed_matches_decomposed(files: Files) -> None:
    await files.put("/f.txt", "un cafe\u0301 noir\n")
    await edit(files, "/f.txt", ("café", "thé"))
    assert (await files.get("/f.txt")).decode() == "un thé noir\n"


async def test_exact_match_beats_fuzzy_duplicates(files: Files) -> None:
    await files.put("/f.txt", 'x = "a"\nx = “a”\n')
    await edit(files, "/f.txt", ('x = "a"', "y"))
    assert (await files.get("/f.txt")).decode() == "y\nx = “a”\n"


async def test_fuzzy_duplicates_are_not_unique(files: Files) -> None:
    await files.put("/f.txt", "x = “a”\nx = ‘a’\nx = „a“\n")
    result = await edit(files, "/f.txt", ('x = "a"', "y"))
    assert "found 2 times" in str(result["error"])


async def test_fuzzy_needle_ending_in_whitespace_needs_real_whitespace_mid_line(files: Files) -> None:
    await files.put("/f.txt", "x = 1\n")
    await edit(files, "/f.txt", ("x =\u3000", "x = 2"))  # the ideographic space folds to the real one
    assert await files.get("/f.txt") == b"x = 21\n"
    await files.put("/g.txt", "x =1\n")
    result = await edit(files, "/g.txt", ("x =\u3000", "x = 2"))  # "x =" alone is not an occurrence
    assert "not found" in str(result["error"])
    assert await files.get("/g.txt") == b"x =1\n"


async def test_fuzzy_quotes_with_trailing_space_mid_line(files: Files) -> None:
    await files.put("/f.txt", "say “hi” now\n")
    await edit(files, "/f.txt", ('say "hi" ', "say "))
    assert (await files.get("/f.txt")).decode() == "say now\n"


async def test_edit_errors_empty_batch(files: Files) -> None:
    await files.put("/f.txt", "a\n")
    result = await files.edit().run({"path": "/f.txt", "edits": []})
    assert "empty" in str(result["error"]) and "edits" in str(result["error"])


async def test_edit_errors_empty_old_text(files: Files) -> None:
    await files.put("/f.txt", "a\n")
    result = await edit(files, "/f.txt", ("", "x"))
    assert "edits[0].oldText is empty" in str(result["error"])


async def test_edit_errors_not_found(files: Files) -> None:
    await files.put("/f.txt", "a\n")
    result = await edit(files, "/f.txt", ("zzz", "x"))
    assert "not found" in str(result["error"])


async def test_an_edit_below_a_file_says_the_file_is_no_directory(files: Files) -> None:
    """It said "File not found (use write to create it)", and the write it suggested failed too."""
    await files.put("/f.txt", "a\n")
    for path in ("/f.txt/z", "/f.txt/deeper/z"):
        error = str((await edit(files, path, ("a", "b")))["error"])
        assert "Not a directory: /f.txt is a file" in error and "use write" not in error, error
    assert "use write to create it" in str((await edit(files, "/nowhere/z", ("a", "b")))["error"])


async def test_edit_errors_not_unique_with_count(files: Files) -> None:
    await files.put("/f.txt", "dup\ndup\ndup\n")
    result = await edit(files, "/f.txt", ("dup", "x"))
    assert "found 3 times" in str(result["error"])


async def test_edit_errors_overlap_names_both_indices(files: Files) -> None:
    await files.put("/f.txt", "abcdef\n")
    result = await edit(files, "/f.txt", ("xyz", "1"), ("abcd", "1"), ("cdef", "2"))
    error = str(result["error"])
    assert "not found" in error  # edits are checked in order: the missing one is reported first
    result = await edit(files, "/f.txt", ("cdef", "2"), ("abcd", "1"))
    assert "edits[0] and edits[1] overlap" in str(result["error"])


async def test_edit_adjacent_spans_do_not_overlap(files: Files) -> None:
    await files.put("/f.txt", "abcdef\n")
    await edit(files, "/f.txt", ("abc", "1"), ("def", "2"))
    assert await files.get("/f.txt") == b"12\n"


async def test_edit_errors_no_op(files: Files) -> None:
    await files.put("/f.txt", "same\n")
    result = await edit(files, "/f.txt", ("same", "same"))
    assert "No changes" in str(result["error"])


async def test_edit_errors_file_over_cap(files: Files) -> None:
    await files.put("/f.txt", "x" * 200 + "\n")
    result = await edit(files, "/f.txt", ("x", "y"), max_bytes=100)
    assert "100 bytes" in str(result["error"]) and "edit cap" in str(result["error"])


async def test_edit_errors_result_over_cap(files: Files) -> None:
    await files.put("/f.txt", "small\n")
    result = await edit(files, "/f.txt", ("small", "b" * 200), max_bytes=100)
    assert "would become" in str(result["error"])
    assert await files.get("/f.txt") == b"small\n"


async def test_edit_missing_file_is_an_error(files: Files) -> None:
    result = await edit(files, "/nope.txt", ("a", "b"))
    assert "/nope.txt" in str(result["error"])


async def test_edit_accepts_edits_as_a_json_string(files: Files) -> None:
    await files.put("/f.txt", "one\ntwo\n")
    result = await files.edit().run(
        {"path": "/f.txt", "edits": json.dumps([{"oldText": "one", "newText": "1"}])}
    )
    assert result["editsApplied"] == 1
    assert await files.get("/f.txt") == b"1\ntwo\n"


async def test_edit_accepts_top_level_old_and_new_text(files: Files) -> None:
    await files.put("/f.txt", "one\ntwo\n")
    result = await files.edit().run({"path": "/f.txt", "oldText": "two", "newText": "2"})
    assert result["editsApplied"] == 1
    assert await files.get("/f.txt") == b"one\n2\n"


async def test_edit_top_level_old_text_without_new_text_is_an_argument_error(files: Files) -> None:
    await files.put("/f.txt", "one\n")
    result = await files.edit().run({"path": "/f.txt", "oldText": "one"})
    assert "newText" in str(result["error"])
    assert await files.get("/f.txt") == b"one\n"


async def test_edit_invalid_json_string_is_an_argument_error(files: Files) -> None:
    await files.put("/f.txt", "one\n")
    result = await files.edit().run({"path": "/f.txt", "edits": "[{oops"})
    assert "not valid JSON" in str(result["error"])


async def test_edit_huge_diff_is_truncated_and_flagged(files: Files) -> None:
    await files.put("/f.txt", "".join(f"{i}\n" for i in range(3000)))
    new = "".join(f"n{i}\n" for i in range(3000))
    tool = create_edit_tool(files.store, options=EditOptions())
    old = (await files.get("/f.txt")).decode()
    result = await tool.run({"path": "/f.txt", "edits": [{"oldText": old, "newText": new}]})
    assert result["diffTruncated"] is True
    assert "truncated" in str(result["patch"])
    assert len(str(result["patch"])) < 200 * 1024
    assert await files.get("/f.txt") == new.encode()


@pytest.mark.parametrize("name", ["data 50%_*?[x].txt", "émoji 🚀 файл.md", "空 白.txt"])
async def test_edit_unicode_file_names(files: Files, name: str) -> None:
    path = f"/ü/{name}"
    await files.put(path, "a\n")
    result = await edit(files, path, ("a", "b"))
    assert result["path"] == path
    assert await files.get(path) == b"b\n"


async def test_a_new_text_that_is_not_utf8_is_an_error_naming_the_path(files: Files) -> None:
    await files.put("/f.txt", "one two\n")
    result = await files.edit().run({"path": "/f.txt", "oldText": "two", "newText": "\ud800"})
    assert result["error"].startswith("edits[0].newText for /f.txt is not valid UTF-8 text: '\\ud800'"), (
        result
    )
    assert await files.get("/f.txt") == b"one two\n"


@pytest.mark.parametrize("bad", ["caf\udce9", "\ud83d", "ok\udfff!"])
async def test_edit_refuses_lone_surrogates_in_new_text_like_write(files: Files, bad: str) -> None:
    await files.put("/f.txt", b"name = cafe\nraw = \xff\n")
    result = await edit(files, "/f.txt", ("raw = ", "raw: "), ("cafe", bad))
    assert "edits[1].newText for /f.txt is not valid UTF-8 text" in str(result["error"])
    assert await files.get("/f.txt") == b"name = cafe\nraw = \xff\n"
    # The file's own undecodable bytes still survive an edit elsewhere.
    assert "error" not in await edit(files, "/f.txt", ("cafe", "caf\u00e9"))
    assert await files.get("/f.txt") == "name = caf\u00e9\nraw = ".encode() + b"\xff\n"


async def test_edit_caps_the_number_of_edits_in_one_call(files: Files) -> None:
    body = "".join(f"line{i}=old\n" for i in range(120))
    await files.put("/f.txt", body)
    pairs = [(f"line{i}=old", f"line{i}=new") for i in range(101)]
    result = await edit(files, "/f.txt", *pairs, max_edits=100)
    assert "edits has 101 items, over the cap of 100 edits per call (max_edits)" in str(result["error"])
    assert await files.get("/f.txt") == body.encode()
    assert (await edit(files, "/f.txt", *pairs[:100], max_edits=100))["editsApplied"] == 100
    assert (await edit(files, "/f.txt", *pairs[100:], max_edits=1))["editsApplied"] == 1
    assert "at most 10000 edits per call, fewer for a large file" in files.edit().description


async def test_edit_bounds_edits_times_file_size(files: Files, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each edit is searched in the whole file under the path lock: 4,000 edits of a 1.7 MB file held
    it 18 s. A batch over the budget (edits x file bytes) is refused before any search, naming how many
    edits this file allows; the file is unchanged."""
    from computer.tools import edit as edit_module

    monkeypatch.setattr(edit_module, "EDIT_SCAN_BUDGET", 10 * 1300)
    body = "".join(f"line{i:04d}=old\n" for i in range(100))  # 1,300 bytes
    await files.put("/f.txt", body)
    pairs = [(f"line{i:04d}=old", f"line{i:04d}=new") for i in range(11)]
    result = await edit(files, "/f.txt", *pairs)
    assert "11 edits of a 1300-byte file" in str(result["error"]) and "at most 10 edits" in str(
        result["error"]
    )
    assert await files.get("/f.txt") == body.encode()
    assert (await edit(files, "/f.txt", *pairs[:10]))["editsApplied"] == 10
