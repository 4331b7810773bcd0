"""`rollout cluster leave|join NAME`: take a cluster out of every rollout, or back in.

    ClusterCommanded(cluster, leave|join) ──► cluster-observations topic ──► every journal
    partition (broadcast) ──► the engine's leases layer (rollout/engine/leases.py)

A cluster that left is not ready for new moves in any module — it never blocks a stage,
and what it runs stays — whatever its observations and heartbeats say, until `join`.
Journal partition 0 answers (publishing/verdicts.py): an unknown cluster is refused (exit 1).
"""

from __future__ import annotations

import click

from rollout_cli.options import Context, check_name, current_user, kafka_options
from rollout_cli.publishing.verdicts import Wait, verdict_options


@click.group(name="cluster")
def cluster_group() -> None:
    """Take a cluster out of the fleet's rollouts (leave) or back in (join)."""


def _membership_verb(verb: str, help_text: str) -> None:
    @cluster_group.command(name=verb, help=help_text)
    @click.argument("name")
    @verdict_options
    @kafka_options
    def _command(ctx: Context, name: str, wait: Wait) -> None:
        from rollout.wire.events import ClusterCommanded
        from rollout_cli.publishing.verdicts import decide, request

        check_name(name)
        event = ClusterCommanded(
            cluster=name,
            command=verb,  # type: ignore[arg-type]
            user=current_user(),
            via="cli",
            reply=True if wait.enabled else None,
        )
        topic = ctx.topics.clusters
        verdicts = request(ctx, wait, topic=topic, messages=[(name, event.to_bytes())], ids=[event.id])
        decide(f"cluster/{name}: {verb}", verdicts, event.id, wait)


_membership_verb("leave", "Take cluster NAME out of every rollout: no new moves; what it runs stays.")
_membership_verb("join", "Bring cluster NAME back into the rollouts after `leave`.")
