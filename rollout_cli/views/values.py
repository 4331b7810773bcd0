"""`rollout plan`'s Helm values: per cluster, each path's value and what decided it.

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

from rich.table import Table

from rollout_cli.views import console


def print_values(plan: Any) -> None:
    """The values section of one plan (nothing for a module that is not a Helm release)."""
    for cluster in plan.values:
        console.print(f"  values of [bold]{cluster.cluster}[/] (stage {cluster.stage}):")
        table = Table(box=None, padding=(0, 2), show_header=True, header_style="dim")
        for column in ("path", "value", "layer", "policy", ""):
            table.add_column(column)
        for decision in cluster.decisions:
            value = json.dumps(decision.value) if decision.known else "?"
            note = "" if decision.emitted else "left to the chart"
            table.add_row(f"    {decision.path}", value, decision.layer, decision.policy or "-", note)
        if not cluster.decisions:
            table.add_row("    (no values)", "", "", "", "")
        console.print(table)
        for refusal in cluster.refusals:
            console.print(f"    refused: {refusal.reason}", style="yellow")
