"""Property: random sequences of fs operations agree with a simple in-memory reference model."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computer.storage import FileSystem

NAMES = ["a", "b", "%", "é", "a b"]
paths = st.lists(st.sampled_from(NAMES), min_size=0, max_size=3).map(lambda segs: "/" + "/".join(segs))
data = st.sampled_from([b"", b"x", b"hello", b"hello" * 100])

ops = st.one_of(
    st.tuples(st.just("write"), paths, data),
    st.tuples(st.just("mkdir"), paths, st.booleans()),
    st.tuples(st.just("rm"), paths, st.booleans(), st.booleans()),
    st.tuples(st.just("rename"), paths, paths, st.booleans()),
    st.tuples(st.just("copy"), paths, paths, st.booleans()),
    st.tuples(st.just("read"), paths),
    st.tuples(st.just("readdir"), paths),
)


class ModelError(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _parent(p: str) -> str:
    return p.rsplit("/", 1)[0] or "/"


def _within(p: str, root: str) -> bool:
    return root == "/" or p == root or p.startswith(root + "/")


class Model:
    """Paths to ``bytes`` (file) or ``None`` (directory); the reference semantics of SPEC 4."""

    def __init__(self) -> None:
        self.nodes: dict[str, bytes | None] = {"/": None}

    def _walk_dir(self, p: str) -> None:
        """ENOENT / ENOTDIR unless ``p`` is an existing directory (first failing segment decides)."""
        cur = ""
        for seg in [s for s in p.split("/") if s]:
            cur += "/" + seg
            if cur not in self.nodes:
                raise ModelError(errno.ENOENT)
            if self.nodes[cur] is not None:
                raise ModelError(errno.ENOTDIR)

    def _lookup_read(self, p: str) -> bytes | None:
        if p not in self.nodes:
            raise ModelError(errno.ENOENT)
        return self.nodes[p]

    def _children(self, p: str) -> list[str]:
        return [k for k in self.nodes if k != p and _parent(k) == p]

    def write(self, p: str, content: bytes) -> None:
        if p == "/":
            raise ModelError(errno.EISDIR)
        self._walk_dir(_parent(p))
        if p in self.nodes and self.nodes[p] is None:
            raise ModelError(errno.EISDIR)
        self.nodes[p] = content

    def mkdir(self, p: str, recursive: bool) -> None:
        if p == "/":
            if recursive:
                return
            raise ModelError(errno.EEXIST)
        if not recursive:
            self._walk_dir(_parent(p))
            if p in self.nodes:
                raise ModelError(errno.EEXIST)
            self.nodes[p] = None
            return
        segs = [s for s in p.split("/") if s]
        cur = ""
        for i, seg in enumerate(segs):
            cur += "/" + seg
            if cur not in self.nodes:
                self.nodes[cur] = None
            elif self.nodes[cur] is not None:
                raise ModelError(errno.EEXIST if i == len(segs) - 1 else errno.ENOTDIR)

    def rm(self, p: str, recursive: bool, force: bool) -> None:
        if p == "/":
            raise ModelError(errno.EPERM)
        if p not in self.nodes:
            if force:
                return
            raise ModelError(errno.ENOENT)
        if self.nodes[p] is None and self._children(p) and not recursive:
            raise ModelError(errno.ENOTEMPTY)
        for k in [k for k in self.nodes if _within(k, p)]:
            del self.nodes[k]

    def _dest(self, s: str, d: str, overwrite: bool) -> bool:
        """Check a rename/copy destination; True when it is the source itself (no-op)."""
        src_dir = self.nodes[s] is None
        if d == "/":
            if s == "/":
                return True
            if not overwrite:
                raise ModelError(errno.EEXIST)
            raise ModelError(errno.EPERM if src_dir else errno.EISDIR)
        self._walk_dir(_parent(d))
        if src_dir and _within(d, s) and d != s:
            raise ModelError(errno.EINVAL)
        if d not in self.nodes or d == s:
            return d == s
        if not overwrite:
            raise ModelError(errno.EEXIST)
        dst_dir = self.nodes[d] is None
        if src_dir and not dst_dir:
            raise ModelError(errno.ENOTDIR)
        if not src_dir and dst_dir:
            raise ModelError(errno.EISDIR)
        if dst_dir and self._children(d):
            raise ModelError(errno.ENOTEMPTY)
        del self.nodes[d]
        return False

    def _move(self, s: str, d: str, keep: bool) -> None:
        moved = {k: v for k, v in self.nodes.items() if _within(k, s)}
        if not keep:
            for k in moved:
                del self.nodes[k]
        for k, v in moved.items():
            self.nodes[d + k[len(s) :]] = v

    def rename(self, s: str, d: str, overwrite: bool) -> None:
        if s == "/":
            raise ModelError(errno.EPERM)
        self._lookup_read(s)
        if not self._dest(s, d, overwrite):
            self._move(s, d, keep=False)

    def copy(self, s: str, d: str, overwrite: bool) -> None:
        self._lookup_read(s)
        if not self._dest(s, d, overwrite):
            self._move(s, d, keep=True)

    def read(self, p: str) -> bytes:
        content = self._lookup_read(p)
        if content is None:
            raise ModelError(errno.EISDIR)
        return content

    def readdir(self, p: str) -> list[str]:
        if self._lookup_read(p) is not None:
            raise ModelError(errno.ENOTDIR)
        return sorted((k.rsplit("/", 1)[1] for k in self._children(p)), key=lambda n: n.encode())


async def _apply(fs: FileSystem, op: tuple[Any, ...]) -> Any:
    name, *args = op
    if name == "write":
        return await fs.write_file(args[0], args[1])
    if name == "mkdir":
        return await fs.mkdir(args[0], recursive=args[1])
    if name == "rm":
        return await fs.rm(args[0], recursive=args[1], force=args[2])
    if name == "rename":
        return await fs.rename(args[0], args[1], overwrite=args[2])
    if name == "copy":
        return await fs.copy(args[0], args[1], overwrite=args[2])
    if name == "read":
        return await fs.read_file(args[0])
    return [e.name for e in await fs.readdir(args[0])]


def _model_apply(model: Model, op: tuple[Any, ...]) -> Any:
    name, *args = op
    return getattr(model, name)(*args)


async def _run(sequence: list[tuple[Any, ...]]) -> None:
    fs = FileSystem.open(None)
    model = Model()
    try:
        for op in sequence:
            try:
                expected: Any = ("ok", _model_apply(model, op))
            except ModelError as exc:
                expected = ("err", exc.code)
            try:
                got: Any = ("ok", await _apply(fs, op))
            except OSError as exc:
                got = ("err", exc.errno)
            assert got == expected, op
        tree = {p: k for p, k, *_ in fs.manifest("/")}
        assert tree == {p: ("dir" if v is None else "file") for p, v in model.nodes.items() if p != "/"}
        for p, v in model.nodes.items():
            if v is not None:
                assert await fs.read_file(p) == v
        stats = fs.stats()
        files = [v for v in model.nodes.values() if v is not None]
        assert stats["logical_bytes"] == sum(len(v) for v in files)
        # Every distinct non-empty content is stored exactly once; nothing unreferenced is left.
        assert stats["chunks"] == len({v for v in files if v})
    finally:
        fs.close()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=25))
def test_random_operation_sequences_match_the_reference_model(sequence: list[tuple[Any, ...]]) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_run(sequence))
    finally:
        loop.close()
