"""A worker restarted against a fleet's existing topics, N times: restart-to-ready and where it goes.

    ROLLOUT_BOOTSTRAP_SERVERS=… .venv/bin/python benchmarks/restart.py --prefix fleet-2cc6a9. \\
        --workdir /tmp/keep/fleet-xxxx --runs 3 [--from-commit REV]

The topics come from a `benchmarks/fleet.py … --keep-topics --keep DIR` run (its prefix is
printed at the end; `--workdir` is its kept directory: the appliers are started again on its
sinks, with the run's consumer group, so that leases are renewed as during the fleet run's own
restart). Each run starts `rollout worker` the way fleet.py does (`--instance-id
fleet-worker-0`: static membership, no dead member's session to wait for), waits for
/readyz 200, and SIGKILLs it; the next run starts right away. Per run it prints:

* start → first log line: the process's imports, its topic check and setup (the log's own
  timestamps against the moment the process was spawned);
* each stage's take-overs (the seconds each partition's take-over logged, and the state
  records folded);
* the last take-over → `worker ready:` (the loop busy with the first batches, the heap settle);
* restart-to-ready: spawned → /readyz 200 (what fleet.py's "restart-to-ready" measures).

A restart's first run differs from the next ones only by the page cache (the broker's state
topic segments read for the first time since they were written). Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROLLOUT = [sys.executable, "-m", "rollout_cli.main"]
TAKE_OVER = re.compile(
    r"^(\S+ \S+) INFO\s+rollout\.delivery: (\w+) (\S+): state restored \((\d+) records, taken over in ([\d.]+) s\)"
)
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def stamp(text: str) -> float:
    """A log line's timestamp (local time, as logging writes it) as seconds since the epoch."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(
    args: list[str], log: Path, env: dict[str, str], cwd: Path, stacks_every: float = 0
) -> subprocess.Popen[bytes]:
    """`rollout ARGS`, its output to `log`; `stacks_every` > 0: every thread's stack written to
    `log`.stacks that often from the first line the interpreter runs (where a start goes
    before the worker's first log line)."""
    command = ROLLOUT
    if stacks_every > 0:
        command = [sys.executable, "-c", STACKS.format(every=stacks_every, path=f"{log}.stacks")]
    with log.open("ab") as sink:
        return subprocess.Popen([*command, *args], env=env, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT)


STACKS = (
    "import faulthandler, runpy, sys; "
    "faulthandler.dump_traceback_later({every}, repeat=True, file=open({path!r}, 'w')); "
    "sys.argv[0] = 'rollout'; runpy.run_module('rollout_cli.main', run_name='__main__')"
)


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def until_calm(appliers: list[subprocess.Popen[bytes]], window: float = 5.0, share: float = 0.2) -> float:
    """Wait until the appliers use less than `share` of a core over a `window`: a restarted
    applier replays its partitions from the start (heartbeats name the clusters it writes),
    which would otherwise compete with the worker measured. Seconds waited."""
    started = time.monotonic()
    pids = [a.pid for a in appliers]
    while True:
        before = cpu_seconds(pids)
        time.sleep(window)
        if cpu_seconds(pids) - before < share * window and time.monotonic() - started > 2 * window:
            return time.monotonic() - started


def one_restart(env: dict[str, str], cwd: Path, log: Path, args: argparse.Namespace) -> str:
    port = free_port()
    worker_args = ["worker", "--web-port", str(port), "--tick-interval", "10", "--partitions", str(args.partitions)]
    if args.instance_id:
        worker_args += ["--instance-id", args.instance_id]
    started = time.time()
    process = spawn(worker_args, log, env, cwd, args.stacks_every)
    deadline = time.monotonic() + args.timeout
    ready_s = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the worker exited: {log.read_text()[-3000:]}")
        if ready(port):
            ready_s = time.time() - started
            break
        time.sleep(0.1)
    while "worker ready:" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()
    lines = log.read_text(errors="replace").splitlines()
    first = next((stamp(m.group(1)) for line in lines if (m := STAMP.match(line))), None)
    overs: dict[str, list[tuple[float, int]]] = {}
    last_over = None
    for line in lines:
        if m := TAKE_OVER.match(line):
            overs.setdefault(m.group(2), []).append((float(m.group(5)), int(m.group(4))))
            last_over = stamp(m.group(1))
    announced = next((stamp(line[:23]) for line in lines if "worker ready:" in line), None)
    parts = [f"restart-to-ready {ready_s:.2f} s" if ready_s is not None else f"NOT ready in {args.timeout:.0f} s"]
    if first is not None:
        parts.append(f"start → first log {first - started:.2f} s")
    for stage, taken in overs.items():
        seconds = ", ".join(f"{s:.2f}" for s, _ in taken)
        parts.append(f"{stage} take-overs [{seconds}] s, {sum(r for _, r in taken)} records")
    if last_over is not None and announced is not None:
        parts.append(f"last take-over → 'worker ready:' {announced - last_over:.2f} s")
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", required=True, help="the fleet's topic prefix (fleet.py --keep-topics prints it)")
    parser.add_argument("--workdir", type=Path, help="the fleet run's kept directory: its appliers started again")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--appliers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--instance-id", default="fleet-worker-0", help="'' for dynamic membership")
    parser.add_argument("--lease-seconds", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for /readyz per run")
    parser.add_argument(
        "--stacks-every", type=float, default=0, help="seconds: the worker's stacks dumped to its log's .stacks file"
    )
    parser.add_argument("--from-commit", metavar="REV", help="run the worker from `git archive REV`")
    args = parser.parse_args()
    bootstrap = os.environ.get("ROLLOUT_BOOTSTRAP_SERVERS")
    if not bootstrap:
        sys.exit("set ROLLOUT_BOOTSTRAP_SERVERS")
    env = {**os.environ, "ROLLOUT_TOPIC_PREFIX": args.prefix}
    cwd = ROOT
    if args.from_commit:
        cwd = Path(tempfile.mkdtemp(prefix="restart-src-"))
        archive = subprocess.run(["git", "archive", args.from_commit], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(cwd)], input=archive.stdout, check=True)
        env["PYTHONPATH"] = str(cwd)
    else:
        env["PYTHONPATH"] = str(ROOT)
    logs = Path(tempfile.mkdtemp(prefix="restart-"))
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC; load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg())
          + f"; worker from {args.from_commit or 'the working tree'}; logs in {logs}", flush=True)  # fmt: skip
    appliers: list[subprocess.Popen[bytes]] = []
    if args.workdir is not None:
        group = ["--group-id", f"{args.prefix}bench-appliers", "--lease-seconds", str(args.lease_seconds)]
        for i in range(args.appliers):
            sink = ["--sink", f"dir:{args.workdir / f'sink-{i}'}", "--simulate-status", *group, "--web-port", "0"]
            appliers.append(spawn(["applier", *sink], logs / f"applier-{i}.log", env, cwd))
        waited = until_calm(appliers)
        print(f"  {len(appliers)} appliers started on {args.workdir}'s sinks, calm after {waited:.0f} s", flush=True)
    try:
        for run in range(1, args.runs + 1):
            figures = one_restart(env, cwd, logs / f"worker-{run}.log", args)
            print(f"  run {run}: {figures}; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    finally:
        for applier in appliers:
            applier.send_signal(signal.SIGTERM)
            try:
                applier.wait(timeout=30)
            except subprocess.TimeoutExpired:
                applier.kill()
        if cwd != ROOT:
            shutil.rmtree(cwd, ignore_errors=True)


if __name__ == "__main__":
    main()
