"""`rollout plan` names the freeze calendars a module obeys, and those freezing it now."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rollout_cli.main import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MANIFESTS = """
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: shop, namespace: fleet}
spec:
  selector: {}
  sync:
    source: {git: {url: https://example.com/shop, version: {tag: v1}}}
---
apiVersion: rollout.dev/v1alpha1
kind: ClusterFreezeCalendar
metadata: {name: always}
spec:
  windows:
    - {name: every-minute, schedule: "* * * * *", duration: 1h}
---
apiVersion: rollout.dev/v1alpha1
kind: FreezeCalendar
metadata: {name: new-year, namespace: fleet}
spec:
  windows:
    - {name: first-minute, rrule: "FREQ=YEARLY", start: "2026-01-01T00:00:00", duration: 1m, timeZone: Europe/Berlin}
---
apiVersion: rollout.dev/v1alpha1
kind: FreezeCalendar
metadata: {name: elsewhere, namespace: team-b}
spec:
  windows:
    - {name: every-minute, schedule: "* * * * *", duration: 1h}
"""


def test_plan_names_the_calendars_a_module_obeys_and_those_freezing_it_now(tmp_path: Path) -> None:
    manifest = tmp_path / "shop.yaml"
    manifest.write_text(MANIFESTS)
    plan = ["plan", "-f", str(manifest), "--clusters", str(EXAMPLES / "clusters.yaml")]
    result = CliRunner().invoke(cli, plan)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "frozen now by calendar always until " in text
    assert "obeys freeze calendar always: every-minute: cron * * * * * for 1h (UTC)" in text
    assert "obeys freeze calendar fleet/new-year: first-minute: FREQ=YEARLY from 2026-01-01T00:00:00" in text
    assert "elsewhere" not in text  # another namespace's calendar
    [shown] = json.loads(CliRunner().invoke(cli, [*plan, "-o", "json"]).output)
    assert shown["frozen_by"] == ["always"]
    assert [c.split(":")[0] for c in shown["calendars"]] == ["always", "fleet/new-year"]
