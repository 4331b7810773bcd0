"""`rollout history MODULE`: the decisions, one row each (TIME, ACTION, CLUSTER, REASON; with
`--release`, MODULE too: every member of its Release)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from rollout_cli.views import terminal

if TYPE_CHECKING:
    from rollout.wire.decisions import DecisionDocument


def print_decisions(decisions: list[DecisionDocument], *, with_module: bool = False) -> None:
    """One row per decision; `with_module`: a MODULE column (a Release's members together)."""
    table = Table("TIME", *(["MODULE"] if with_module else []), "ACTION", "CLUSTER", "REASON", box=None)
    for decision in decisions:
        module = [decision.module] if with_module else []
        when = terminal.local_time(decision.at)
        table.add_row(when, *module, decision.action, decision.cluster or "", decision.reason)
    terminal.console.print(table)
