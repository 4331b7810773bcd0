"""Static membership (`rollout worker --instance-id`, Kafka's KIP-345) against the real
broker: a worker SIGKILLed and started again with the same id takes its partitions back at
once. Without an id the restarted worker is a new member, and the broker hands it nothing
until the dead member's session has timed out — here 90 s, so the bound below (60 s, from
the restart to the worker ready and deciding again) can only hold through the id."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.stack import EXAMPLES, Stack, wait_for

pytestmark = pytest.mark.integration

SESSION_TIMEOUT = 90.0
BEFORE_THE_SESSION_ENDS = 60.0


def test_a_worker_restarted_with_its_instance_id_owns_its_partitions_again_before_its_old_session_ends(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    stack = Stack(kafka_bootstrap, tmp_path)
    static = ("--instance-id", "worker-0", "--session-timeout", str(SESSION_TIMEOUT))
    try:
        stack.worker = stack.start_worker_process("worker", *static)
        stack.wait_ready(stack.worker)
        stack.start_applier("--simulate-status")
        stack.apply(EXAMPLES / "clusters.yaml", EXAMPLES / "bootstrap.yaml")
        wait_for("flux-install to be decided", lambda: "flux-install" in stack.latest("module_status") or None)

        stack.worker.kill()  # no LeaveGroup, no commit: the broker still counts it a member
        stack.worker.wait()
        restarted = time.monotonic()
        stack.worker = stack.start_worker_process("worker", *static)
        stack.wait_ready(stack.worker, timeout=BEFORE_THE_SESSION_ENDS)
        stack.apply(EXAMPLES / "clusters.yaml", EXAMPLES / "modules.yaml")  # inputs only the new owner can fold
        wait_for(
            "podinfo to be decided by the restarted worker",
            lambda: "podinfo" in stack.latest("module_status") or None,
            timeout=max(1.0, BEFORE_THE_SESSION_ENDS - (time.monotonic() - restarted)),
        )
        assert time.monotonic() - restarted < SESSION_TIMEOUT
    finally:
        stack.stop()
