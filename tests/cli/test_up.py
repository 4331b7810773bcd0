"""`rollout up --example` (what `make run` runs) as a process against the session broker:
the example fleet is rolled out into ./flux-out, and with `--notify URL` the rollouts'
decisions reach a real webhook receiver as CloudEvents; Ctrl-C stops every child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.integration.stack import wait_for
from tests.support.webhook_receiver import running_receiver

pytestmark = pytest.mark.integration


def test_up_with_the_example_writes_its_flux_objects_and_notifies_a_webhook(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    with running_receiver() as receiver:
        command = [
            *(sys.executable, "-m", "rollout_cli.main", "up", "--example", "--tick-interval", "1"),
            *("--web-port", "0", "--dashboard-port", "0", "--notify", receiver.url("local")),
            *("--bootstrap-servers", kafka_bootstrap, "--topic-prefix", f"up-{uuid.uuid4().hex[:8]}."),
        ]
        up = subprocess.Popen(command, cwd=tmp_path, env=os.environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            wait_for(
                "podinfo's canary started, as a CloudEvent from the notifier `up` runs",
                lambda: (
                    [
                        event
                        for event in receiver.accepted("local")
                        if event.type == "dev.rollout.stage.started" and event.subject == "podinfo"
                    ]
                    or None
                ),
                timeout=180,
            )
            wait_for("flux objects in ./flux-out", lambda: list((tmp_path / "flux-out").rglob("*.yaml")) or None)
            assert all(event.source and event.id for event in receiver.accepted("local"))
        finally:
            up.send_signal(signal.SIGINT)
            output, _ = up.communicate(timeout=120)
        text = output.decode(errors="replace")
        assert up.returncode == 0, text
        assert "notify:  pid" in text and text.rstrip().endswith("stopped"), text
