"""`rollout plan` says each stage's health gates with their analysis settings and dry runs."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from rollout_cli.main import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODULE = """
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: shop, namespace: fleet}
spec:
  selector: {}
  sync:
    source: {git: {url: https://example.com/shop, version: {tag: v1}}}
  rollout:
    stages:
      - name: canary
        selector: {matchLabels: {rollout.dev/order: "1"}}
        minSuccessTime: 1m
        gates:
          - name: errors
            prometheus: {url: http://prometheus:9090, query: error_rate, max: 0.05}
            count: 5
            interval: 30s
            failureLimit: 1
            inconclusiveLimit: 2
          - name: latency
            webhook: {url: http://hooks/latency}
            dryRun: true
          - name: vs-baseline
            compare: {url: http://prometheus:9090, query: 'avg(errors{cluster=~"$clusters"})', maxRatio: 1.2}
            count: 3
      - name: rest
"""


def test_plan_shows_each_gate_analysis_and_dry_run(tmp_path: Path) -> None:
    manifest = tmp_path / "shop.yaml"
    manifest.write_text(MODULE)
    plan = ["plan", "-f", str(manifest), "--clusters", str(EXAMPLES / "clusters.yaml")]
    result = CliRunner().invoke(cli, plan)
    assert result.exit_code == 0, result.output
    line = " ".join(result.output.split("stage canary")[1].split("batch 1")[0].split())  # the console wraps it
    assert (
        "health gates pass for the soak: errors (Prometheus error_rate ≤ 0.05; analysis: 5 measurement(s) every 30s, "
        "fails over failureLimit 1, pauses over inconclusiveLimit 2), latency (webhook http://hooks/latency) — "
        'dry run: recorded, never holds the stage, vs-baseline (compares avg(errors{cluster=~"$clusters"}) on the '
        "updated clusters with the baseline: ratio ≤ 1.2; analysis: 3 measurement(s) one per gate-runner interval, "
        "fails over failureLimit 0, pauses over inconclusiveLimit 0)"
    ) in line
    [shown] = json.loads(CliRunner().invoke(cli, [*plan, "-o", "json"]).output)
    assert "analysis: 5 measurement(s) every 30s" in shown["stages"][0]["gates"][0]
