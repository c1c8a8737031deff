"""The sandbox's seccomp filter: the kernel interfaces behind most local privilege escalations, which no
ordinary program needs, fail with ``EPERM`` (a deny-list in the spirit of Docker's default profile).

bubblewrap loads the filter (``--seccomp FD``, a compiled BPF program read from the descriptor) after
it built the sandbox (its mounts, ``pivot_root``, the user namespace's maps, ``--disable-userns``'s
nested user namespace and its check) and just before it execs the command, in its pid 1 reaper too
(after its fork, which makes no namespace); so the sandbox's own setup is unaffected and nothing
after it escapes the filter (every child inherits it, and a ptrace tracer cannot change a call past
it since Linux 4.8).

:data:`ABSENT` (``memfd_secret``) fails with ``ENOSYS``, as on a kernel without it: see there.

Setting extended attributes (:data:`NO_XATTRS`) and preallocating past a file's end fail with
``EOPNOTSUPP``: see there (sandbox-only state the host's tmpfs keeps outside every budget).

Denied: :data:`DENIED`. ``EPERM``, not a kill: programs that probe (io_uring in newer runtimes,
keyctl in some libraries) fall back as they do under Docker. Allowed on purpose: ``ptrace`` and
``process_vm_*`` (gdb and strace are legitimate inside a sandbox), ``personality`` (its dangerous
flags matter for setuid programs, which the kernel clears them for and the sandbox has none of:
``no_new_privs``, every mount ``nosuid``; gdb sets ``ADDR_NO_RANDOMIZE``), ``setns`` (the sandbox
has no capabilities, and sees no namespace but its own), ``unshare`` and ``clone`` without
``CLONE_NEWUSER`` (the other namespaces need capabilities the sandbox has not).

New user namespaces (:data:`USERNS_CALLS`): ``unshare`` and ``clone`` whose flags hold
``CLONE_NEWUSER`` fail with ``EPERM`` (an argument-masked rule: the flags are argument 0 of both on
x86_64 and aarch64 and their compat ABIs), ``clone3`` with ``ENOSYS`` whatever it asks (its flags are
in a struct seccomp cannot read; glibc's ``pthread_create`` and ``posix_spawn`` then fall back to
``clone``, as under Docker's default profile, which does the same). A program's own user namespace
(``unshare -Ur``) gave it a uid 0 with every capability over its new namespaces: the kernel surface
behind most local privilege escalations. Decision: these rules are in the filter ALWAYS, not only
where bubblewrap lacks ``--disable-userns`` (0.8+; Ubuntu 22.04 ships 0.6.1): one filter per
process whatever the host's bubblewrap, the same answer on every host (``EPERM``, where
``--disable-userns`` alone gives ``ENOSPC``), and a second lock should the first fail (it rests on a
``max_user_namespaces`` of 1 in the sandbox's namespace). bubblewrap's own setup is unaffected: it
makes every namespace before the filter applies (above). Cost: clone and unshare run the filter's
argument check (a few instructions); each ``pthread_create`` and ``posix_spawn`` one failed
``clone3`` more (``benchmarks/seccomp_bench.py``). Given up: what only ``clone3`` offers
(``CLONE_INTO_CGROUP``, ``set_tid``), as under Docker. On another machine (s390 has clone's flags in
argument 1) the rules are left out and ``Sandbox.isolation`` says what holds.

The filter covers the machine's compat ABIs too (x86 and x32 on x86_64, arm on aarch64, as Docker's
profile does): a 32-bit program keeps working and ``int 0x80`` is no way around it. libseccomp gives
the numbers per architecture and the BPF; an ABI it cannot add is killed by the filter's
bad-architecture action instead.

Decision: libseccomp (the C library; in Debian's base system, since apt depends on it) through
ctypes, in this module: eight calls of a stable C ABI. Not the ``pyseccomp`` package (PyPI 0.1.2,
last release January 2021, one author): a 491-line binding of the whole API whose import runs
``ldconfig -p`` (``ctypes.util.find_library``) and raises when libseccomp is missing, for the same
eight calls; libseccomp's own Python bindings (``python3-seccomp``) are built for the system
interpreter only. Where libseccomp is missing or fails, :func:`compiled` says why and sandboxes run
without the filter (``Sandbox.isolation`` says so), never fail.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import logging
import os
import platform
import struct
from dataclasses import dataclass

__all__ = [
    "ABSENT",
    "AF_VSOCK",
    "CLONE_NEWUSER",
    "DENIED",
    "HUGE_PAGE_RULES",
    "NO_XATTRS",
    "USERNS_CALLS",
    "SeccompFilter",
    "compiled",
    "filter_fd",
]

log = logging.getLogger(__name__)

DENIED: tuple[str, ...] = (
    # The kernel keyring (not namespaced; a long line of CVEs).
    "keyctl",
    "add_key",
    "request_key",
    # eBPF, perf events, userfaultfd (the staple of exploits' race windows), io_uring: the surfaces
    # behind most recent local privilege escalations.
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    # Linux native AIO contexts: one count for the whole host (``fs.aio-max-nr``, 65,536 events), in no
    # namespace nor cgroup: one ``io_setup(65536)`` in a sandbox took all of it, and every other
    # workspace's (and the host's own databases') ``io_setup`` failed ``EAGAIN`` while it lived. Refused
    # as ``fanotify_init`` is; POSIX AIO (glibc's, threads) is untouched, libaio users fall back.
    "io_setup",
    # The host's kernel, swap, accounting and power: modules, kexec, reboot.
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "query_module",
    "get_kernel_syms",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    # Setting the host's clock. Not adjtimex/clock_adjtime: they read it too (glibc's ntp_gettime,
    # ntpstat), as Docker's profile allows, and their writes need CAP_SYS_TIME, which nothing inside has.
    "settimeofday",
    "stime",
    "clock_settime",
    # Mounts, old and new API: bubblewrap made the sandbox's before the filter applies.
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    # File handles (the 2014 container breakout), the kernel log (addresses), I/O ports, quotas.
    "open_by_handle_at",
    "syslog",
    "iopl",
    "ioperm",
    "quotactl",
    "quotactl_fd",
    # fanotify: a group and its marks are counted per host uid (128 groups here), every sandbox's
    # together: one program holding them all failed fanotify_init in every other workspace. Nothing
    # unprivileged needs it (file watchers use inotify); Docker's profile allows it to CAP_SYS_ADMIN only.
    "fanotify_init",
    # Obsolete: nothing current calls them.
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    "nfsservctl",
    "vm86",
    "vm86old",
    "lookup_dcookie",
)
# Calls that fail with ``ENOSYS``, as on a kernel without them. ``memfd_secret`` (Linux 5.14; on by
# default since 6.5) takes each page it backs out of the kernel's direct map, splitting the huge
# pages that map the host's memory for every process: 200 one-page secrets of one program raised this
# host's ``direct_map_level2_splits`` from 5 to 72 and ``direct_map_level3_splits`` (1 GiB pages)
# from 0 to 6, and the kernel never merges them back (its ``_collapses`` stayed 0): a slower host for
# as long as it runs (the reason it was off by default first). ``ENOSYS`` is what a host without it
# answers (``secretmem.enable=0``), which the few programs that try it take as "not here".
ABSENT: tuple[str, ...] = ("memfd_secret",)
# Setting extended attributes fails with ``EOPNOTSUPP``, as on a filesystem without them: the workspace
# keeps none, and on tmpfs (Linux 6.6+) a file's ``user.`` attributes have no size limit: a program hung
# 190 MB on three empty files of its mirror each run (charged to that run's memory group only), which
# the warm mirror then kept outside the scratch budget (it counts sizes and entries): four runs held
# 751 MB of the host's memory in 21 entries of 371 bytes. ``setxattrat`` (Linux 6.13) is unknown to
# libseccomp before 2.6: it is then refused by number ahead of libseccomp's program (``_late_prefix``).
# Reading and removing attributes stay allowed (``cp -a``, ``tar``, ``rsync -X``, ``shutil.copystat``
# take ``EOPNOTSUPP`` as "not supported here" and go on).
NO_XATTRS: tuple[str, ...] = ("setxattr", "lsetxattr", "fsetxattr", "setxattrat")
# Preallocating past a file's end (``fallocate`` with ``FALLOC_FL_KEEP_SIZE`` and without
# ``FALLOC_FL_PUNCH_HOLE``, its mode argument 1 on every ABI) fails with ``EOPNOTSUPP`` too, as on a
# filesystem that cannot: tmpfs gives the file pages (the host's memory) while its size stays, and the
# warm mirror kept them past the scratch budget, which counts sizes: four runs of ``fallocate -n -l
# 200M`` held 821 MB in 5 entries counted as 371 bytes. An allocation that grows the file (mode 0, what
# ``posix_fallocate`` asks: its size counts) and punching holes stay.
_KEEP_SIZE, _PUNCH_HOLE = 0x01, 0x02
# Calls newer than some libseccomp, by number: the same on every ABI this module covers (the numbers
# past 424 are shared; x32's with its bit), per audit architecture of a machine and its compat ABIs.
_LATE_NUMBERS = {"setxattrat": 463}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "x86": 0x40000003, "aarch64": 0xC00000B7, "arm": 0x40000028}
_X32_BIT = 0x40000000
CLONE_NEWUSER = 0x10000000
# The calls that make user namespaces, refused by argument (see the module's docstring).
USERNS_CALLS: tuple[str, ...] = ("unshare", "clone", "clone3")
# clone's argument holding its flags, per machine (its compat ABIs' too: x86, x32 and arm have them
# first as well); a machine not named here gets no user namespace rules.
_CLONE_FLAGS_ARG = {"x86_64": 0, "aarch64": 0}
_MASKED_EQ = 7  # SCMP_CMP_MASKED_EQ: (argument & datum_a) == datum_b
# Virtual machine sockets are refused (``socket`` with this family: ``EPERM``), as Docker's default
# profile does. The vsock address space is the machine's, in no network namespace: in a VM with a
# vsock device (Firecracker, Kata, cloud VMs) a sandbox with no network could reach the hypervisor's
# services (CID 2) and bind the VM's ports (``bind((VMADDR_CID_ANY, port))``), squatting a port an
# agent of the VM serves on, as its own; the host then got ``EADDRINUSE``. On x86's i386 ABI
# libseccomp refuses ``socketcall(SYS_SOCKET, ...)`` whatever the family (its arguments are behind a
# pointer no filter reads): a 32-bit program of glibc's i386 build makes no socket at all (the direct
# ``socket`` call, musl's, keeps every other family). The sandbox ships no 32-bit libraries; a way
# around the rule weighed more than such programs' sockets.
AF_VSOCK = 40
# Huge pages (hugetlb) are refused (:data:`HUGE_PAGE_RULES`), as on a host that keeps none: the pool is
# the host's (``vm.nr_hugepages``, reserved for its databases or DPDK), cgroup v1 charges it to no memory
# group, and this host mounts no ``hugetlb`` controller: a sandbox mapped the whole pool (2 of 2 pages
# reserved for the test) outside its group, and every other user of it (a PostgreSQL ``huge_pages=on``)
# then failed. Transparent huge pages are untouched (ordinary memory, in the group). The i386 ABI's
# ``old_mmap`` takes its flags behind a pointer no filter reads: a 32-bit program could still (the
# sandbox ships no 32-bit libraries; glibc's own i386 build calls ``mmap2``, which is refused).
MAP_HUGETLB, MFD_HUGETLB, SHM_HUGETLB = 0x40000, 0x4, 0x800
# (call, argument holding its flags, the flag, what it fails with): ``ENOMEM`` as an empty pool answers
# a mapping or a segment; ``EINVAL`` as a kernel without hugetlbfs answers ``memfd_create``.
HUGE_PAGE_RULES: tuple[tuple[str, int, int, int], ...] = (
    ("mmap", 3, MAP_HUGETLB, errno.ENOMEM),
    ("mmap2", 3, MAP_HUGETLB, errno.ENOMEM),
    ("memfd_create", 1, MFD_HUGETLB, errno.EINVAL),
    ("shmget", 2, SHM_HUGETLB, errno.ENOMEM),
)
# The compat ABIs of a machine (Docker's profile's "archMap").
_COMPAT = {"x86_64": ("x86", "x32"), "aarch64": ("arm",)}
_LIBRARY = "libseccomp.so.2"
_ALLOW = 0x7FFF0000  # SCMP_ACT_ALLOW
_NR_ERROR = -1  # __NR_SCMP_ERROR: no such system call on any architecture libseccomp knows
# SCMP_FLTATR_CTL_OPTIMIZE = 2 (libseccomp 2.5+): a binary tree of the system calls, not a list. The
# kernel runs the filter for every call number when it loads it (its cache of calls always allowed,
# which later spares them the filter): with a list that took bubblewrap ~0.35 ms per sandbox, ~0.15
# ms with the tree (a bare ``bwrap true`` here: ~4.0 ms without a filter).
_OPTIMIZE, _BINARY_TREE = 8, 2
# Classic BPF opcodes (``_late_prefix``): BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JA,
# BPF_RET|BPF_K.
_LD_ABS, _JEQ, _JA, _RET = 0x20, 0x15, 0x05, 0x06


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO(code)


@dataclass(frozen=True, slots=True)
class SeccompFilter:
    """The filter of this process's sandboxes: ``program`` (the BPF bubblewrap loads), or None and
    ``missing`` (why there is none here)."""

    program: bytes | None
    denied: tuple[str, ...] = ()  # the names of :data:`DENIED` this machine's architecture has
    compat: tuple[str, ...] = ()  # compat ABIs the filter covers besides the native one
    missing: str = ""
    absent: tuple[str, ...] = ()  # the names of :data:`ABSENT` it has (``ENOSYS``)
    no_userns: bool = False  # :data:`USERNS_CALLS` refuse new user namespaces
    no_xattrs: bool = False  # every call of :data:`NO_XATTRS` fails with ``EOPNOTSUPP``
    no_prealloc: bool = False  # ``fallocate`` past a file's end (``FALLOC_FL_KEEP_SIZE``) too
    no_vsock: bool = False  # ``socket(AF_VSOCK, ...)`` fails with ``EPERM`` (:data:`AF_VSOCK`)
    no_huge_pages: bool = False  # every rule of :data:`HUGE_PAGE_RULES` holds

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.program or b"").hexdigest()[:32]


@functools.cache
def compiled() -> SeccompFilter:
    """The filter, compiled once per process (~1 ms, the library's load included)."""
    try:
        lib = _load()
    except (OSError, AttributeError) as exc:
        log.warning("no seccomp filter for sandboxes: %s not usable (%s)", _LIBRARY, exc)
        return SeccompFilter(None, missing=f"{_LIBRARY} not found")
    try:
        return _compile(lib)
    except OSError as exc:
        log.warning("no seccomp filter for sandboxes: %s", exc)
        return SeccompFilter(None, missing=str(exc))


def filter_fd(program: bytes) -> int:
    """A descriptor to read ``program`` from, from its start (one per sandbox: bubblewrap reads to
    its end). A memfd, not a pipe: a pipe's capacity can drop to one page for a user over
    ``pipe-user-pages-soft``, and the writer would block. Close-on-exec: pass it with ``pass_fds``."""
    fd = os.memfd_create("computer-seccomp", os.MFD_CLOEXEC)
    try:
        view = memoryview(program)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _ArgCmp(ctypes.Structure):
    """libseccomp's ``struct scmp_arg_cmp``."""

    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(_LIBRARY)
    c_ctx = ctypes.c_void_p
    lib.seccomp_init.argtypes, lib.seccomp_init.restype = [ctypes.c_uint32], c_ctx
    lib.seccomp_release.argtypes, lib.seccomp_release.restype = [c_ctx], None
    lib.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    lib.seccomp_arch_add.argtypes, lib.seccomp_arch_add.restype = [c_ctx, ctypes.c_uint32], ctypes.c_int
    lib.seccomp_attr_set.argtypes = [c_ctx, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_attr_set.restype = ctypes.c_int
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    # The array form, not the variadic ``seccomp_rule_add`` (ctypes cannot pass its structs by value).
    lib.seccomp_rule_add_array.argtypes = [
        c_ctx,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_rule_add_array.restype = ctypes.c_int
    lib.seccomp_export_bpf.argtypes, lib.seccomp_export_bpf.restype = [c_ctx, ctypes.c_int], ctypes.c_int
    return lib


def _compile(lib: ctypes.CDLL) -> SeccompFilter:
    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        raise OSError("seccomp_init failed")
    try:
        lib.seccomp_attr_set(ctx, _OPTIMIZE, _BINARY_TREE)  # refused before 2.5: a list then
        compat = []
        for name in _COMPAT.get(platform.machine(), ()):
            token = lib.seccomp_arch_resolve_name(name.encode())
            if token and lib.seccomp_arch_add(ctx, token) == 0:
                compat.append(name)
        denied = []
        deny = _errno_action(errno.EPERM)
        for name in DENIED:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number == _NR_ERROR:
                continue
            code = lib.seccomp_rule_add_array(ctx, deny, number, 0, None)
            if number < 0:  # libseccomp's number of a call only other ABIs have (``stime``): theirs
                continue
            if code != 0:
                raise OSError(-code, f"seccomp_rule_add({name}): {os.strerror(-code)}")
            denied.append(name)
        absent = [name for name in ABSENT if _refuse(lib, ctx, name, errno.ENOSYS)]
        no_userns = _deny_userns(lib, ctx)
        no_vsock = _deny_vsock(lib, ctx)
        no_huge_pages = _deny_huge_pages(lib, ctx)
        keeps_size = _ArgCmp(1, _MASKED_EQ, _KEEP_SIZE | _PUNCH_HOLE, _KEEP_SIZE)
        fallocate = lib.seccomp_syscall_resolve_name(b"fallocate")
        no_prealloc = fallocate >= 0 and not lib.seccomp_rule_add_array(
            ctx, _errno_action(errno.EOPNOTSUPP), fallocate, 1, ctypes.pointer(keeps_size)
        )
        late: list[int] = []  # NO_XATTRS calls this libseccomp cannot name: refused by number ahead of it
        unsupported = _errno_action(errno.EOPNOTSUPP)
        for name in NO_XATTRS:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number == _NR_ERROR and name in _LATE_NUMBERS:
                late.append(_LATE_NUMBERS[name])
            elif number >= 0 and lib.seccomp_rule_add_array(ctx, unsupported, number, 0, None) == 0:
                continue
            elif number != _NR_ERROR:
                late.append(-1)  # not refused: said below
        fd = os.memfd_create("computer-seccomp", os.MFD_CLOEXEC)
        try:
            code = lib.seccomp_export_bpf(ctx, fd)
            if code != 0:
                raise OSError(-code, f"seccomp_export_bpf: {os.strerror(-code)}")
            size = os.lseek(fd, 0, os.SEEK_CUR)
            program = os.pread(fd, size, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
    if not program or len(program) % 8:  # struct sock_filter is 8 bytes
        raise OSError(f"seccomp_export_bpf wrote {len(program)} bytes")
    prefix = _late_prefix([n for n in late if n >= 0], compat, unsupported)
    no_xattrs = -1 not in late and (prefix is not None or not late)
    if not (no_xattrs and no_prealloc):
        log.warning("seccomp: extended attributes or preallocation not refused on %s", platform.machine())
    return SeccompFilter(
        (prefix or b"") + program,
        tuple(denied),
        tuple(compat),
        absent=tuple(absent),
        no_userns=no_userns,
        no_xattrs=no_xattrs,
        no_prealloc=no_prealloc,
        no_vsock=no_vsock,
        no_huge_pages=no_huge_pages,
    )


def _refuse(lib: ctypes.CDLL, ctx: int, name: str, code: int) -> bool:
    """Make every call of ``name`` fail with ``code``; whether this machine has it and the rule holds."""
    number: int = lib.seccomp_syscall_resolve_name(name.encode())
    return number >= 0 and int(lib.seccomp_rule_add_array(ctx, _errno_action(code), number, 0, None)) == 0


def _late_prefix(numbers: list[int], compat: list[str], action: int) -> bytes | None:
    """Classic BPF put before libseccomp's program: a call of ``numbers`` on the machine's ABI or one
    of ``compat`` returns ``action``; anything else goes on to libseccomp's first instruction (its
    jumps are relative, and it loads what it checks itself). None: nothing to add, or a machine
    whose architectures are not known here."""
    arches = [platform.machine(), *compat]
    if not numbers or any(arch not in _AUDIT_ARCH and arch != "x32" for arch in arches):
        return None
    blocks = []
    for arch in arches:
        if arch == "x32":  # x86_64's architecture, its numbers with the x32 bit
            continue
        nrs = (
            [*numbers, *(n | _X32_BIT for n in numbers)] if "x32" in arches and arch == "x86_64" else numbers
        )
        blocks.append((_AUDIT_ARCH[arch], nrs))
    code: list[tuple[int, int, int, int]] = []
    ret = sum(3 + len(nrs) for _, nrs in blocks) + 1  # the return's index: after the blocks and a jump
    for audit, nrs in blocks:
        code.append((_LD_ABS, 0, 0, 4))  # seccomp_data.arch
        code.append((_JEQ, 0, len(nrs) + 1, audit))  # another architecture: its block skipped
        code.append((_LD_ABS, 0, 0, 0))  # seccomp_data.nr
        for nr in nrs:
            code.append((_JEQ, ret - len(code) - 1, 0, nr))  # to the return (relative to the next)
    code.append((_JA, 0, 0, 1))
    code.append((_RET, 0, 0, action))
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in code)


def _deny_vsock(lib: ctypes.CDLL, ctx: int) -> bool:
    """Add the rule refusing ``socket(AF_VSOCK, ...)`` (:data:`AF_VSOCK`); whether it holds."""
    number = lib.seccomp_syscall_resolve_name(b"socket")
    # Its low 32 bits: the kernel takes the family as an ``int`` (``0x1_0000_0028`` is AF_VSOCK too).
    family = _ArgCmp(0, _MASKED_EQ, 0xFFFFFFFF, AF_VSOCK)
    failed = number < 0 or lib.seccomp_rule_add_array(
        ctx, _errno_action(errno.EPERM), number, 1, ctypes.pointer(family)
    )
    if failed:
        log.warning("seccomp: socket(AF_VSOCK) not refused on %s", platform.machine())
    return not failed


def _deny_huge_pages(lib: ctypes.CDLL, ctx: int) -> bool:
    """Add the rules refusing huge pages (:data:`HUGE_PAGE_RULES`); whether all of them hold (a call
    only compat ABIs have, ``mmap2``, counts where one of them is covered)."""
    held = True
    for name, arg, flag, code in HUGE_PAGE_RULES:
        number = lib.seccomp_syscall_resolve_name(name.encode())
        compare = _ArgCmp(arg, _MASKED_EQ, flag, flag)
        if number == _NR_ERROR:
            continue
        if lib.seccomp_rule_add_array(ctx, _errno_action(code), number, 1, ctypes.pointer(compare)):
            held = held and number < 0  # a compat ABI's call libseccomp would not take: its ABI's loss
            log.warning("seccomp: %s with huge pages not refused on %s", name, platform.machine())
    return held


def _deny_userns(lib: ctypes.CDLL, ctx: int) -> bool:
    """Add the rules refusing new user namespaces (:data:`USERNS_CALLS`); whether all of them hold.
    A rule libseccomp refuses is left out and said (the rest of the filter stands)."""
    flags_arg = _CLONE_FLAGS_ARG.get(platform.machine())
    if flags_arg is None:
        log.warning(
            "seccomp: clone's flags argument unknown on %s: no user namespace rules", platform.machine()
        )
        return False
    rules = (
        ("unshare", errno.EPERM, _ArgCmp(0, _MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)),
        ("clone", errno.EPERM, _ArgCmp(flags_arg, _MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)),
        ("clone3", errno.ENOSYS, None),  # whatever it asks: its flags are behind a pointer
    )
    held = 0
    for name, code, compare in rules:
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:  # unknown to this libseccomp, or not a call of this machine's own ABI
            log.warning("seccomp: %s unknown to libseccomp: new user namespaces not refused", name)
            continue
        arg = None if compare is None else ctypes.pointer(compare)
        failed = lib.seccomp_rule_add_array(ctx, _errno_action(code), number, 0 if arg is None else 1, arg)
        if failed:
            log.warning(
                "seccomp_rule_add(%s): %s: new user namespaces not refused", name, os.strerror(-failed)
            )
            continue
        held += 1
    return held == len(rules)
