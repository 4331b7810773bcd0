"""`rollout history MODULE`: the decisions, one row each (TIME, ACTION, CLUSTER, REASON)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from rollout_cli.views import terminal


def print_decisions(decisions: list[dict[str, Any]]) -> None:
    table = Table("TIME", "ACTION", "CLUSTER", "REASON", box=None)
    for decision in decisions:
        table.add_row(
            terminal.local_time(decision.get("at")),
            decision["action"],
            decision.get("cluster") or "",
            decision["reason"],
        )
    terminal.console.print(table)
