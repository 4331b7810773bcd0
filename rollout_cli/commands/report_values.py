"""`rollout report-values`: publish a Helm release's live values, as an applier does.

    HelmValuesObserved(cluster, module, values, chartDefaults?) ──► sync-status topic
        ──► the engine's live layer (rollout/engine/live_values.py) ──► a verdict

For tests, demos on the directory sink (which cannot see a cluster's UI change a value) and
operators who know what a cluster really holds. The values come from a YAML or JSON file
(`-` reads standard input) holding one mapping — the HelmRelease's `spec.values`; chart
defaults, when given, need the chart version they belong to. The engine answers: accepted
with the decision the observation caused (`values`: the cluster's sync re-sent with values
merged again, `values-refused` for a readOnly path), or "stay as they are"; refused (exit 1)
for an unknown cluster or module, or a module that syncs no Helm chart.
"""

from __future__ import annotations

from typing import IO, Any

import click

from rollout_cli.options import Context, kafka_options
from rollout_cli.publishing.verdicts import Wait, verdict_options


def _mapping(source: IO[str], what: str) -> dict[str, Any]:
    """The one mapping a values file holds; a clear error otherwise."""
    import yaml

    from rollout.api.helm import check_values
    from rollout_cli.options import fail

    name = getattr(source, "name", what)
    try:
        loaded = yaml.safe_load(source.read())
    except yaml.YAMLError as error:
        fail(f"{name}: not YAML or JSON: {error}")
    if not isinstance(loaded, dict):
        fail(f"{name}: {what} must be one mapping (the HelmRelease's spec.values), not {type(loaded).__name__}")
    try:
        check_values(loaded, what)
    except ValueError as error:
        fail(f"{name}: {error}")
    return loaded


@click.command(name="report-values")
@click.option("--cluster", required=True, help="The cluster whose release was observed.")
@click.option("--module", required=True, help="The Helm module the release belongs to.")
@click.option(
    "-f",
    "--values",
    "values_file",
    type=click.File("r"),
    default=None,
    help="YAML/JSON file (or -) with the release's live values (its spec.values).",
)
@click.option("--chart-defaults", type=click.File("r"), default=None, help="YAML/JSON file with the chart's defaults.")
@click.option("--chart-version", default=None, help="The chart version the defaults belong to (with --chart-defaults).")
@verdict_options
@kafka_options
def report_values(
    ctx: Context,
    cluster: str,
    module: str,
    values_file: Any,
    chart_defaults: Any,
    chart_version: str | None,
    wait: Wait,
) -> None:
    """Publish the live values (and/or chart defaults) of a cluster's Helm release.

    Waits for the engine's verdict (exit 0 accepted, 1 refused, 2 no answer in time)."""
    from pydantic import ValidationError

    from rollout.wire.events import HelmValuesObserved
    from rollout_cli.options import fail
    from rollout_cli.publishing.verdicts import decide, request

    if values_file is None and chart_defaults is None:
        fail("give the live values (-f FILE) and/or --chart-defaults FILE --chart-version VERSION")
    try:
        event = HelmValuesObserved(
            cluster=cluster,
            module=module,
            values=_mapping(values_file, "values") if values_file is not None else None,
            chart_defaults=_mapping(chart_defaults, "chartDefaults") if chart_defaults is not None else None,
            chart_version=chart_version,
            reply=True if wait.enabled else None,
        )
    except ValidationError as error:
        fail("; ".join(f"{'.'.join(map(str, e['loc'])) or 'event'}: {e['msg']}" for e in error.errors()))
    verdicts = request(ctx, wait, topic=ctx.topics.status, messages=[(cluster, event.to_bytes())], ids=[event.id])
    decide(f"{cluster}/{module}: values observed", verdicts, event.id, wait)
