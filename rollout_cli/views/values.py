"""Helm values per cluster, each path's value and what decided it: in `rollout plan`
(`print_values`) and in `rollout status` (`values_renderable`, the rows of
reading/status_values.py: what each cluster was sent, and the values refused).

    cluster prod-eu-1 (stage canary)
      /image/tag                 "6.7.1"  chart    preferChart   (left to the chart)
      /resources/limits/memory   "1Gi"    stage    max
      /ui/color                  "blue"   module   keepCurrent

A path the chart decides is not written to the HelmRelease (Helm takes the chart's own
default); `?` marks a chart default that was never given or observed. `-o json|yaml` carry
the same data (`values` of each plan).
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from rollout_cli.views import terminal

SHOWN = 10
"""Clusters whose values `rollout status` shows (`-o json` has them all)."""


def print_values(plan: Any) -> None:
    """The values section of one plan (nothing for a module that is not a Helm release)."""
    for cluster in plan.values:
        terminal.console.print(f"  values of [bold]{cluster.cluster}[/] (stage {cluster.stage}):")
        table = Table(box=None, padding=(0, 2), show_header=True, header_style="dim")
        for column in ("path", "value", "layer", "policy", ""):
            table.add_column(column)
        for decision in cluster.decisions:
            value = json.dumps(decision.value) if decision.known else "?"
            note = "" if decision.emitted else "left to the chart"
            table.add_row(f"    {decision.path}", value, decision.layer, decision.policy or "-", note)
        if not cluster.decisions:
            table.add_row("    (no values)", "", "", "", "")
        terminal.console.print(table)
        for refusal in cluster.refusals:
            terminal.console.print(f"    refused: {refusal.reason}", style="yellow")


def values_renderable(rows: list[dict[str, Any]]) -> Group:
    """The VALUES section of `rollout status`."""
    parts: list[Any] = [Text("\nValues (what each cluster was sent; layer and policy that decided each path)")]
    for row in rows[:SHOWN]:
        parts.append(Text(f"  {row['cluster']} (generation {row['generation']}):", style="bold"))
        table = Table("    PATH", "VALUE", "LAYER", "POLICY", box=None, header_style="dim")
        if row["decisions"] is None:
            table.add_row("    (an earlier generation: as sent)", json.dumps(row["values"]), "", "")
        for decision in row["decisions"] or []:
            note = "" if decision["emitted"] else " (left to the chart)"
            table.add_row(
                f"    {decision['path']}",
                json.dumps(decision["value"]),
                decision["layer"] + note,
                decision["policy"] or "-",
            )
        parts.append(table)
    if len(rows) > SHOWN:
        parts.append(Text(f"  … and {len(rows) - SHOWN} more clusters (rollout status -o json has them all)"))
    refused = [(row["cluster"], reason) for row in rows for reason in row["refused"]]
    if refused:
        parts.append(Text("\nValues refused (readOnly):", style="yellow"))
        parts += [Text(f"  {reason}", style="yellow") for _, reason in refused]
    return Group(*parts)
