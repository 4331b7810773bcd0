"""How many assemblage snapshots `rollout applier` applies per second, with 1, 2 and 4 replicas.

    .venv/bin/python benchmarks/appliers.py                          # both sinks
    .venv/bin/python benchmarks/appliers.py --sink dir --clusters 10000
    .venv/bin/python benchmarks/appliers.py --sink kubernetes --kube-clusters 400 --workloads 2
    .venv/bin/python benchmarks/appliers.py --sink dir --clusters 100 --modules 50 --replicas 2
    .venv/bin/python benchmarks/appliers.py --in-process --clusters 100 --modules 50    # no broker, no subprocess

Broker: ROLLOUT_BOOTSTRAP_SERVERS, or the local one (`rollout kafka start`); fresh topics
(a random prefix, 4 partitions: at most 4 replicas get a share), deleted at the end.

What is fed: one ProxyAssemblage snapshot per cluster (version 1, one sync: the podinfo
Module of the 10,000-cluster rollout, Git source and a Kustomization), serialized as the
assembler writes it, published straight onto the proxy-assemblages topic the appliers
consume — not through the engine, so the worker's pace does not bound what is measured.
With `--modules N` (directory sink), N modules roll out to every cluster together: each
cluster gets N snapshots, the k-th (version k) carrying modules m-000 … m-(k-1) — every
move a full snapshot of the cluster's modules, as the assembler publishes them — published
round by round (every cluster's version 1, then every cluster's version 2, …); a replica
behind may then apply only a cluster's newest of a batch (the others count as applies,
outcome `superseded`), as it would in a rollout.
Everything after the topic is the user's path: each replica is a `rollout applier`
subprocess (same `--group-id`, its own `--web-port`), started before the snapshots are
published and left until every replica is assigned and the group has settled.

- **dir**: `--sink dir:PATH --simulate-status` (each replica its own directory, as one
  writer per root requires), so the status reports are published too, as in a rollout run
  this way; lease heartbeats at the default.
- **kubernetes**: `--sink kubernetes` against LocalKube (`infra.localkube`): one etcd, a
  management kube-apiserver holding the kubeconfig secrets (`<cluster>-kubeconfig`, as
  Cluster API writes them) and `--workloads` workload kube-apiservers with the Flux CRDs;
  the clusters are spread over them, each snapshot's GitRepository and Kustomization applied
  inside its workload apiserver. No Flux controllers run (objects are applied, never
  reconciled); the sink's status reporter and drift watches run as they would.

The clock runs from the first snapshot published until the replicas' `rollout_applies_total`
(`/metrics`) add up to the snapshots fed. Printed per replica count: the total rate, the
ratio to one replica, the replicas' CPU time per snapshot (user + system, from /proc: the
figure that holds when the machine is shared), each replica's share of the rate (its
applies over the same window) and how many of the applies were superseded snapshots; for
the Kubernetes sink also the CPU LocalKube's apiservers and etcd spent per snapshot
meanwhile (they share the machine: what the sink asks of them slows it down too).

`--in-process` runs the applier's batch code itself (`Applier._apply_batch`: coalescing,
decoding, the directory sink's batch with its file system syncs, the simulated status reports
built and serialised) on the same records in this process, without a broker: batches of
`--batch` records (500, the consumer's `max_records`) spread over 4 partitions as the topic
would, the reports handed to a producer stand-in that drops them. It prints this process's
CPU per snapshot — what the applier spends of its own, without its Kafka clients — and is
steadier than the subprocess runs on a shared machine.

The code run is the Python path's: `PYTHONPATH=<an export of another commit>` measures that
commit (`git archive <commit> | tar -x -C DIR`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer

from infra.localkafka import discover_bootstrap
from infra.localkafka.processes import free_ports
from infra.topics import TopicNames, delete_topics, ensure_topics
from rollout.api.manifests import Sync
from rollout.wire.assemblages import Assemblage, AssignedSync

PARTITIONS = 4
NAMESPACE = "fleet"
SETTLE = 6.0  # seconds every replica must stay assigned before publishing (a group rebalance is ~3 s)
TIMEOUT = 900.0


def snapshot(cluster: str, version: int = 1, modules: list[str] | None = None) -> bytes:
    """The ProxyAssemblage the assembler publishes for `cluster` (streams/assembler.py's
    encoding): the podinfo sync as module "app", or as each of `modules`."""
    sync = Sync.model_validate(
        {
            "source": {"git": {"url": "https://github.com/stefanprodan/podinfo", "version": {"tag": "6.7.0"}}},
            "package": {"kustomize": {"path": "./kustomize"}},
        }
    )
    syncs = [
        AssignedSync(module=module, module_namespace=NAMESPACE, revision="6.7.0", generation=1, sync=sync)
        for module in modules or ["app"]
    ]
    document = Assemblage.model_validate(
        {
            "kind": "ProxyAssemblage",
            "metadata": {"name": cluster, "namespace": NAMESPACE},
            "version": version,
            "spec": {"syncs": [assigned.model_dump(by_alias=True) for assigned in syncs]},
        }
    )
    return orjson.dumps(document.model_dump(mode="json", by_alias=True), option=orjson.OPT_SORT_KEYS)


def snapshots(clusters: list[str], modules: int) -> list[tuple[str, bytes]]:
    """What is fed: one snapshot per cluster, or (`modules` > 1) `modules` rounds of a
    snapshot per cluster, round k adding module k (see the module doc)."""
    if modules <= 1:
        return [(cluster, snapshot(cluster)) for cluster in clusters]
    names = [f"m-{index:03d}" for index in range(modules)]
    return [
        (cluster, snapshot(cluster, version, names[:version]))
        for version in range(1, modules + 1)
        for cluster in clusters
    ]


async def publish(bootstrap: str, topic: str, records: list[tuple[str, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for cluster, value in records:
            await producer.send(topic, key=cluster.encode(), value=value)
        await producer.flush()
    finally:
        await producer.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(port: int) -> tuple[bool, int, int]:
    """(ready, applies so far, of which superseded) of the replica serving on `port`."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            ready = answer.status == 200
    except (urllib.error.URLError, OSError):
        ready = False
    applies = superseded = 0
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith("rollout_applies_total{"):
                    applies += int(float(line.rsplit(" ", 1)[1]))
                    superseded += int(float(line.rsplit(" ", 1)[1])) if 'outcome="superseded"' in line else 0
    except (urllib.error.URLError, OSError):
        pass
    return ready, applies, superseded


@contextmanager
def replicas(
    env: dict[str, str], workdir: Path, count: int, sink_args: list[list[str]]
) -> Iterator[list[tuple[int, int]]]:
    """`count` `rollout applier` subprocesses in one group; yields their (web port, pid)."""
    ports = free_ports(count)
    group = f"bench-{uuid.uuid4().hex[:6]}"
    processes = []
    for index, port in enumerate(ports):
        log = (workdir / f"applier-{count}-{index}.log").open("ab")
        command = [sys.executable, "-m", "rollout_cli.main", "applier", *sink_args[index]]
        command += ["--web-port", str(port), "--group-id", group]
        processes.append(subprocess.Popen(command, env=env, stdout=log, stderr=log, cwd=workdir))
    try:
        settled_since = None
        deadline = time.monotonic() + 120
        while settled_since is None or time.monotonic() - settled_since < SETTLE:
            if time.monotonic() > deadline:
                sys.exit(f"the replicas did not all become ready; see {workdir}/applier-{count}-*.log")
            if all(scrape(port)[0] for port in ports):
                settled_since = settled_since or time.monotonic()
            else:
                settled_since = None
            time.sleep(0.5)
        yield [(port, process.pid) for port, process in zip(ports, processes, strict=True)]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)


def measure(
    bootstrap: str,
    topic: str,
    records: list[tuple[str, bytes]],
    replicas: list[tuple[int, int]],
    servers: Sequence[int] = (),
) -> Measured:
    """From the first snapshot published until all are applied: seconds, and per replica
    its applies and the CPU seconds it used; with `servers` (pids: LocalKube's apiservers
    and etcd), the CPU seconds they used meanwhile."""
    cpu_before = [cpu_seconds(pid) for _, pid in replicas]
    servers_before = sum(cpu_seconds(pid) for pid in servers)
    started = time.monotonic()
    asyncio.run(publish(bootstrap, topic, records))
    while True:
        scraped = [scrape(port) for port, _ in replicas]
        counts = [applies for _, applies, _ in scraped]
        if sum(counts) >= len(records):
            seconds = time.monotonic() - started
            cpu = [cpu_seconds(pid) - before for (_, pid), before in zip(replicas, cpu_before, strict=True)]
            servers_cpu = sum(cpu_seconds(pid) for pid in servers) - servers_before
            return Measured(seconds, counts, cpu, sum(superseded for _, _, superseded in scraped), servers_cpu)
        if time.monotonic() - started > TIMEOUT:
            sys.exit(f"only {sum(counts)} of {len(records)} snapshots applied after {TIMEOUT:.0f}s")
        time.sleep(0.1)


@dataclass
class Measured:
    seconds: float
    applies: list[int]  # per replica
    cpu: list[float]  # per replica, seconds
    superseded: int = 0  # of the applies: snapshots a later one of the same cluster in the batch superseded
    servers_cpu: float | None = None  # seconds: the Kubernetes sink's apiservers and etcd


def report(sink: str, count: int, clusters: int, measured: Measured, single: float | None) -> float:
    seconds = measured.seconds
    total = clusters / seconds
    shares = ", ".join(f"{n / seconds:.0f}" for n in measured.applies)
    cpu = 1000 * sum(measured.cpu) / clusters
    ratio = f"{total / single:.2f}x" if single else "1.00x"
    servers = ""
    if measured.servers_cpu is not None:
        servers = f"  apiservers+etcd {1000 * measured.servers_cpu / clusters:.2f} ms/snap"
    print(
        f"{sink:<10} {count:>8}  {clusters:>8}  {seconds:>7.1f}s  {total:>8.0f}/s  {ratio:>6}  {cpu:>9.2f}  [{shares}]"
        f"  superseded {measured.superseded}{servers}  load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return total


def run_dir(bootstrap: str, counts: list[int], clusters: int, modules: int) -> None:
    names = [f"c-{index:05d}" for index in range(clusters)]
    records = snapshots(names, modules)
    single = None
    for count in counts:
        prefix = f"bench-{uuid.uuid4().hex[:8]}."
        workdir = Path(tempfile.mkdtemp(prefix="appliers-bench-"))
        env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
        asyncio.run(ensure_topics(bootstrap, prefix, PARTITIONS))
        try:
            sink_args = [["--sink", f"dir:{workdir / f'sink-{i}'}", "--simulate-status"] for i in range(count)]
            with replicas(env, workdir, count, sink_args) as ports:
                measured = measure(bootstrap, TopicNames(prefix).proxy, records, ports)
            total = report("dir", count, len(records), measured, single)
            single = single or total
        finally:
            asyncio.run(delete_topics(bootstrap, prefix))
            shutil.rmtree(workdir, ignore_errors=True)


async def register_clusters(management: dict[str, object], workloads: list[str], names: list[str]) -> None:
    """The kubeconfig secret of each cluster (round robin over the workload apiservers)."""
    from kubernetes_asyncio.client import CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException
    from kubernetes_asyncio.config import new_client_from_config_dict

    from infra.localfleet.capi import ensure_namespace, kubeconfig_secret

    api = await new_client_from_config_dict(management)
    async with api:
        await ensure_namespace(api, NAMESPACE)
        core = CoreV1Api(api)
        for index, name in enumerate(names):
            secret = kubeconfig_secret(name, NAMESPACE, workloads[index % len(workloads)])
            try:
                await core.create_namespaced_secret(NAMESPACE, secret)
            except ApiException as error:
                if error.status != 409:
                    raise


def run_kubernetes(bootstrap: str, counts: list[int], clusters: int, workloads: int) -> None:
    from infra.localflux.cluster import prepare_cluster
    from infra.localkube import LocalKube
    from projections.crds import CRD_DIRECTORY

    workdir = Path(tempfile.mkdtemp(prefix="appliers-bench-kube-"))
    kube = LocalKube(workdir / "kube", progress=lambda message: print(f"  {message}", flush=True))
    kube.start()
    try:
        management = kube.add_apiserver("management")
        servers = [kube.add_apiserver(f"workload-{index}") for index in range(1, workloads + 1)]
        for server in (management, *servers):
            asyncio.run(prepare_cluster(server.kubeconfig(), [CRD_DIRECTORY]))
        kubeconfig = management.write_kubeconfig(workdir / "management.kubeconfig")
        single = None
        for count in counts:
            # fresh cluster names per run: every run creates its objects, none finds them there
            names = [f"k{count}-{index:05d}" for index in range(clusters)]
            asyncio.run(register_clusters(management.kubeconfig(), [s.kubeconfig_yaml() for s in servers], names))
            prefix = f"bench-{uuid.uuid4().hex[:8]}."
            env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
            asyncio.run(ensure_topics(bootstrap, prefix, PARTITIONS))
            try:
                sink = ["--sink", "kubernetes", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE]
                sink_args = [sink] * count
                with replicas(env, workdir, count, sink_args) as ports:
                    servers_pids = [server.process.pid for server in (management, *servers)]
                    servers_pids += [kube._etcd.pid] if kube._etcd is not None else []
                    measured = measure(bootstrap, TopicNames(prefix).proxy, snapshots(names, 1), ports, servers_pids)
                total = report("kubernetes", count, clusters, measured, single)
                single = single or total
            finally:
                asyncio.run(delete_topics(bootstrap, prefix))
    finally:
        kube.stop()
        shutil.rmtree(workdir, ignore_errors=True)


class _DroppingProducer:
    """Stands in for the status producer of `--in-process`: the reports are built and
    serialised by the applier, then dropped (no broker)."""

    sent = 0

    async def send(self, topic: str, *, key: bytes, value: bytes) -> None:
        self.sent += 1

    async def flush(self) -> None:
        return None


def run_in_process(clusters: int, modules: int, batch: int) -> None:
    """The applier's batch code on the fed records, in this process (see the module doc)."""
    from aiokafka.structs import ConsumerRecord, TopicPartition

    from infra.observability import Health, Metrics
    from projections.applier import Applier
    from projections.render import FluxRenderer
    from projections.sinks.directory import DirectorySink

    names = [f"c-{index:05d}" for index in range(clusters)]
    partition_of = {name: index % PARTITIONS for index, name in enumerate(names)}
    records = snapshots(names, modules)
    topics = TopicNames("bench-in-process.")
    workdir = Path(tempfile.mkdtemp(prefix="appliers-bench-in-process-"))
    applier = Applier(
        bootstrap="unused",
        names=topics,
        sink=DirectorySink(workdir / "sink", FluxRenderer()),
        group_id="bench",
        report=True,
        on_result=None,
        metrics=Metrics(),
        health=Health(),
        heartbeats=None,
    )
    producer = _DroppingProducer()
    batches = []
    for start in range(0, len(records), batch):
        by_partition: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
        for offset, (cluster, value) in enumerate(records[start : start + batch], start=start):
            tp = TopicPartition(topics.proxy, partition_of[cluster])
            record = ConsumerRecord(tp.topic, tp.partition, offset, 0, 0, cluster.encode(), value, None, 0, 0, [])
            by_partition.setdefault(tp, []).append(record)
        batches.append(by_partition)

    async def apply_all() -> None:
        for by_partition in batches:
            await applier._apply_batch(by_partition, producer)  # type: ignore[arg-type]

    try:
        cpu, started = time.process_time(), time.monotonic()
        asyncio.run(apply_all())
        cpu, seconds = time.process_time() - cpu, time.monotonic() - started
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"{'in-process':<10} {1:>8}  {len(records):>8}  {seconds:>7.1f}s  {len(records) / seconds:>8.0f}/s  "
        f"{'':>6}  {1000 * cpu / len(records):>9.2f}  reports {producer.sent}  superseded {applier.stats.superseded}"
        f"  load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sink", choices=("dir", "kubernetes", "both"), default="both")
    parser.add_argument("--replicas", default="1,2,4", help="replica counts to run, comma-separated")
    parser.add_argument("--clusters", type=int, default=5000, help="snapshots fed to the directory sink")
    parser.add_argument(
        "--modules", type=int, default=1, help="directory sink: modules rolled out to every cluster together"
    )
    parser.add_argument("--kube-clusters", type=int, default=400, help="snapshots fed to the Kubernetes sink")
    parser.add_argument("--workloads", type=int, default=2, help="workload kube-apiservers (LocalKube)")
    parser.add_argument(
        "--in-process", action="store_true", help="the applier's batch code in this process, no broker (module doc)"
    )
    parser.add_argument("--batch", type=int, default=500, help="--in-process: records per consumer batch")
    arguments = parser.parse_args()
    if arguments.in_process:
        print(f"{'':<10} {'':>8}  {'snapshots':>9} {'elapsed':>8}  {'total':>10}  {'':>6}  {'CPU ms/snap':>9}")
        run_in_process(arguments.clusters, arguments.modules, arguments.batch)
        return
    bootstrap = os.environ.get("ROLLOUT_BOOTSTRAP_SERVERS") or discover_bootstrap()
    if bootstrap is None:
        sys.exit("no broker: start one with `rollout kafka start` or set ROLLOUT_BOOTSTRAP_SERVERS")
    counts = [int(count) for count in arguments.replicas.split(",")]
    print(
        f"{'sink':<10} {'replicas':>8}  {'snapshots':>9} {'elapsed':>8}  {'total':>10}  {'ratio':>6}  "
        f"{'CPU ms/snap':>9}  [per replica /s]"
    )
    if arguments.sink in ("dir", "both"):
        run_dir(bootstrap, counts, arguments.clusters, arguments.modules)
    if arguments.sink in ("kubernetes", "both"):
        run_kubernetes(bootstrap, counts, arguments.kube_clusters, arguments.workloads)


if __name__ == "__main__":
    main()
