"""`rollout apply -f` / `rollout plan -f` refuse a wrong sync option before anything talks to
Kafka, naming file, document, object and field path (`--bootstrap-servers 127.0.0.1:1`:
nothing listens there, so a command that got as far as Kafka would fail differently)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rollout_cli.main import cli

NOWHERE = ["--bootstrap-servers", "127.0.0.1:1", "--topic-prefix", "cli-test."]
MODULE = """\
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: app, namespace: fleet}
spec:
  selector: {}
  sync:
    source:
      oci:
        url: oci://registry.local:5000/app
        version: {tag: v1}
        secretRef: {name: regcred, password: hunter2}
    package:
      kustomize: {targetNamespace: My_App, timeout: 5 minutes}
"""


@pytest.mark.parametrize(("command", "verb"), [(["apply", *NOWHERE], "applied"), (["plan"], "planned")])
def test_wrong_sync_options_are_listed_by_field_path_and_nothing_happens(
    tmp_path: Path, command: list[str], verb: str
) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text(MODULE)
    result = CliRunner().invoke(cli, [command[0], "-f", str(manifest), *command[1:]])
    assert result.exit_code != 0
    where = f"error: {manifest}: document 1 (Module/app): spec.sync."
    assert result.output.splitlines() == [
        where + "source.oci.secretRef: a Secret reference takes only 'name', not password: credentials stay in a "
        "Secret in the cluster and never in a manifest (manifests travel on Kafka)",
        where + "package.kustomize.targetNamespace: 'My_App' is not a DNS-1123 label: lower-case alphanumerics and "
        "'-', starting and ending with an alphanumeric, at most 63 characters",
        where + "package.kustomize.timeout: '5 minutes' is not a duration such as 90s, 5m or 1h30m",
        f"error: nothing was {verb} (3 problem(s))",
    ]
    assert "hunter2" not in result.output
