"""``python -m computer`` (the same as the ``computer`` script and ``python -m computer.cli``)."""

from __future__ import annotations

from .cli import main

main()
