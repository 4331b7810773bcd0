"""Change control through the real worker on the real broker: a stage asking for two
distinct verified approvers, and a rejection by `rollout reject`, as users see them through
`rollout approve|reject|status` (the CLI) — the verified door (the dashboard, with OIDC and
RBAC) is driven in Chromium by tests/projections/dashboard/test_dashboard_in_chromium.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from rollout.wire.events import RolloutCommanded
from tests.integration.stack import Stack, started
from tests.integration.test_staged_rollout import Driver, module, small_fleet

pytestmark = pytest.mark.integration

STAGES = [
    {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}, "maxConcurrency": 1},
    {"name": "wave", "maxConcurrency": 3, "approval": {"required": 2, "groups": ["sre"]}},
]


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with started(kafka_bootstrap, tmp_path_factory.mktemp("change-control"), partitions=2) as stack:
        yield stack


def approval_by(user: str, groups: list[str]) -> RolloutCommanded:
    """An approval as the dashboard publishes it: the verified identity's user and groups."""
    return RolloutCommanded(module="vault", command="approve", stage="wave", user=user, groups=groups, via="dashboard")


def test_two_verified_approvers_let_the_stage_start_and_a_rejection_halts_the_next_revision(stack: Stack) -> None:
    small_fleet(stack, "vault")
    stack.send("intents", "vault", module("vault", app="vault", tag="1.0.0", stages=STAGES))
    driver = Driver(stack, "vault")
    driver.until("AwaitingApproval")

    code, output = stack.rollout("approve", "vault", "--stage", "wave", "--timeout", "60s")
    assert code != 0 and "is not a verified identity" in output, output  # the CLI's user is nobody's word
    stack.send("intents", "vault", approval_by("alice@example.com", ["sre"]))
    stack.send("intents", "vault", approval_by("alice@example.com", ["sre"]))  # again: counted once
    stack.send("intents", "vault", approval_by("mallory@example.com", ["dev"]))  # not in the group
    stack.send("intents", "vault", RolloutCommanded(module="vault", command="pause"))  # a marker: folded after them
    driver.until("Paused")
    code, output = stack.rollout("status", "vault", "-o", "json")
    assert code == 0, output
    wave = next(s for s in json.loads(output)["stages"] if s["name"] == "wave")
    assert (wave["approvalsRequired"], wave["approvalGroups"], wave["approved"]) == (2, ["sre"], False)
    assert [(a["user"], a["counted"]) for a in wave["approvals"]] == [("alice@example.com", True)]
    code, output = stack.rollout("status", "vault")
    assert "wave: alice@example.com (dashboard); waiting for 1 more from sre" in " ".join(output.split()), output

    stack.send("intents", "vault", RolloutCommanded(module="vault", command="resume"))
    driver.until("AwaitingApproval")
    stack.send("intents", "vault", approval_by("bob@example.com", ["ops", "sre"]))
    driver.until("Complete")

    stack.send("intents", "vault", module("vault", app="vault", tag="1.1.0", stages=STAGES))
    driver.until("AwaitingApproval")
    code, output = stack.rollout(
        "reject", "vault", "--stage", "wave", "--reason", "1.1.0 leaks memory on canary", "--timeout", "60s"
    )
    assert code == 0 and "accepted" in output and "rejected by" in output, output
    status = driver.until("Halted")
    assert status["rejection"]["reason"] == "1.1.0 leaks memory on canary" and status["rejection"]["via"] == "cli"
    code, output = stack.rollout("resume", "vault", "--timeout", "60s")
    assert code != 0 and "rejected by" in output, output  # a rejection stands for its target
    code, output = stack.rollout("status", "vault")
    assert "Rejected" in output and "1.1.0 leaks memory on canary" in " ".join(output.split()), output
    assert {t["revision"] for name, t in driver.targets().items() if name != "vault-0"} == {"1.0.0"}
