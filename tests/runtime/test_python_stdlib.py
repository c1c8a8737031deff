"""The python sandbox sees the standard library only, and no host path (issue 17 item 7): the
interpreter, its standard library, the guest and msgpack are staged copies mounted at neutral paths."""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from pathlib import Path

import computer

# Everything inside that could name a host path: mounts, sys.*, sysconfig, the environment, the
# files of the mounted directories that name paths, and a traceback through the standard library.
_REPORT = r"""
import json, os, sys, sysconfig, traceback
def main(host_paths):
    parts = [open("/proc/self/mountinfo").read(), open("/proc/self/maps").read()]
    parts += [repr(getattr(sys, n, "")) for n in ("path", "prefix", "exec_prefix", "base_prefix",
              "base_exec_prefix", "executable", "_base_executable", "platlibdir", "_stdlib_dir")]
    parts += [repr(sysconfig.get_config_vars()), repr(sysconfig.get_paths()), repr(dict(os.environ))]
    try:
        json.loads("{")
    except ValueError:
        parts.append(traceback.format_exc())
    for name, module in list(sys.modules.items()):
        parts.append(repr(getattr(module, "__file__", "")) + repr(getattr(module, "__path__", "")))
    for top in ("/opt/python", "/opt/computer"):
        for root, dirs, files in os.walk(top):
            parts.append(root)
            for f in files:
                if f.endswith((".py", ".txt", ".cfg", ".pc")):
                    parts.append(open(os.path.join(root, f), errors="replace").read())
    seen = "\n".join(parts)
    assert "/opt/python/lib/python3" in seen  # the report did see the standard library
    return sorted(p for p in host_paths if p in seen)
"""


def host_paths() -> set[str]:
    """Paths of this host that must never be seen inside."""
    package = Path(computer.__file__).resolve().parent
    paths = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, str(package.parent)}
    stdlib = sysconfig.get_path("stdlib")
    paths |= {
        sysconfig.get_path("purelib"),
        stdlib,
        os.path.join(stdlib, "site-packages"),
        *site.getsitepackages(),
    }
    paths |= {os.path.realpath(p) for p in paths}
    return {p for p in paths if p not in ("", "/", "/usr", "/usr/local")}


async def run(ws: computer.Workspace, source: str, **kwargs: object) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, backend="python", **kwargs)).result()  # type: ignore[arg-type]


async def test_no_host_path_appears_inside(ws: computer.Workspace) -> None:
    result = await run(ws, _REPORT, input=sorted(host_paths()))
    assert result.status == "completed", result
    assert result.value == [], f"host paths visible inside the python sandbox: {result.value}"


async def test_only_the_standard_library_is_importable(ws: computer.Workspace) -> None:
    source = (
        "import importlib, sys\n"
        "def main(host_paths):\n"
        "    sys.path += host_paths  # even where the host keeps them\n"
        "    out = {}\n"
        "    for name in ('ray', 'pydantic', 'lz4', 'computer', 'attr', 'pip', 'setuptools'):\n"
        "        try:\n"
        "            importlib.import_module(name)\n"
        "            out[name] = 'imported'\n"
        "        except ImportError:\n"
        "            out[name] = 'missing'\n"
        "    import json, sqlite3, csv, decimal, zoneinfo, ssl, hashlib, ctypes\n"
        "    out['stdlib'] = sqlite3.connect(':memory:').execute('select 6*7').fetchone()[0]\n"
        "    return out\n"
    )
    result = await run(ws, source, input=sorted(host_paths()))
    assert result.status == "completed", result
    assert result.value.pop("stdlib") == 42
    assert set(result.value.values()) == {"missing"}, result.value


async def test_host_site_packages_cannot_be_read(ws: computer.Workspace) -> None:
    paths = sorted(host_paths())
    source = "import os\ndef main(paths):\n    return [p for p in paths if os.path.exists(p)]\n"
    result = await run(ws, source, input=paths)
    assert result.status == "completed", result
    assert result.value == []


_COMPILED = r"""
import os
def main(host_paths):
    found = set()
    for root, dirs, files in os.walk("/opt/python"):
        for f in files:
            if f.endswith(".pyc"):
                data = open(os.path.join(root, f), "rb").read()
                found |= {p for p in host_paths if p.encode() in data}
    return sorted(found)
"""


async def test_compiled_files_name_no_host_path(ws: computer.Workspace) -> None:
    result = await run(ws, _COMPILED, input=sorted(host_paths()))
    assert result.status == "completed", result
    assert result.value == []
