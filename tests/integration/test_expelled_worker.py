"""A worker expelled from its consumer groups mid-rollout — its event loop stopped past the
session timeout, as a long fold or a full collection of a 100,000-cluster state stopped it
(issue 22) — takes its own partitions back and the rollout completes, every status report
counted once.

The worker is SIGSTOPped (the real process, on the real broker) while wave-2 moves, for longer
than its session timeout (10 s in tests: tests/conftest.py), so the broker expels it from every
group; once it runs again it rejoins, loses and is assigned back the same partitions. What must
hold: it takes each decide partition back from its own state without refolding it (the
take-over reads nothing: nobody wrote its state since its own last commit, so its engine keeps
its indexes — rebuilding them at fleet scale is what kept the 100,000-cluster worker from
heartbeating again, streams/delivery.py), and it commits again: the rollout completes, each
report reached the journal once and made one `succeeded` decision, the tracked positions
count every journal and assignments record once, and a clean replay gives the same decisions.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from rollout.wire.events import SyncStatusReported
from tests.integration.chaos import RoundResult, _check, _settle
from tests.integration.stack import Stack, wait_for
from tests.integration.test_staged_rollout import Driver, cluster, module

pytestmark = pytest.mark.integration

SESSION_TIMEOUT = float(os.environ.get("ROLLOUT_SESSION_TIMEOUT", "10"))
PAUSE = SESSION_TIMEOUT + 8.0
FLEET = 40
STAGES = [
    {"name": "canary", "selector": {"matchLabels": {"ring": "canary"}}, "maxConcurrency": 1},
    {"name": "wave-1", "selector": {"matchLabels": {"ring": "wave-1"}}, "maxConcurrency": "50%"},
    {"name": "wave-2", "maxConcurrency": 4},
]
RESTORED = re.compile(r"decide \S+journal-(\d+): state restored \((\d+) records")


def test_a_worker_expelled_mid_rollout_takes_its_partitions_back_unrefolded_and_counts_every_report_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    stack = Stack(kafka_bootstrap, tmp_path, partitions=3, tick_interval=1.0)
    try:
        stack.start_worker()
        assert stack.worker is not None
        for i in range(FLEET):
            ring = "canary" if i == 0 else "wave-1" if i < 5 else "wave-2"
            stack.send("clusters", f"ex-{i:02d}", cluster(f"ex-{i:02d}", labels={"app": "ex", "ring": ring}))
        stack.send("intents", "ex", module("ex", app="ex", tag="2.0.0", stages=STAGES))
        driver = Driver(stack, "ex")

        def wave_2_moving() -> bool:
            targets = driver.step()
            return any(t["stage"] == "wave-2" and t["revision"] == "2.0.0" for t in targets.values())

        wait_for("wave-2 to move", wave_2_moving, timeout=120, interval=0.3)
        before = stack.log("worker")
        stack.worker.send_signal(signal.SIGSTOP)
        try:
            paused_until = time.monotonic() + PAUSE
            while time.monotonic() < paused_until:  # the appliers go on reporting meanwhile
                driver.step()
                time.sleep(0.5)
        finally:
            stack.worker.send_signal(signal.SIGCONT)
        driver.until("Complete", timeout=240)

        after = stack.log("worker")[len(before) :]
        assert "decide: revoked" in after, f"the pause did not expel the worker from its groups:\n{after[-3000:]}"

        def taken_back() -> list[tuple[str, str]] | None:
            found = RESTORED.findall(stack.log("worker")[len(before) :])
            return found if {partition for partition, _ in found} == {"0", "1", "2"} else None

        restored = wait_for("every decide partition taken back", taken_back)
        refolded = {partition: int(folded) for partition, folded in restored if int(folded)}
        assert not refolded, f"partitions taken back refolded state records they held already: {refolded}"

        # every report counted once: in the journal once, one succeeded decision per cluster
        reports = [r for r in stack.records("status") if r.value is not None]
        assert len(reports) == FLEET
        journal = [json.loads(r.value or b"{}") for r in stack.records("journal")]
        journaled = [event["id"] for event in journal if event.get("type") == "SyncStatusReported"]
        for record in reports:
            report = SyncStatusReported.model_validate_json(record.value or b"")
            assert journaled.count(report.id) == 1, (
                f"{report.cluster}'s report is in the journal {journaled.count(report.id)} times"
            )
        succeeded = [
            document["cluster"]
            for document in (json.loads(r.value or b"{}") for r in stack.records("decisions"))
            if document.get("module") == "ex" and document.get("action") == "succeeded"
        ]
        assert sorted(succeeded) == sorted(f"ex-{i:02d}" for i in range(FLEET)), "one succeeded decision per cluster"

        # no journal or assignments offset skipped or counted twice; a clean replay agrees
        _settle(stack)
        result = RoundResult("expelled")
        _check(stack, result)
        assert not result.lost and not result.miscounted and not result.diverged and not result.broken_chains, (
            result.explain()
        )
    finally:
        if stack.worker is not None and stack.worker.poll() is None:
            stack.worker.send_signal(signal.SIGCONT)
        stack.stop()
