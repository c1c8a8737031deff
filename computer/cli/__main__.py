"""``python -m computer.cli`` (the same as the ``computer`` script)."""

from __future__ import annotations

from . import main

main()
