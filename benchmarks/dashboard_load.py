"""Page load time of the dashboard over a fleet of N clusters (prints figures; asserts nothing).

    .venv/bin/python benchmarks/dashboard_load.py            # N = 10000 (the default)
    .venv/bin/python benchmarks/dashboard_load.py 2000 --loads 3

Broker: ROLLOUT_BOOTSTRAP_SERVERS, or the local one (`rollout kafka start`). Every run uses
fresh topics (a random prefix) and deletes them at the end. Browser: /usr/bin/chromium
(Debian's `chromium`), driven by Playwright.

1. A real `rollout worker` stages one module over N ready clusters (stages canary 1 %,
   wave-1 25 %, wave-2 the rest behind an approval): module-status, N rollout-targets and
   the assignments' decisions are on the topics when the dashboard starts.
2. `rollout dashboard` starts; **catch-up** is the time until /readyz answers 200 (it has
   read every projection topic to its end).
3. Each page is loaded `--loads` times in a fresh browser context; **page load** runs from
   `page.goto` to the page's content drawn (the module row; the stage cards and the first
   page of cluster cells; the clusters table's page range). Median and worst are printed,
   with the size of the JSON each page fetched.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from infra import client
from infra.localkafka import discover_bootstrap
from infra.topics import TopicNames, delete_topics, ensure_topics
from rollout.api.manifests import MANIFEST_ADAPTER
from rollout.wire.events import ClusterObserved, ModuleApplied
from rollout.wire.status import ModuleStatus
from rollout_cli.options import free_port

CHROMIUM = "/usr/bin/chromium"
PAGES = {
    "modules (#/)": ("#/", "[data-testid=module-row-fleet]"),
    "module (#/modules/fleet)": ("#/modules/fleet", "[data-testid=stage-clusters] .cell"),
    "clusters (#/clusters)": ("#/clusters", "[data-testid=page-range]"),
}
API = ["/api/overview", "/api/modules/fleet", "/api/modules/fleet/clusters?limit=500", "/api/clusters?limit=100"]


def cluster(index: int, count: int) -> ClusterObserved:
    ring = "canary" if index < max(1, count // 100) else "wave-1" if index < count // 4 else "wave-2"
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": f"c-{index:05d}", "namespace": "fleet", "labels": {"app": "fleet", "ring": ring}},
            "status": {"controlPlaneReady": True, "kubeconfigSecret": True},
        }
    )
    return ClusterObserved(cluster=manifest)


def fleet_module() -> ModuleApplied:
    stages = [
        {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}, "maxConcurrency": 10},
        {"name": "wave-1", "selector": {"matchLabels": {"ring": "wave-1"}}, "maxConcurrency": 50},
        {"name": "wave-2", "maxConcurrency": "10%", "requireApproval": True},
    ]
    manifest = MANIFEST_ADAPTER.validate_python(
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "Module",
            "metadata": {"name": "fleet", "namespace": "fleet"},
            "spec": {
                "selector": {"matchLabels": {"app": "fleet"}},
                "sync": {"source": {"git": {"url": "https://example.com/repo", "version": {"tag": "1.0.0"}}}},
                "rollout": {"stages": stages},
            },
        }
    )
    return ModuleApplied(module=manifest)


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "rollout_cli.main", *args], env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )


def wait(what: str, probe: object, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if probe():  # type: ignore[operator]
            return time.monotonic() - started
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


async def stage_fleet(bootstrap: str, topics: TopicNames, count: int) -> None:
    clusters = [cluster(i, count) for i in range(count)]
    await client.publish(bootstrap, topics.clusters, [(c.cluster.metadata.name, c.to_bytes()) for c in clusters])
    fleet = await client.end_offsets(bootstrap, topics.clusters)
    module = fleet_module().model_copy(update={"fleet": {p: o for p, o in fleet.items() if o > 0}})
    await client.publish(bootstrap, topics.intents, [("fleet", module.to_bytes())])


def staged_members(bootstrap: str, topics: TopicNames) -> int:
    status = client.run(client.read_latest(bootstrap, topics.module_status)).get("fleet")
    return ModuleStatus.read(status).members if status is not None else 0


def measure_pages(base: str, loads: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    timings: dict[str, list[float]] = {name: [] for name in PAGES}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        for name, (route, ready) in PAGES.items():
            for _ in range(loads):
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                page = context.new_page()
                started = time.monotonic()
                page.goto(f"{base}/{route}")
                page.wait_for_selector(ready, timeout=60_000)
                timings[name].append(time.monotonic() - started)
                context.close()
        browser.close()
    return timings


def api_sizes(base: str) -> dict[str, int]:
    sizes = {}
    for path in API:
        with urllib.request.urlopen(base + path, timeout=30) as response:
            sizes[path] = len(response.read())
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clusters", nargs="?", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=5, help="loads of each page (default 5)")
    options = parser.parse_args()
    bootstrap = os.environ.get("ROLLOUT_BOOTSTRAP_SERVERS") or discover_bootstrap()
    if not bootstrap:
        raise SystemExit("no broker: set ROLLOUT_BOOTSTRAP_SERVERS or `rollout kafka start`")
    prefix = f"bench-dash-{uuid.uuid4().hex[:8]}."
    topics = TopicNames(prefix)
    workdir = Path(tempfile.mkdtemp(prefix="dashboard-bench-"))
    env = {**os.environ, "ROLLOUT_BOOTSTRAP_SERVERS": bootstrap, "ROLLOUT_TOPIC_PREFIX": prefix}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        asyncio.run(ensure_topics(bootstrap, prefix, 4))
        processes.append(spawn(["worker", "--partitions", "4", "--web-port", "0"], env, workdir / "worker.log"))
        wait("the worker", lambda: "worker ready:" in (workdir / "worker.log").read_text(errors="replace"), 120)
        started = time.monotonic()
        asyncio.run(stage_fleet(bootstrap, topics, options.clusters))
        wait("the module to be staged", lambda: staged_members(bootstrap, topics) >= options.clusters, 600)
        print(f"fleet:      {options.clusters} clusters staged by the worker in {time.monotonic() - started:.1f} s")
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        processes.append(spawn(["dashboard", "--port", str(port)], env, workdir / "dashboard.log"))
        catch_up = wait("the dashboard to catch up", lambda: http_ok(base + "/readyz"), 300)
        print(f"catch-up:   {catch_up:.2f} s from start to /readyz (every projection topic read)")
        for path, size in api_sizes(base).items():
            print(f"json:       {path:<42} {size / 1024:8.1f} KiB")
        for name, seconds in measure_pages(base, options.loads).items():
            print(
                f"page load:  {name:<26} median {statistics.median(seconds) * 1000:6.0f} ms, "
                f"worst {max(seconds) * 1000:6.0f} ms ({len(seconds)} loads)"
            )
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=60)
        asyncio.run(delete_topics(bootstrap, prefix))


if __name__ == "__main__":
    main()
