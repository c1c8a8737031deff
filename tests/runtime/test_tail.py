"""The bounded tail of one stream (CASES 35) against a whole-output reference."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from computer.runtime._tail import OutputTail


def tail_of(data: bytes, *, max_lines: int = 2000, max_bytes: int = 65536, piece: int = 0) -> bytes:
    tail = OutputTail(max_lines, max_bytes)
    tail.hold_head = False
    step = piece or max(1, len(data))
    for i in range(0, len(data), step):
        tail.feed(data[i : i + step])
    return tail.view().data


def test_line_limit_keeps_last_whole_lines() -> None:
    assert tail_of(b"a\nb\nc\nd\ne\n", max_lines=3) == b"c\nd\ne\n"


def test_line_longer_than_byte_limit_is_cut_inside() -> None:
    tail = OutputTail(2000, 4)
    tail.feed(b"x\nabcdefghij")
    view = tail.view()
    assert view.data == b"ghij"
    assert view.partial_line and view.truncated and view.reason == "bytes"


def test_cut_respects_utf8_boundaries() -> None:
    assert tail_of("ééé".encode(), max_bytes=3) == "é".encode()


def test_trailing_newline_ends_the_last_line() -> None:
    tail = OutputTail(2, 100)
    tail.feed(b"a\nb\nc\n")
    view = tail.view()
    assert view.data == b"b\nc\n"
    assert view.total_lines == 3 and view.first_line == 2


def test_unterminated_last_line_counts_as_a_line() -> None:
    tail = OutputTail(2, 100)
    tail.feed(b"a\nb\nc")
    assert tail.view().data == b"b\nc"
    assert tail.total_lines == 3


def test_output_within_limits_is_whole_and_not_truncated() -> None:
    tail = OutputTail(2000, 65536)
    tail.feed(b"".join(b"%d\n" % i for i in range(10)))
    view = tail.view()
    assert not view.truncated and view.first_line == 1 and view.total_lines == 10


def test_five_thousand_lines_keep_lines_3001_to_5000() -> None:
    data = b"".join(b"line %d\n" % i for i in range(1, 5001))
    tail = OutputTail(2000, 65536)
    tail.hold_head = False
    for i in range(0, len(data), 777):
        tail.feed(data[i : i + 777])
    view = tail.view()
    assert view.data.startswith(b"line 3001\n") and view.data.endswith(b"line 5000\n")
    assert (view.first_line, view.total_lines, view.reason) == (3001, 5000, "lines")


def test_memory_stays_bounded_for_a_large_stream() -> None:
    tail = OutputTail(2000, 1024)
    tail.hold_head = False
    for _ in range(10_000):
        tail.feed(b"y" * 1000 + b"\n")
    assert len(tail._buf) <= 2 * 1025 + 1001
    assert tail.total_bytes == 10_010_000


def test_snapshot_view_hides_an_incomplete_utf8_sequence() -> None:
    tail = OutputTail(10, 100)
    tail.feed("aé".encode()[:-1])
    assert tail.view(final=False).data == b"a"


def reference(data: bytes, max_lines: int, max_bytes: int) -> bytes:
    """The spec, straight: last whole lines under both limits, else the end of the last line."""
    lines = data.split(b"\n")
    pieces = [line + b"\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    shown: list[bytes] = []
    size = 0
    for piece in reversed(pieces):
        if len(shown) == max_lines or size + len(piece) > max_bytes:
            break
        shown.insert(0, piece)
        size += len(piece)
    if shown or not pieces:
        return b"".join(shown)
    end = data[-max_bytes:]
    while end and (end[0] & 0xC0) == 0x80:
        end = end[1:]
    return end


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bb", b"\n", "é".encode(), b"\n\n", b"xyz" * 5]), max_size=80).map(
        b"".join
    ),
    max_lines=st.integers(1, 6),
    max_bytes=st.integers(1, 20),
    piece=st.integers(1, 9),
)
def test_tail_matches_reference_for_any_chunking(
    data: bytes, max_lines: int, max_bytes: int, piece: int
) -> None:
    assert tail_of(data, max_lines=max_lines, max_bytes=max_bytes, piece=piece) == reference(
        data, max_lines, max_bytes
    )
