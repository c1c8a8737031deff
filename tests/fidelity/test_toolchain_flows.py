"""Toolchain flows an agent runs call by call, per-call and in a live sandbox, compared where it can be
with the same commands in a plain host directory: git's history operations and the index's stat data,
an archive and a copy of a tree of every kind of entry, and an incremental C build. Each step is its
own exec call; every check is made again after a reopen with fresh backends (a rebuilt mirror)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import computer

from ._support import KINDS, need, ok, opened, run, shell

G = "git -c user.email=a@b.c -c user.name=T"
# What a repository looks like from outside: whole, clean, its refs, stash, worktrees and clone.
GIT_STATE = (
    "cd r && git fsck --strict 2>&1 && git status --porcelain && git diff --stat"
    " && git stash list | wc -l && git branch --format='%(refname:short)'"
    " && git worktree list --porcelain | grep -c '^worktree' && git -C ../wt status --porcelain"
    " && git rev-list --count --all && ls -l x.sh l | cut -c1-10 && readlink l"
    " && git -C ../copy rev-list --count HEAD && git -C ../copy status --porcelain"
)


@pytest.mark.parametrize("live", KINDS)
async def test_git_merge_rebase_stash_worktree_and_gc_across_calls_and_a_reopen(db: Path, live: bool) -> None:
    need("git")
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(
            ws,
            "git init -q -b main r && cd r && for i in 1 2 3; do echo line$i > f$i; done"
            f" && printf '#!/bin/sh\\necho hi\\n' > x.sh && chmod +x x.sh && ln -s f1 l && git add -A && {G} commit -qm base",
        )
        await ok(ws, f"cd r && git checkout -qb feat && echo feat >> f1 && {G} commit -qam feat1")
        await ok(ws, f"cd r && git checkout -q main && echo main >> f1 && {G} commit -qam main1")
        conflict = await run_failing(ws, f"cd r && {G} merge feat")
        assert "CONFLICT (content): Merge conflict in f1" in conflict
        assert (await ok(ws, "cd r && git status --porcelain")).stdout == "UU f1\n"
        await ok(ws, f"cd r && git checkout --theirs f1 && git add f1 && {G} commit -q --no-edit")
        await ok(ws, f"cd r && git checkout -qb topic HEAD~2 && echo t > t && git add t && {G} commit -qm t")
        await ok(ws, f"cd r && {G} rebase -q main && git checkout -q main && {G} merge -q --ff-only topic")
        mode = await ok(ws, "cd r && chmod -x x.sh && git status --porcelain && chmod +x x.sh")
        assert mode.stdout == " M x.sh\n"  # core.fileMode: the executable bit is tracked
        await ok(ws, f"cd r && echo wip >> f2 && {G} stash -q")
        await ok(
            ws, f"cd r && git worktree add -q ../wt feat && cd ../wt && echo w >> f3 && {G} commit -qam w"
        )
        await ok(
            ws,
            "git init -q --bare bare.git && git -C r push -q ../bare.git main && git clone -q -b main bare.git copy",
        )
        await ok(ws, f"cd r && {G} gc -q --aggressive --prune=now")
        packed = await ok(
            ws, "find r/.git/objects -path '*/objects/??/*' | wc -l; ls r/.git/objects/pack/*.pack | wc -l"
        )
        assert packed.stdout == "0\n1\n"  # no loose object left: one pack
        state = await ok(ws, GIT_STATE)
        expected = "1\nfeat\nmain\ntopic\n2\n8\nlrwxrwxrwx\n-rwxr-xr-x\nf1\n5\n"
        assert state.stdout == expected, state.stdout
        # The next call's mirror holds the same files: the index's stat data still match every one
        # (``diff-files`` refreshes nothing; after a reopen, a rebuilt mirror, inodes and ctimes differ
        # and the first ``status`` rehashes the files).
        again = await ok(ws, "git -C r diff-files --name-only && " + GIT_STATE)
        assert again.stdout == expected
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, GIT_STATE)).stdout == expected
        popped = await ok(
            ws, "cd r && git stash pop -q && git status --porcelain && git worktree remove ../wt"
        )
        assert popped.stdout == " M f2\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        final = await ok(ws, "cd r && git status --porcelain && git worktree list | wc -l && echo $(ls ..)")
        assert final.stdout == " M f2\n1\nbare.git copy r\n"


async def run_failing(ws: computer.Workspace, command: str) -> str:
    result = await run(ws, command)
    assert result.status == "failed", (result.status, result.stdout, result.stderr)
    return result.stdout + result.stderr


# A tree of every kind of entry tar and cp -a carry, made in one call (the same script in a plain host
# directory gives the reference listing): modes (sticky, private), hard links across directories,
# symlinks relative, absolute and dangling with their own times, a 200-character name, a sparse file,
# sub-second file times; then an archive of it extracted elsewhere and a ``cp -a`` copy.
TREE = r"""
set -e
umask 022
mkdir -p src/a/b src/priv src/links
chmod 1777 src/a/b
echo secret > src/priv/key && chmod 600 src/priv/key && chmod 700 src/priv
echo data > src/a/f && ln src/a/f src/hard1 && ln src/a/f src/a/b/hard2
ln -s ../a/f src/links/rel && ln -s /etc/hostname src/links/abs && ln -s nowhere/at/all src/links/dangling
touch -h -d @1400000000 src/links/abs
echo long > "src/a/$(printf 'n%.0s' $(seq 200))"
truncate -s 20M src/sparse && printf x | dd of=src/sparse bs=1 seek=10000000 conv=notrunc 2>/dev/null
printf '#!/bin/sh\n' > src/run.sh && chmod 755 src/run.sh
touch -d @1500000000.123456789 src/a/f
touch -d @1300000000 src/a/b src/priv src/links src/a src
tar --sparse -cpf arch.tar src && mkdir out && tar -xpf arch.tar -C out && cp -a src copy && rm arch.tar
"""
# Every entry but the top (whose times the runs set): type, mode, links, size, blocks, mtime to the ms
# (what the workspace keeps) and link target; then which names share an inode.
LISTING = r"""
find src out copy -printf '%p %y %M %n %s %T@ %l\n' | sed -E 's/(\.[0-9]{3})[0-9]* /\1 /' | sort
find src out copy -type f -links +1 -printf '%i %p\n' | sort -k2 | awk '{g[$1] = g[$1] " " $2} END {for (i in g) print "linked:" g[i]}' | sort
"""


def comparable(listing: str) -> str:
    """A listing without what depends on the moment or the filesystem: the times of entries made now
    (not set by the script) and directories' sizes."""
    fixed = {"1300000000", "1400000000", "1500000000"}
    lines = []
    for line in listing.splitlines():
        parts = line.split(" ")
        if len(parts) > 5:
            if parts[5].split(".")[0] not in fixed:
                parts[5] = "now"
            if parts[1] == "d":
                parts[4] = "-"
        lines.append(" ".join(parts))
    return "\n".join(lines)


def on_the_host(directory: Path) -> str:
    """The reference: :data:`TREE` made in a plain host directory, listed."""
    directory.mkdir()
    subprocess.run(["bash", "-c", TREE], cwd=directory, check=True, timeout=60)
    listed = subprocess.run(
        ["bash", "-c", LISTING], cwd=directory, capture_output=True, text=True, timeout=60
    )
    return comparable(listed.stdout)


@pytest.mark.parametrize("live", KINDS)
async def test_tar_and_cp_a_of_every_kind_of_entry_list_as_on_the_host(
    db: Path, tmp_path: Path, live: bool
) -> None:
    need("tar", "truncate")
    reference = on_the_host(tmp_path / "host")
    assert "linked: src/a/b/hard2 src/a/f src/hard1" in reference.splitlines()
    async with opened(db, shell=shell(live), python=False) as ws:
        made = await ok(ws, TREE)
        assert made.skipped == [], made.skipped_reasons
        assert comparable((await ok(ws, LISTING)).stdout) == reference
    async with opened(db, shell=shell(live), python=False) as ws:
        assert comparable((await ok(ws, LISTING)).stdout) == reference


MAKEFILE = """\
OBJ = build/a.o build/b.o build/c.o
app: $(OBJ)
\tgcc -o $@ $(OBJ)
build/%.o: src/%.c src/common.h | build
\tgcc -c -o $@ $<
build:
\tmkdir -p build
"""
SOURCES = {
    "src/common.h": "#define ZERO 0\n",
    "src/a.c": '#include "common.h"\nint b(void);\nint c(void);\nint main(void) { return b() + c(); }\n',
    "src/b.c": '#include "common.h"\nint b(void) { return ZERO; }\n',
    "src/c.c": '#include "common.h"\nint c(void) { return ZERO; }\n',
}


@pytest.mark.parametrize("live", KINDS)
async def test_an_incremental_c_build_rebuilds_exactly_what_changed_across_calls_and_reopens(
    db: Path, live: bool
) -> None:
    """``make`` decides by mtimes: nothing to do after a build, in the next call and after a reopen (a
    mirror rebuilt from the workspace's times); a touched source rebuilds its object and the link; a
    source edited through the workspace, the same; the header, every object."""
    need("make", "gcc")
    nothing = "make -q app; echo $?"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ws.fs.mkdir("/workspace/src")
        await ws.fs.write_file("/workspace/Makefile", MAKEFILE)
        for path, text in SOURCES.items():
            await ws.fs.write_file(f"/workspace/{path}", text)
        built = await ok(ws, "make && ./app && echo ran")
        assert built.stdout.count("gcc -c") == 3 and built.stdout.endswith("ran\n")
        assert (await ok(ws, nothing)).stdout == "0\n"
        assert (
            await ok(ws, "touch src/b.c && make")
        ).stdout == "gcc -c -o build/b.o src/b.c\ngcc -o app build/a.o build/b.o build/c.o\n"
        assert (await ok(ws, nothing)).stdout == "0\n"
        await ws.fs.write_file("/workspace/src/c.c", SOURCES["src/c.c"].replace("ZERO;", "ZERO * 2;"))
        assert (
            await ok(ws, "make")
        ).stdout == "gcc -c -o build/c.o src/c.c\ngcc -o app build/a.o build/b.o build/c.o\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, nothing)).stdout == "0\n"
        header = await ok(ws, "touch src/common.h && make")
        assert header.stdout.count("gcc -c") == 3
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, nothing + "; ./app && echo ran")).stdout == "0\nran\n"


@pytest.mark.parametrize("live", KINDS)
async def test_directories_chmod_ed_back_to_0755_keep_it_through_a_reopen(db: Path, live: bool) -> None:
    """A permissions fix-up (``chmod -R u=rwX,go=rX``) after a private tree: the directories go back to
    0755. Before, a pull stored a directory's mode only when it was not 0755 (the mode a new one gets
    anyway), so one chmod-ed back kept its old mode in the workspace and a reopen showed 0700."""
    listing = "find tree -printf '%p %m\\n' | sort"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "mkdir -p tree/a/b && echo x > tree/a/b/f && chmod -R go-rwx tree && chmod 750 tree/a")
        assert (await ws.fs.stat("/workspace/tree/a")).mode & 0o7777 == 0o750
        await ok(ws, "chmod -R u=rwX,go=rX tree")
        fixed = "tree 755\ntree/a 755\ntree/a/b 755\ntree/a/b/f 644\n"
        assert (await ok(ws, listing)).stdout == fixed
        for path in ("/workspace/tree", "/workspace/tree/a", "/workspace/tree/a/b"):
            assert (await ws.fs.stat(path)).mode & 0o7777 == 0o755, path
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, listing)).stdout == fixed


@pytest.mark.parametrize("live", KINDS)
async def test_make_rebuilds_a_target_its_source_is_newer_than_by_under_a_millisecond_after_a_reopen(
    db: Path, live: bool
) -> None:
    """Sub-millisecond times as ``tar --format=posix``, ``cp -p`` or ``rsync -a`` restore them (and as a
    checkout writes two files): the source 0.4 ms newer than its target. Within the workspace's session
    the mirror keeps the nanoseconds and make rebuilds; after a reopen it must decide the same."""
    need("make")
    question = "make -q out; echo $?"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ws.fs.write_file("/workspace/Makefile", "out: src\n\tcp src out\n")
        made = (
            "echo v1 > out && echo v2 > src && touch -d @1600000000.0001 out && touch -d @1600000000.0005 src"
        )
        assert (await ok(ws, f"{made} && {question}")).stdout == "1\n"
        assert (await ok(ws, question)).stdout == "1\n"
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, question)).stdout == "1\n"
