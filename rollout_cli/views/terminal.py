"""The console every view prints to, and how a time is shown.

Views print through `terminal.console` (looked up when they print, so a test can swap it
for a recording console in one place). Piped output gets a wide console so tables are not
squeezed to 80 columns."""

from __future__ import annotations

import time

from rich.console import Console

_probe = Console()
console = _probe if _probe.is_terminal else Console(width=200)


def local_time(at: float | None) -> str:
    """A record's or decision's time (seconds since the epoch) in local time; `-` for none."""
    if not at:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
