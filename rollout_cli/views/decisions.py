"""`rollout history MODULE`: the decisions, one row each (TIME, ACTION, CLUSTER, REASON)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from rollout_cli.views import terminal

if TYPE_CHECKING:
    from rollout.wire.decisions import DecisionDocument


def print_decisions(decisions: list[DecisionDocument]) -> None:
    table = Table("TIME", "ACTION", "CLUSTER", "REASON", box=None)
    for decision in decisions:
        table.add_row(terminal.local_time(decision.at), decision.action, decision.cluster or "", decision.reason)
    terminal.console.print(table)
