"""Notifications end to end on the real broker: a real worker drives modules through their
stages (the test plays the appliers), a real `rollout notifier` process sends the decisions
as CloudEvents to a real HTTP receiver started in the test, which fails deliveries on
purpose — and the notifier is SIGKILLed mid-stream while deliveries are failing, then
restarted.

What must hold: every notified decision (read back from the decisions topic, with the
shared model) reaches every webhook whose filters it passes at least once, with the
decision's id, the right type, source and subject, and — counting each id's first
acceptance — in the order the engine decided it, per module; nothing is lost to the kill.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from rollout.wire.dead_letters import DeadLetter
from rollout.wire.decisions import DecisionDocument
from rollout.wire.documents import DocumentError
from rollout.wire.events import RolloutCommanded
from rollout.wire.notifications import CONTENT_TYPE, DecisionCloudEvent, event_type
from tests.integration.stack import Stack, free_port, http_get, wait_for
from tests.integration.test_staged_rollout import TWO_STAGES, Driver, cluster, module
from tests.support.webhook_receiver import Receiver, running_receiver

pytestmark = pytest.mark.integration

APPROVED_WAVE = [
    {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}, "maxConcurrency": 1},
    {"name": "wave", "maxConcurrency": 2, "requireApproval": True},
]
ONCALL_TYPES = ["dev.rollout.module.halted", "dev.rollout.module.rollback-started"]


class FlakyWebhooks:
    """The receiver's script: every event's first request to a hook fails (503); during an
    `outage` every request does."""

    def __init__(self) -> None:
        self.outage = threading.Event()
        self.seen: set[tuple[str, str]] = set()

    def __call__(self, hook: str, number: int, event: DecisionCloudEvent) -> int:
        if self.outage.is_set():
            return 503
        if (hook, event.id) not in self.seen:
            self.seen.add((hook, event.id))
            return 503
        return 200


def fleet(stack: Stack, app: str) -> None:
    for i in range(4):
        labels = {"app": app, "ring": "canary" if i == 0 else "wave", "order": str(i)}
        stack.send("clusters", f"{app}-{i}", cluster(f"{app}-{i}", labels=labels))


def notified(stack: Stack) -> list[DecisionDocument]:
    """The decisions the notifier sends, from the topic, in each partition's order."""
    decisions = []
    for record in stack.records("decisions"):
        try:
            decisions.append(DecisionDocument.read(record.value or b""))
        except DocumentError:  # the record the test injected: a dead letter, not a notification
            continue
    return [d for d in decisions if event_type(d.action) is not None]


def first_acceptances(receiver: Receiver, hook: str) -> list[DecisionCloudEvent]:
    seen: set[str] = set()
    first = []
    for event in receiver.accepted(hook):
        if event.id not in seen:
            seen.add(event.id)
            first.append(event)
    return first


def by_module(events: list[Any]) -> dict[str, list[tuple[str, str]]]:
    grouped: dict[str, list[tuple[str, str]]] = {}
    for each in events:
        if isinstance(each, DecisionCloudEvent):
            grouped.setdefault(each.subject, []).append((each.id, each.type))
        else:
            grouped.setdefault(each.module, []).append((each.id, event_type(each.action)))
    return grouped


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("notify"), partitions=2, tick_interval=1.0)
    stack.start_worker()
    yield stack
    stack.stop()


def start_notifier(stack: Stack, config: Path, port: int) -> subprocess.Popen[bytes]:
    process = stack._spawn("notifier", "notifier", "--config", str(config), "--web-port", str(port))

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"notifier exited with {process.returncode}:\n{stack.log('notifier')[-3000:]}")
        answer = http_get(port, "/readyz")
        return answer is not None and answer[0] == 200

    wait_for("the notifier to join its group", ready, timeout=120)
    return process


def test_every_decision_reaches_its_webhooks_at_least_once_in_order_through_failures_and_a_sigkill(
    stack: Stack, tmp_path: Path
) -> None:
    script = FlakyWebhooks()
    with running_receiver(script) as receiver:
        config = tmp_path / "notifier.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "retry": {"attempts": 100, "initialDelay": "50ms", "maxDelay": "500ms"},
                    "webhooks": [
                        {"name": "everything", "url": receiver.url("everything")},
                        {"name": "oncall", "url": receiver.url("oncall"), "modules": ["nt-*"], "types": ONCALL_TYPES},
                    ],
                }
            )
        )
        port = free_port()
        notifier = start_notifier(stack, config, port)

        for app in ("nt-ok", "nt-halt", "nt-back"):
            fleet(stack, app)
        stack.send("intents", "nt-ok", module("nt-ok", app="nt-ok", tag="1.0.0", stages=APPROVED_WAVE))
        stack.send("intents", "nt-halt", module("nt-halt", app="nt-halt", tag="1.0.0", stages=TWO_STAGES))
        stack.send(
            "intents",
            "nt-back",
            module("nt-back", app="nt-back", tag="1.0.0", stages=TWO_STAGES, on_failure="Rollback"),
        )
        ok = Driver(stack, "nt-ok")
        Driver(stack, "nt-halt", verdict=lambda c, r: "failed").until("Halted")
        Driver(stack, "nt-back").until("Complete")
        stack.send(
            "intents",
            "nt-back",
            module("nt-back", app="nt-back", tag="1.1.0", stages=TWO_STAGES, on_failure="Rollback"),
        )
        Driver(stack, "nt-back", verdict=lambda c, r: "failed" if r == "1.1.0" else "succeeded").until("RolledBack")
        ok.until("AwaitingApproval")

        def awaiting_approval_accepted() -> bool:
            return any(
                e.subject == "nt-ok" and e.type == "dev.rollout.stage.awaiting-approval"
                for e in receiver.accepted("everything")
            )

        wait_for("the awaiting-approval notification", awaiting_approval_accepted, timeout=120)
        canary_started = next(
            e.id
            for e in receiver.accepted("everything")
            if (e.subject, e.type) == ("nt-ok", "dev.rollout.stage.started")
        )

        # mid-stream: the receiver fails everything, the approval's decisions are being retried — SIGKILL
        script.outage.set()
        stack.send("intents", "nt-ok", RolloutCommanded(module="nt-ok", command="approve", stage="wave"))

        def wave_start_being_retried() -> bool:
            return any(
                r.status == 503
                and (r.event.subject, r.event.data.stage, r.event.type)
                == ("nt-ok", "wave", "dev.rollout.stage.started")
                for r in receiver.requests("everything")
            )

        wait_for("the notifier to be retrying the wave's start", wave_start_being_retried, timeout=120)
        os.kill(notifier.pid, signal.SIGKILL)
        notifier.wait(30)
        ok.until("Complete")  # decided while no notifier runs
        script.outage.clear()
        notifier = start_notifier(stack, config, port)

        expected = notified(stack)
        assert {d.module for d in expected} == {"nt-ok", "nt-halt", "nt-back"}
        for_oncall = [d for d in expected if event_type(d.action) in ONCALL_TYPES]

        def everything_arrived() -> bool:
            got = {e.id for e in receiver.accepted("everything")}
            on_call = {e.id for e in receiver.accepted("oncall")}
            return {d.id for d in expected} <= got and {d.id for d in for_oncall} <= on_call

        try:
            wait_for("every notification at every webhook", everything_arrived, timeout=180)
        finally:
            Stack._stop(notifier)

        # in the order decided, per module, each with its id and type (first acceptance of each id)
        assert by_module(first_acceptances(receiver, "everything")) == by_module(expected)
        assert by_module(first_acceptances(receiver, "oncall")) == by_module(for_oncall)
        types = {m: [t for _, t in events] for m, events in by_module(expected).items()}
        assert types["nt-ok"] == [
            "dev.rollout.stage.started",
            "dev.rollout.stage.succeeded",
            "dev.rollout.stage.awaiting-approval",
            "dev.rollout.stage.started",
            "dev.rollout.stage.succeeded",
            "dev.rollout.module.complete",
        ]
        assert "dev.rollout.module.halted" in types["nt-halt"]
        assert "dev.rollout.module.rollback-started" in types["nt-back"]
        assert {e.type for e in receiver.accepted("oncall")} == set(ONCALL_TYPES)

        # every request a structured CloudEvent from this engine, about its module
        source = "/rollout/" + stack.prefix.rstrip(".")
        for request in receiver.received:
            assert request.content_type == CONTENT_TYPE
            assert request.event.source == source and request.event.specversion == "1.0"
            assert request.event.subject == request.event.data.module
        complete = next(e for e in receiver.accepted("everything") if e.type == "dev.rollout.module.complete")
        assert complete.time is not None and complete.data.revision is not None

        # retried, not lost, not dead-lettered; what was committed before the kill was not sent again
        assert all(r.number > 0 for r in receiver.received)
        assert sum(1 for r in receiver.received if r.status == 503) >= len(expected)
        assert [e.id for e in receiver.accepted("everything")].count(canary_started) == 1
        letters = [DeadLetter.read(r.value) for r in stack.records("dead_letters") if r.value is not None]
        assert not [letter for letter in letters if letter.stage == "notifier"]
        assert "notifier stopped" in stack.log("notifier")


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of a Prometheus text exposition (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{key}="{wanted}"' in head for key, wanted in labels.items()):
            return float(value)
    return 0.0


def test_a_dead_webhook_is_dead_lettered_without_holding_back_a_healthy_one_nor_an_unreadable_record(
    stack: Stack, tmp_path: Path
) -> None:
    with running_receiver(lambda hook, n, event: 503 if hook == "dead" else 200) as receiver:
        config = tmp_path / "notifier.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "queueSize": 2,  # smaller than what one rollout notifies: the reading waits on the dead one
                    "retry": {"attempts": 3, "initialDelay": "10ms", "maxDelay": "50ms"},
                    "webhooks": [
                        {"name": "healthy", "url": receiver.url("healthy"), "modules": ["nt-pair"]},
                        {"name": "dead", "url": receiver.url("dead"), "modules": ["nt-pair"], "timeout": "2s"},
                    ],
                }
            )
        )
        port = free_port()
        notifier = start_notifier(stack, config, port)
        try:
            stack.send("decisions", "nt-garbage", b"{not a decision")  # fault injection: what no worker writes
            fleet(stack, "nt-pair")
            stack.send("intents", "nt-pair", module("nt-pair", app="nt-pair", tag="1.0.0", stages=TWO_STAGES))
            Driver(stack, "nt-pair").until("Complete")
            expected = [d for d in notified(stack) if d.module == "nt-pair"]
            assert len(expected) > 2  # more than the queue holds

            def healthy_has_all() -> bool:
                return {d.id for d in expected} <= {e.id for e in receiver.accepted("healthy")}

            wait_for("every notification at the healthy webhook", healthy_has_all, timeout=120)

            def dead_letters() -> list[DeadLetter] | None:
                """Every notification's dead letter for the dead webhook, once all are there."""
                letters = [DeadLetter.read(r.value) for r in stack.records("dead_letters") if r.value is not None]
                ours = [letter for letter in letters if letter.stage == "notifier" and letter.key == "nt-pair"]
                return ours if len(ours) >= len(expected) else None

            letters = wait_for("a dead letter per notification", dead_letters, timeout=120)
            assert [letter.event for letter in letters] == [d.id for d in expected]
            assert (
                letters[0].reason.startswith("webhook dead: answered 503") and "after 3 attempts" in letters[0].reason
            )
            assert all("after 1 attempt)" in letter.reason for letter in letters[1:])  # down: one try each
            assert all(DecisionDocument.read(letter.value or "").id == letter.event for letter in letters)
            records = [DeadLetter.read(r.value) for r in stack.records("dead_letters") if r.value is not None]
            [garbage] = [letter for letter in records if letter.key == "nt-garbage"]
            assert garbage.stage == "notifier" and garbage.reason.startswith("not a decision document")
            assert garbage.value == "{not a decision" and garbage.topic == stack.topics.decisions

            def committed_to_the_end() -> str | None:
                answer = http_get(port, "/metrics")
                if answer is None:
                    return None
                lags = [line for line in answer[1].splitlines() if line.startswith("rollout_consumer_lag{")]
                return answer[1] if lags and all(line.endswith(" 0.0") for line in lags) else None

            text = wait_for("the notifier's offsets past the dead webhook's events", committed_to_the_end, timeout=60)
            healthy = sum(
                metric(text, "rollout_notifications_total", webhook="healthy", outcome="delivered", type=kind)
                for kind in {event_type(d.action) or "" for d in expected}
            )
            total_dead = sum(
                metric(text, "rollout_notifications_total", webhook="dead", outcome="dead-lettered", type=kind)
                for kind in {event_type(d.action) or "" for d in expected}
            )
            assert total_dead == len(expected) and healthy == len(expected)
            assert metric(text, "rollout_notification_retries_total", webhook="dead") == 2
        finally:
            Stack._stop(notifier)
