"""`rollout crds`: the CustomResourceDefinitions of the rollout.dev kinds, as YAML
(projections/crd_schema.py; the chart ships the same)."""

from __future__ import annotations

import click


@click.command(name="crds")
def crds() -> None:
    """Print the CustomResourceDefinitions of Module, BootstrapModule, RolloutApproval,
    RolloutCommand, RolloutBreakGlass, ModuleRestriction and the freeze calendars (`rollout
    crds | kubectl apply -f -`; the chart ships the same)."""
    from projections.crd_schema import crds_yaml

    click.echo(crds_yaml(), nl=False)
