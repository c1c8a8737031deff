"""How ``computer.tools.mcp`` imports the MCP SDK (issue 22, CLI speed): the server side only, its
surface models built at their first use; and the SDK is still whole for whoever asks for more.

Each check runs in a fresh interpreter: what the SDK's packages are depends on what imported them
first, which this test session's other modules decide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(script: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])  # type: ignore[no-any-return]


_PUBLIC = "sorted(n for n in vars({0}) if not n.startswith('_'))"


def test_the_server_side_loads_without_the_client_side_nor_mcpserver() -> None:
    loaded = _run(
        "import json, sys\n"
        "import computer.tools.mcp\n"
        "import mcp_types._v2025_11_25 as era\n"
        "print(json.dumps({'client': 'mcp.client' in sys.modules,\n"
        "                  'mcpserver': 'mcp.server.mcpserver' in sys.modules,\n"
        "                  'built': era.CallToolRequest.__pydantic_complete__}))\n"
    )
    assert loaded == {"client": False, "mcpserver": False, "built": False}


def test_the_packages_complete_at_the_first_name_they_lack() -> None:
    """``from mcp import Client`` after the server side: the package is then what ``import mcp``
    makes (the same public names, none of the stand-in's own), for every thread asking at once."""
    normal = _run(
        f"import json, mcp, mcp.server\nprint(json.dumps([{_PUBLIC.format('mcp')}, {_PUBLIC.format('mcp.server')}]))"
    )
    after = _run(
        "import json, threading\n"
        "import computer.tools.mcp\n"
        "import mcp, mcp.server\n"
        "got = []\n"
        "def ask(): from mcp import Client; got.append(Client)\n"
        "threads = [threading.Thread(target=ask) for _ in range(4)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "from mcp.server import MCPServer\n"
        "from mcp.client.client import Client\n"
        "assert got == [Client] * 4 and mcp.Client is Client and mcp.server.MCPServer is MCPServer\n"
        "assert '__getattr__' not in vars(mcp) and '__getattr__' not in vars(mcp.server)\n"
        "try:\n"
        "    mcp.no_such_name\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_name' in str(exc)\n"
        f"print(json.dumps([{_PUBLIC.format('mcp')}, {_PUBLIC.format('mcp.server')}]))\n"
    )
    assert after == normal


def test_an_sdk_imported_first_is_left_as_it_is() -> None:
    loaded = _run(
        "import json, sys, mcp\n"
        "import computer.tools.mcp\n"
        "import mcp_types._v2025_11_25 as era\n"
        "print(json.dumps({'getattr': '__getattr__' in vars(mcp),\n"
        "                  'built': era.CallToolRequest.__pydantic_complete__}))\n"
    )
    assert loaded == {"getattr": False, "built": True}
