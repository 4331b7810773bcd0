"""`rollout up`: everything on one machine, until Ctrl-C.

    the local broker (found, or started) ──► the topics ──► child processes, each
    `python -m rollout_cli.main <command>` logging under .rollout/logs: worker, applier
    (directory sink), gate runner, dashboard (and watch-clusters with --clusters N: a local
    fleet on real Flux; the notifier with --notify / --notifier-config: it starts from the
    earliest decision the first time, so the example's first ones are not lost to its start)
    ──► the example fleet applied, when asked ──► a live summary of
    the module-status topic (views/status_summary.py)

Ctrl-C (or a child exiting) stops the children, the local fleet and, if it started it,
the broker.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import click

from infra import client
from infra.topics import TopicNames, ensure_topics
from rollout_cli.processes.signals import stop_on_signals
from rollout_cli.views.status_summary import StatusSummary

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = log.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "rollout_cli.main", *args],
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _command(process: subprocess.Popen[bytes]) -> str:
    """The rollout command a child started by `_spawn` runs (`worker`, `applier`, …)."""
    return cast(list[str], process.args)[3]


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_up(
    *,
    bootstrap: str | None,
    prefix: str,
    example: bool,
    sink_spec: str,
    simulate: bool,
    partitions: int,
    tick_interval: float,
    web_port: int = 6066,
    dashboard_port: int = 0,
    log_dir: Path = Path(".rollout/logs"),
    clusters: int = 0,
    notifier_args: list[str] | None = None,
) -> None:
    bootstrap, started_broker = _broker_for_up(bootstrap)
    click.echo(f"kafka:   {bootstrap}")
    children: list[subprocess.Popen[bytes]] = []
    fleet = None
    try:
        created = asyncio.run(ensure_topics(bootstrap, prefix, partitions))
        click.echo(f"topics:  prefix {prefix!r}, {partitions} partitions ({len(created)} created)")
        env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
        worker_args = ["--partitions", str(partitions), "--tick-interval", str(tick_interval)]
        applier_args = ["--sink", sink_spec, *(["--simulate-status"] if simulate else [])]
        if clusters:
            fleet = _start_local_fleet(clusters, log_dir.parent / "local-fleet")
            kubeconfig = str(fleet.management_kubeconfig)
            applier_args = ["--sink", "kubernetes", "--kubeconfig", kubeconfig, "--namespace", "fleet"]
            watch = ["watch-clusters", "--kubeconfig", kubeconfig, "--namespace", "fleet", "--web-port", "0"]
            children.append(_spawn(watch, env, log_dir / "watch-clusters.log"))
            click.echo(f"clusters: pid {children[-1].pid}, log {log_dir / 'watch-clusters.log'} (Cluster API objects)")
        dashboard_auth = _dashboard_auth(str(fleet.management_kubeconfig) if fleet is not None else None)
        children += _spawn_stack(env, log_dir, applier_args, web_port, dashboard_port, worker_args, dashboard_auth)
        if notifier_args is not None:
            notify = ["notifier", *notifier_args, "--start-from", "earliest", "--web-port", "0"]
            children.append(_spawn(notify, env, log_dir / "notifier.log"))
            click.echo(f"notify:  pid {children[-1].pid}, log {log_dir / 'notifier.log'} (decisions as CloudEvents)")
        out = None if clusters else Path(sink_spec.partition(":")[2])
        if out is not None:
            click.echo(f"flux:    YAML goes to {out}/ (remote/<ns>/<cluster>/, proxy/<cluster>/)")
        if fleet is not None:
            wait_for_clusters(bootstrap, prefix, fleet.cluster_names)
            _apply_files(bootstrap, prefix, [fleet.manifests / "fleet.yaml"])
            _explain_local_fleet(fleet)
        elif example:
            _apply_files(bootstrap, prefix, [EXAMPLES])
        click.echo("running; Ctrl-C stops everything\n")
        asyncio.run(_summarize(bootstrap, prefix, children, out))
    except KeyboardInterrupt:
        pass
    finally:
        click.echo("\nstopping...")
        for child in reversed(children):
            _terminate(child)
        if fleet is not None:
            fleet.stop()
            click.echo("local fleet stopped")
        if started_broker is not None:
            started_broker.stop()
            click.echo("kafka broker stopped")
        click.echo("stopped")


def _start_local_fleet(clusters: int, workdir: Path) -> Any:
    """A fresh local fleet (`infra.localfleet`) in `workdir`: its API servers, Flux, Git server."""
    import shutil

    from infra.localfleet import LocalFleet
    from infra.localflux import LocalFluxError
    from infra.localkube import LocalKubeError
    from projections.crds import CRD_DIRECTORY
    from rollout_cli.options import fail

    shutil.rmtree(workdir, ignore_errors=True)  # the fleet is new each time; the broker's topics are not
    click.echo(f"fleet:   a management cluster and {clusters} workload cluster(s) on real Flux, in {workdir}")
    fleet = LocalFleet(workdir, clusters, CRD_DIRECTORY, progress=lambda m: click.echo(f"  {m}"))
    try:
        fleet.start()
    except (LocalFluxError, LocalKubeError, OSError) as error:
        fleet.stop()
        fail(f"cannot start the local fleet: {error}")
    except BaseException:  # Ctrl-C while building or starting: leave no process behind
        fleet.stop()
        raise
    return fleet


def ready_clusters(bootstrap: str, prefix: str) -> set[str]:
    """Clusters whose latest observation on the cluster-observations topic says ready."""
    from rollout.wire.events import ClusterObserved, parse_event

    ready = set()
    for record in asyncio.run(client.read_all(bootstrap, TopicNames(prefix).clusters)):
        event = parse_event(record.value) if record.value is not None else None
        if isinstance(event, ClusterObserved) and event.cluster.status.ready:
            ready.add(event.cluster.name)
        elif record.key is not None:
            ready.discard(record.key)
    return ready


def wait_for_clusters(bootstrap: str, prefix: str, names: list[str], timeout: float = 120.0) -> None:
    """Until `rollout watch-clusters` has published every cluster of the local fleet as ready:
    applied before, the example's stages would find no members yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready_clusters(bootstrap, prefix) >= set(names):
            click.echo(f"clusters: {len(names)} ready ({', '.join(names)})")
            return
        time.sleep(0.5)
    raise click.ClickException(f"watch-clusters did not publish {', '.join(names)} as ready within {timeout:.0f}s")


def _explain_local_fleet(fleet: Any) -> None:
    manifests = fleet.manifests
    click.echo("  (BootstrapModule platform, applied from the management cluster; Module podinfo, staged)")
    click.echo(f"  upgrade:        rollout apply -f {manifests / 'podinfo-v1.1.0.yaml'}")
    click.echo(f"  a broken canary: rollout apply -f {manifests / 'podinfo-v1.2.0.yaml'}   (rolled back)")
    click.echo(f"  kubeconfigs:    {fleet.workdir}/<management|cluster-N>.kubeconfig; logs in {fleet.workdir}")


def _broker_for_up(bootstrap: str | None) -> tuple[str, Any]:
    """The broker `up` uses: the one given, the local one running, or a local one it starts
    (returned too, to be stopped with the rest)."""
    from infra.localkafka import KafkaError, LocalKafka, discover_bootstrap
    from rollout_cli.options import fail

    if bootstrap is None:
        bootstrap = discover_bootstrap()
    if bootstrap is not None:
        return bootstrap, None
    click.echo("starting the local Kafka broker (first run downloads its jars from Maven Central)...")
    broker = LocalKafka(progress=lambda m: click.echo(f"  {m}"))
    try:
        info = broker.start()
    except KafkaError as error:
        fail(str(error))
    return info.bootstrap, broker


def _spawn_stack(
    env: dict[str, str],
    logs: Path,
    applier_args: list[str],
    web_port: int,
    dashboard_port: int,
    worker_args: list[str],
    dashboard_auth: list[str],
) -> list[subprocess.Popen[bytes]]:
    """Worker, applier, gate runner (and the dashboard, given a port), each logging to `logs`."""
    simulate = "--simulate-status" in applier_args
    worker = _spawn(["worker", *worker_args, "--web-port", str(web_port)], env, logs / "worker.log")
    applier_port = str(web_port + 1 if web_port else 0)
    applier = _spawn(["applier", *applier_args, "--web-port", applier_port], env, logs / "applier.log")
    gates = _spawn(["gate-runner", "--web-port", "0"], env, logs / "gate-runner.log")
    click.echo(f"worker:  pid {worker.pid}, log {logs / 'worker.log'}")
    click.echo(
        f"applier: pid {applier.pid}, log {logs / 'applier.log'}"
        + (" (reports written syncs as succeeded: simulated)" if simulate else "")
    )
    click.echo(f"gates:   pid {gates.pid}, log {logs / 'gate-runner.log'} (health gates of soaking stages)")
    children = [worker, applier, gates]
    if dashboard_port:
        web_host = env.get("ROLLOUT_WEB_HOST") or "127.0.0.1"
        log = logs / "dashboard.log"
        dashboard = _spawn(["dashboard", "--port", str(dashboard_port), "--host", web_host, *dashboard_auth], env, log)
        children.append(dashboard)
        click.echo(f"dashboard: http://{web_host}:{dashboard_port}/ (pid {dashboard.pid}, log {log})")
        if "--insecure-no-auth" in dashboard_auth:
            click.secho(
                "           INSECURE: no login (--insecure-no-auth, loopback only); --clusters N gives it a login",
                fg="red",
            )
        else:
            click.echo(f"           log in with a token of {dashboard_auth[1]} (its users' RBAC decides)")
    return children


def _dashboard_auth(kubeconfig: str | None) -> list[str]:
    """The local dashboard's login: Kubernetes tokens checked by the local fleet's management API
    server when there is one (`--clusters`); otherwise no API server exists to check anyone, so
    the dashboard runs --insecure-no-auth, which it allows on a loopback address only."""
    if kubeconfig is None:
        return ["--insecure-no-auth"]
    return ["--kubeconfig", kubeconfig, "--namespace", "fleet"]


def _apply_files(bootstrap: str, prefix: str, paths: list[Path]) -> None:
    from rollout_cli.publishing.intents import intents_for, publish_intents
    from rollout_cli.publishing.manifest_files import load_manifest_files

    intents = intents_for(load_manifest_files(paths))
    asyncio.run(publish_intents(bootstrap, TopicNames(prefix), intents))
    click.echo(f"example: applied {len(intents)} manifests from {', '.join(map(str, paths))}")


async def _summarize(bootstrap: str, prefix: str, children: list[subprocess.Popen[bytes]], out: Path | None) -> None:
    stop = asyncio.Event()
    stop_on_signals(stop)
    names = TopicNames(prefix)
    summary = StatusSummary()

    async def watch_status() -> None:
        from_beginning = True  # once: after a broker error only new records (no replayed history)
        while not stop.is_set():
            try:
                async for record in client.follow(bootstrap, names.module_status, from_beginning=from_beginning):
                    if record.key is None:
                        continue
                    try:
                        document = record.json()
                    except ValueError:
                        document = "unreadable"  # summarised as not a module-status document
                    line = summary.line(record.key, document)
                    if line is not None:
                        files = "" if out is None or document is None else f"  ({_count_files(out)} Flux files)"
                        click.echo(f"{time.strftime('%H:%M:%S')} {line}{files}")
            except client.MissingTopic:  # not created yet
                await asyncio.sleep(1)
            except Exception as error:  # the broker went away: follow what changes once it is back
                if from_beginning:
                    click.echo(f"summary: cannot read {names.module_status} ({error}); retrying", err=True)
                from_beginning = False
                await asyncio.sleep(1)

    async def watch_children() -> None:
        while not stop.is_set():
            for child in children:
                if child.poll() is not None:
                    click.echo(f"error: child process {_command(child)} exited with {child.returncode}; see its log")
                    stop.set()
            await asyncio.sleep(1)

    tasks = [asyncio.create_task(watch_status()), asyncio.create_task(watch_children())]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _count_files(out: Path) -> int:
    return sum(1 for _ in out.rglob("*.yaml")) if out.exists() else 0
