"""The ``assets`` command inside the shell sandbox (stdlib only; never imported by the host).

``assets publish <path> [<expiry>]`` prints a share URL for a workspace file. Expiry is milliseconds,
or a number with an ``ms``/``s``/``m``/``h`` suffix (default 1h). The request goes over a unix socket
to the host side of the run, which publishes through the workspace; no credential is in the sandbox.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys

SOCKET = "/run/computer/assets.sock"
USAGE = "usage: assets publish <path> [<expiry: ms, or with ms/s/m/h suffix>]"
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "": 0.001}


def parse_expiry(text: str) -> float:
    """Seconds from ``500``, ``500ms``, ``30s``, ``5m``, ``2h``: more than 0 (a zero lifetime, or one
    of 400 digits that is infinite as a float, is refused here; a long one is capped at 7 days by the
    workspace)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text)
    if match is None:
        raise ValueError(f"invalid expiry {text!r}: milliseconds, or a number with ms/s/m/h, e.g. 30m")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or ""]
    if not 0 < seconds < float("inf"):
        raise ValueError(f"invalid expiry {text!r}: more than 0 and finite (at most 7 days is kept)")
    return seconds


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[0] != "publish":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        expires = parse_expiry(argv[2]) if len(argv) == 3 else 3600.0
    except ValueError as exc:
        print(f"assets: {exc}", file=sys.stderr)
        return 2
    path = os.path.normpath(os.path.join(os.getcwd(), argv[1]))
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(SOCKET)
            sock.sendall(
                json.dumps({"op": "publish", "path": path, "expires_after": expires}).encode() + b"\n"
            )
            reply = json.loads(sock.makefile("rb").readline() or b"{}")
    except OSError as exc:
        print(f"assets: cannot reach the workspace: {exc}", file=sys.stderr)
        return 1
    if "url" not in reply:
        print(f"assets: {reply.get('error', 'no answer')}", file=sys.stderr)
        return 1
    print(reply["url"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
