"""Least-privilege Kafka on a real broker: SASL/SCRAM users and the KRaft StandardAuthorizer.

One secured broker for the module (infra/localkafka/security.py): a SCRAM-SHA-512 user per
component of infra/kafka_acls.py, topics created as the topics principal, and the ACLs
applied with exactly the `kafka-acls.sh` lines `rollout kafka acls` prints (run through the
jars' kafka.admin.AclCommand). Then the real processes — `rollout worker`, `rollout applier
--simulate-status`, `rollout apply` as the operator, `rollout status` as the read-only
user — each as its own principal, roll a module out to Complete; and each step outside a
principal's ACLs is refused by the broker, with an error naming the principal, the
resource and the `kafka-acls.sh` line that would allow it, and nothing appended.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from infra import client
from infra.denials import NotAuthenticated, NotAuthorized
from infra.kafka_acls import Grant, Operation, ResourceType, acl_commands, principal, principals
from infra.localkafka import LocalKafka, Scram
from infra.topics import TopicNames, delete_records_below, ensure_topics, log_start_offsets
from projections.fenced_publisher import FencedPublisher
from rollout.wire.dead_letters import DeadLetter
from rollout.wire.events import RolloutCommanded
from rollout_cli.publishing.intents import intents_for, publish_intents
from rollout_cli.publishing.manifest_files import load_manifest_files
from tests.integration.stack import free_port, http_get, wait_for
from tests.support.webhook_receiver import running_receiver

pytestmark = pytest.mark.integration

PREFIX = "fleet-a."
TOPICS = TopicNames(PREFIX)
PARTIAL = "worker-partial"  # a worker whose ACLs lack one grant (test_a_worker_missing_a_grant_…)
USERS = {
    "admin": secrets.token_hex(12),
    PARTIAL: secrets.token_hex(12),
    **{p.user: secrets.token_hex(12) for p in principals(PREFIX)},
}
SECURITY = Scram(USERS)

FLEET = """\
apiVersion: rollout.dev/v1alpha1
kind: Cluster
metadata: {name: edge-1, namespace: fleet, labels: {env: prod}}
status: {controlPlaneReady: true, kubeconfigSecret: true}
---
apiVersion: rollout.dev/v1alpha1
kind: Module
metadata: {name: NAME, namespace: fleet}
spec:
  selector: {matchLabels: {env: prod}}
  sync:
    source:
      oci: {url: oci://ghcr.io/example/NAME, version: {tag: v1.0.0}}
    package:
      kustomize: {path: ./deploy}
"""


@dataclass
class SecuredEngine:
    bootstrap: str
    workdir: Path
    processes: list[subprocess.Popen[bytes]]
    broker: LocalKafka
    gate_runner_port: int = 0

    def env(self, user: str, *, password: str | None = None, prefix: str = PREFIX) -> dict[str, str]:
        variables = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": self.bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
        variables.update(SECURITY.environment(user))
        if password is not None:
            variables["ROLLOUT_KAFKA_SASL_PASSWORD"] = password
        return variables

    def spawn(self, name: str, user: str, *args: str, prefix: str = PREFIX) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "rollout_cli.main", *args],
            env=self.env(user, prefix=prefix),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )
        self.processes.append(process)
        return process

    def cli(self, user: str, *args: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rollout_cli.main", *args],
            env=self.env(user, password=password),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.workdir,
        )

    def manifest(self, module: str) -> Path:
        path = self.workdir / f"{module}.yaml"
        path.write_text(FLEET.replace("NAME", module))
        return path

    def ends(self, role: str) -> dict[int, int]:
        """End offsets of a topic, read as the read-only CLI principal."""
        with as_user("rollout-cli-reader"):
            return asyncio.run(client.end_offsets(self.bootstrap, TOPICS.name(role)))


@contextmanager
def as_user(user: str) -> Iterator[None]:
    """In-process Kafka clients (infra/client.py) connect as `user` inside the block."""
    variables = {**SECURITY.environment(user), "ROLLOUT_TOPIC_PREFIX": PREFIX}
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredEngine]:
    base = tmp_path_factory.mktemp("kafka-acls")
    broker = LocalKafka(base / "kafka.json")
    info = broker.start(data_dir=base / "data", security=SECURITY)
    engine = SecuredEngine(info.bootstrap, base, [], broker)
    try:
        broker.apply_acls(SECURITY, [line for each in principals(PREFIX) for line in acl_commands(each)])
        with as_user("rollout-topics"):
            asyncio.run(ensure_topics(info.bootstrap, PREFIX, 2))
        worker = ["worker", "--partitions", "2", "--tick-interval", "1", "--web-port", str(free_port())]
        engine.spawn("worker", "rollout-worker", *worker)
        engine.spawn(
            "applier", "rollout-applier", "applier", "--sink", f"dir:{base / 'out'}", "--simulate-status",
            "--web-port", str(free_port()),
        )  # fmt: skip
        engine.gate_runner_port = free_port()
        engine.spawn("gate-runner", "rollout-gate-runner", "gate-runner", "--web-port", str(engine.gate_runner_port))
        yield engine
    finally:
        for process in engine.processes:
            process.terminate()
        for process in engine.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        broker.stop()


def test_each_component_rolls_out_within_its_own_acls(engine: SecuredEngine) -> None:
    applied = engine.cli("rollout-cli-operator", "apply", "-f", str(engine.manifest("podinfo")), "--timeout", "90s")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "module/podinfo created" in applied.stdout, applied.stdout
    status = engine.cli("rollout-cli-reader", "status", "podinfo", "--wait", "--timeout", "90s")
    assert status.returncode == 0, status.stdout + status.stderr
    assert (engine.workdir / "out" / "proxy" / "edge-1" / "podinfo.yaml").exists()
    for name in ("worker", "applier"):
        log = (engine.workdir / f"{name}.log").read_text()
        assert "not authorized" not in log and "AuthorizationFailed" not in log, log[-3000:]


def test_the_read_only_cli_cannot_apply_and_nothing_is_appended(engine: SecuredEngine) -> None:
    before = engine.ends("intents"), engine.ends("clusters")
    refused = engine.cli("rollout-cli-reader", "apply", "-f", str(engine.manifest("web")), "--timeout", "90s")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "nothing was applied" in refused.stderr
    assert "not authorized to write transactional-id fleet-a.rollout-apply-" in refused.stderr
    assert "as User:rollout-cli-reader" in refused.stderr and "User:rollout-cli-operator may" in refused.stderr
    assert "kafka-acls.sh" in refused.stderr and "--allow-principal User:rollout-cli-reader" in refused.stderr
    assert (engine.ends("intents"), engine.ends("clusters")) == before

    # nothing lost: the same manifests, from the principal that may publish them
    applied = engine.cli("rollout-cli-operator", "apply", "-f", str(engine.manifest("web")), "--timeout", "90s")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "module/web created" in applied.stdout, applied.stdout


def test_the_read_only_cli_cannot_send_a_command(engine: SecuredEngine) -> None:
    before = engine.ends("intents")
    refused = engine.cli("rollout-cli-reader", "pause", "podinfo", "--timeout", "30s")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "not authorized to write topic fleet-a.intents as User:rollout-cli-reader" in refused.stderr
    assert engine.ends("intents") == before


def test_an_applier_cannot_publish_intents(engine: SecuredEngine) -> None:
    before = engine.ends("intents")
    command = RolloutCommanded(module="podinfo", command="abort", user="applier")
    with as_user("rollout-applier"), pytest.raises(NotAuthorized) as refused:
        asyncio.run(client.publish(engine.bootstrap, TOPICS.intents, [("podinfo", command.to_bytes())]))
    message = str(refused.value)
    assert message.startswith("not authorized to write topic fleet-a.intents as User:rollout-applier")
    assert "--allow-principal User:rollout-applier --operation Write --topic fleet-a.intents" in message
    assert engine.ends("intents") == before


def test_the_dashboard_writes_commands_but_not_decisions_or_assignments(engine: SecuredEngine) -> None:
    for role in ("decisions", "assignments"):
        before = engine.ends(role)
        with as_user("rollout-dashboard"), pytest.raises(NotAuthorized) as refused:
            asyncio.run(client.publish(engine.bootstrap, TOPICS.name(role), [("podinfo", b"{}")]))
        assert f"write topic {TOPICS.name(role)} as User:rollout-dashboard" in str(refused.value)
        assert "(User:rollout-worker may)" in str(refused.value)
        assert engine.ends(role) == before
    before = engine.ends("intents")
    command = RolloutCommanded(module="no-such-module", command="pause", user="dashboard")
    with as_user("rollout-dashboard"):
        asyncio.run(client.publish(engine.bootstrap, TOPICS.intents, [("no-such-module", command.to_bytes())]))
    assert sum(engine.ends("intents").values()) == sum(before.values()) + 1
    wait_for(  # the worker, untroubled by the refusals around it, answers the command
        "the engine's verdict on the dashboard's command",
        lambda: any(record.key == command.id for record in _verdicts(engine)),
        timeout=30,
    )


def test_a_worker_cannot_write_what_users_say(engine: SecuredEngine) -> None:
    worker = principal("worker", PREFIX)
    for role in ("intents", "clusters", "status", "heartbeats"):
        with as_user(worker.user), pytest.raises(NotAuthorized):
            asyncio.run(client.publish(engine.bootstrap, TOPICS.name(role), [("x", b"{}")]))


def test_a_watcher_publishes_cluster_observations_only_under_its_own_transactional_id(engine: SecuredEngine) -> None:
    async def publish(transactional_id: str, role: str) -> None:
        publisher = FencedPublisher(engine.bootstrap, transactional_id)
        await publisher.start()
        try:
            await publisher.publish(TOPICS.name(role), [("edge-9", b"{}")])
        finally:
            await publisher.close()

    with as_user("rollout-watcher"):
        with pytest.raises(NotAuthorized) as refused:  # the module watcher's id: it cannot fence it
            asyncio.run(publish(f"rollout-watch-modules.{PREFIX}", "intents"))
        assert str(refused.value).startswith(
            f"not authorized to write transactional-id rollout-watch-modules.{PREFIX} as User:rollout-watcher"
        )
        assert "(User:rollout-module-watcher may)" in str(refused.value)
        before = engine.ends("intents")
        with pytest.raises(NotAuthorized) as refused:  # its own id, another's topic: aborted
            asyncio.run(publish(f"rollout-watch-clusters.{PREFIX}", "intents"))
        assert f"not authorized to write topic {TOPICS.intents} as User:rollout-watcher" in str(refused.value)
        assert engine.ends("intents") == before


def test_a_worker_missing_a_grant_says_which_and_loses_nothing_once_granted(engine: SecuredEngine) -> None:
    """Its own engine (prefix fleet-a.partial.), its ACLs the catalogue's but for Write on
    the journal (Read stays: it still sees the topic): every transaction of the route stage
    is refused; once the grant arrives the same inputs are routed and decided — none skipped."""
    prefix = f"{PREFIX}partial."
    names = TopicNames(prefix)
    catalogue = principal("worker", prefix)
    grants = tuple(
        replace(grant, names=tuple(n for n in grant.names if n != names.journal))
        if Operation.WRITE in grant.operations
        else grant
        for grant in catalogue.grants
    )
    engine.broker.apply_acls(SECURITY, acl_commands(replace(catalogue, user=PARTIAL, grants=grants)))
    with as_user("rollout-topics"):
        asyncio.run(ensure_topics(engine.bootstrap, prefix, 2))
    worker = engine.spawn(
        "worker-partial", PARTIAL, "worker", "--partitions", "2", "--web-port", str(free_port()), prefix=prefix
    )
    with as_user("admin"):
        manifests = intents_for(load_manifest_files([engine.manifest("partial")]))
        asyncio.run(publish_intents(engine.bootstrap, names, manifests))
    log = engine.workdir / "worker-partial.log"
    refusal = f"the broker refused User:{PARTIAL} access to topic {names.journal}"
    wait_for("the worker's refusal in its log", lambda: refusal in log.read_text(), timeout=60)
    line = next(line for line in log.read_text().splitlines() if refusal in line)
    assert "ERROR" in line and f"--allow-principal User:{PARTIAL} --operation Write" in line, line
    with as_user("admin"):
        assert asyncio.run(client.read_latest(engine.bootstrap, names.module_status)) == {}  # aborted, all of it
        assert asyncio.run(client.end_offsets(engine.bootstrap, names.journal)) == {0: 0, 1: 0}

    granted = Grant(ResourceType.TOPIC, (names.journal,), (Operation.WRITE,))
    engine.broker.apply_acls(SECURITY, acl_commands(replace(catalogue, user=PARTIAL, grants=(granted,))))
    with as_user("admin"):
        status = wait_for(
            "the module decided once Write on the journal is granted",
            lambda: asyncio.run(client.read_latest(engine.bootstrap, names.module_status)).get("partial"),
            timeout=60,
        )
    assert status.get("phase"), status
    assert worker.poll() is None


def test_a_wrong_password_is_an_authentication_error(engine: SecuredEngine) -> None:
    refused = engine.cli("rollout-cli-reader", "status", "podinfo", password="not-the-password")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    expected = f"the broker at {engine.bootstrap} refused the credentials of User:rollout-cli-reader (SCRAM-SHA-512)"
    assert expected in refused.stderr, refused.stderr
    with as_user("rollout-cli-reader"):
        os.environ["ROLLOUT_KAFKA_SASL_PASSWORD"] = "not-the-password"
        with pytest.raises(NotAuthenticated):
            asyncio.run(client.read_all(engine.bootstrap, TOPICS.module_status))


def test_a_worker_as_another_principal_may_not_create_the_topics(engine: SecuredEngine) -> None:
    refused = engine.cli("rollout-applier", "worker", "--partitions", "2", "--web-port", str(free_port()))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "not authorized to create topic fleet-a." in refused.stderr, refused.stderr
    assert "as User:rollout-applier" in refused.stderr and "(User:rollout-topics may)" in refused.stderr


def test_an_applier_without_its_acls_logs_the_refusal_and_waits(engine: SecuredEngine) -> None:
    out = engine.workdir / "out-refused"
    applier = engine.spawn(
        "applier-refused", "rollout-gate-runner", "applier", "--sink", f"dir:{out}", "--web-port", str(free_port())
    )
    expected = "the broker refused User:rollout-gate-runner access to topic fleet-a."
    log = engine.workdir / "applier-refused.log"
    wait_for("the refusal in the applier's log", lambda: expected in log.read_text(), timeout=60)
    line = next(line for line in log.read_text().splitlines() if expected in line)
    grant = "--allow-principal User:rollout-gate-runner --operation Read --topic fleet-a.remote-assemblages"
    assert "ERROR" in line and grant in line, line
    assert applier.poll() is None  # it retries: ACLs granted later need no restart
    assert not out.exists() or not any(out.rglob("*.yaml"))  # it read nothing


def test_the_components_keep_running_through_the_refusals(engine: SecuredEngine) -> None:
    assert all(process.poll() is None for process in engine.processes), [p.returncode for p in engine.processes]
    ready = wait_for("the gate runner's /readyz", lambda: http_get(engine.gate_runner_port, "/readyz"), timeout=30)
    assert ready[0] == 200, ready
    for name in ("worker", "applier", "gate-runner"):
        log = (engine.workdir / f"{name}.log").read_text()
        assert "the broker refused" not in log and "AuthorizationFailed" not in log, (name, log[-3000:])


def _verdicts(engine: SecuredEngine) -> list[client.Record]:
    with as_user("rollout-cli-reader"):
        return asyncio.run(client.read_all(engine.bootstrap, TOPICS.verdicts))


def test_the_notifier_sends_and_dead_letters_within_its_acls_and_cannot_publish_intents(engine: SecuredEngine) -> None:
    """As User:rollout-notifier: the decisions read (its own group), events sent, a refused
    one dead-lettered — and an intent refused by the broker."""
    with running_receiver(lambda hook, n, event: 400 if hook == "refuses" else 200) as receiver:
        port = free_port()
        notifier = engine.spawn(
            "notifier", "rollout-notifier", "notifier", "--webhook", receiver.url("ops"),
            "--webhook", receiver.url("refuses"), "--web-port", str(port),
        )  # fmt: skip
        try:
            wait_for("the notifier's /readyz", lambda: (http_get(port, "/readyz") or (0, ""))[0] == 200, timeout=90)
            applied = engine.cli(
                "rollout-cli-operator", "apply", "-f", str(engine.manifest("told")), "--timeout", "90s"
            )
            assert applied.returncode == 0, applied.stdout + applied.stderr

            def complete() -> bool:
                return any(
                    (e.subject, e.type) == ("told", "dev.rollout.module.complete") for e in receiver.accepted("ops")
                )

            wait_for("the complete notification", complete, timeout=120)

            def dead_lettered() -> list[DeadLetter]:
                with as_user("rollout-cli-reader"):
                    records = asyncio.run(client.read_all(engine.bootstrap, TOPICS.dead_letters))
                letters = [DeadLetter.read(r.value) for r in records if r.value is not None]
                return [letter for letter in letters if letter.stage == "notifier" and letter.key == "told"]

            letters = wait_for("the refused notifications' dead letters", dead_lettered, timeout=60)
            assert all(letter.reason.startswith("webhook hook-2: answered 400") for letter in letters)
        finally:
            notifier.terminate()
            notifier.wait(30)
            engine.processes.remove(notifier)
    log = (engine.workdir / "notifier.log").read_text()
    assert "the broker refused" not in log and "AuthorizationFailed" not in log, log[-3000:]
    before = engine.ends("intents")
    command = RolloutCommanded(module="told", command="abort", user="notifier")
    with as_user("rollout-notifier"), pytest.raises(NotAuthorized) as refused:
        asyncio.run(client.publish(engine.bootstrap, TOPICS.intents, [("told", command.to_bytes())]))
    assert str(refused.value).startswith("not authorized to write topic fleet-a.intents as User:rollout-notifier")
    assert engine.ends("intents") == before


def test_the_snapshotter_takes_retains_and_replays_within_its_acls_and_cannot_publish_intents(
    engine: SecuredEngine,
) -> None:
    """As User:rollout-snapshotter, what the chart's CronJob runs: a snapshot taken, the
    journal, assignments and ticks cut below it (Kafka's DeleteRecords), the tail replayed
    from it and found equal — and an intent, or a cut of a topic not its own, refused."""
    snapshots_dir = engine.workdir / "snapshots"
    taken = engine.cli("rollout-snapshotter", "snapshot", "take", "--dir", str(snapshots_dir))
    assert taken.returncode == 0, taken.stdout + taken.stderr
    with as_user("rollout-cli-reader"):
        ticks_before = asyncio.run(client.end_offsets(engine.bootstrap, TOPICS.ticks))
    wait_for(  # the router moves past the snapshot's time (a tick a second)
        "ticks routed past the snapshot",
        lambda: sum(engine.ends("ticks").values()) > sum(ticks_before.values()) + 2,
        timeout=60,
    )
    retained = engine.cli("rollout-snapshotter", "snapshot", "retain", "--dir", str(snapshots_dir), "--keep", "0s")
    assert retained.returncode == 0, retained.stdout + retained.stderr
    assert "journal partition 0: deleted offsets 0.." in retained.stdout, retained.stdout
    assert f"{TOPICS.ticks} partition 0: deleted offsets 0.." in retained.stdout, retained.stdout
    with as_user("rollout-cli-reader"):
        journal_starts = asyncio.run(log_start_offsets(engine.bootstrap, TOPICS.journal))
        ticks_starts = asyncio.run(log_start_offsets(engine.bootstrap, TOPICS.ticks))
    assert all(start > 0 for start in journal_starts.values()), journal_starts
    assert ticks_starts[0] > 0, ticks_starts

    replayed = engine.cli("rollout-snapshotter", "replay", "--check", "--from-snapshot", str(snapshots_dir))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    for result in (taken, retained, replayed):
        assert "not authorized" not in result.stdout + result.stderr

    before = engine.ends("intents")
    command = RolloutCommanded(module="podinfo", command="abort", user="snapshotter")
    with as_user("rollout-snapshotter"), pytest.raises(NotAuthorized) as refused:
        asyncio.run(client.publish(engine.bootstrap, TOPICS.intents, [("podinfo", command.to_bytes())]))
    assert str(refused.value).startswith("not authorized to write topic fleet-a.intents as User:rollout-snapshotter")
    assert engine.ends("intents") == before
    with as_user("rollout-snapshotter"), pytest.raises(NotAuthorized) as refused:  # Delete on its four topics only
        asyncio.run(delete_records_below(engine.bootstrap, TOPICS.intents, dict.fromkeys(before, 1)))
    assert str(refused.value).startswith(
        "not authorized to delete records of topic fleet-a.intents as User:rollout-snapshotter"
    )
    with as_user("rollout-cli-reader"):
        assert set(asyncio.run(log_start_offsets(engine.bootstrap, TOPICS.intents)).values()) == {0}


def test_the_read_only_cli_cannot_take_a_snapshot_and_is_told_who_may(engine: SecuredEngine) -> None:
    refused = engine.cli("rollout-cli-reader", "snapshot", "take", "--dir", str(engine.workdir / "no-snapshots"))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    expected = "not authorized to read topic fleet-a.assemble-state as User:rollout-cli-reader"
    assert expected in refused.stderr, refused.stderr
    assert "User:rollout-snapshotter" in refused.stderr
    assert not (engine.workdir / "no-snapshots").exists() or not any((engine.workdir / "no-snapshots").iterdir())
