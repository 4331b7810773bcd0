"""1,200 generated malformed files (tests/rollout/manifest_fuzz.py, seeded) through the real
`rollout apply` against the real broker, with the engine's topics in place — so anything
that slipped through would be published. For each: no traceback, a non-zero exit, stderr
starting with `error:` and naming the file (and the document and field of a field
problem), without waiting on anything (a refusal that hangs, e.g. on the broker, fails
after HANG_SECONDS; how fast refusals are is printed, not asserted — speed belongs to
benchmarks); and, over the whole run, not one record on the input topics (log end
offsets, aborted transactions included). In-process (click's CliRunner) for speed, and a
handful through a real `rollout` process.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from click.testing import CliRunner

from infra.topics import TopicNames, ensure_topics
from rollout_cli.main import cli
from tests.rollout.manifest_fuzz import Case, malformed_files

pytestmark = pytest.mark.integration
COUNT = 1200
PARTITIONS = 2
ROLLOUT = Path(sys.executable).parent / "rollout"
HANG_SECONDS = 30.0  # a refusal never waits on the broker; far above any machine's load


def log_ends(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Per topic, the sum of its partitions' log end offsets (read_uncommitted: every record)."""

    async def ends() -> dict[str, int]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted")
        await consumer.start()
        try:
            partitions = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
            consumer.assign(partitions)
            offsets = await consumer.end_offsets(partitions)
            return {t: sum(o for tp, o in offsets.items() if tp.topic == t) for t in topics}
        finally:
            await consumer.stop()

    return asyncio.run(ends())


@pytest.fixture(scope="module")
def topics(kafka_bootstrap: str) -> TopicNames:
    prefix = f"fuzz-{uuid.uuid4().hex[:8]}."
    asyncio.run(ensure_topics(kafka_bootstrap, prefix, PARTITIONS))
    return TopicNames(prefix)


def check_refusal(case: Case, path: Path, code: int | None, stderr: str, seconds: float) -> None:
    where = f"case {case.name}: exit {code}, {seconds:.2f}s, stderr {stderr[:500]!r}"
    assert code not in (0, None), where
    assert "Traceback" not in stderr, where
    lines = stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), where
    assert str(path) in lines[0], where
    for words in case.expect:
        assert words in stderr, f"{where}: missing {words!r}"
    assert seconds < HANG_SECONDS, f"{where}: hangs"


def test_a_thousand_malformed_files_are_refused_clearly_without_waiting_and_publish_nothing(
    kafka_bootstrap: str, topics: TopicNames, tmp_path: Path
) -> None:
    cases = malformed_files(COUNT)
    assert len(cases) >= 1000
    watched = [topics.clusters, topics.intents]
    before = log_ends(kafka_bootstrap, watched)
    connection = ["--no-wait", "--bootstrap-servers", kafka_bootstrap, "--topic-prefix", topics.prefix]
    runner = CliRunner()
    started = time.monotonic()
    slowest = (0.0, "")
    for case in cases:
        path = tmp_path / f"{case.name}.yaml"
        path.write_bytes(case.data)
        began = time.monotonic()
        result = runner.invoke(cli, ["apply", "-f", str(path), *connection])
        seconds = time.monotonic() - began
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"case {case.name}: {result.exception!r}") from result.exception
        check_refusal(case, path, result.exit_code, result.stderr, seconds)
        slowest = max(slowest, (seconds, case.name))
    elapsed = time.monotonic() - started
    for case in cases[:: COUNT // 8]:  # a handful through a real process
        path = tmp_path / f"{case.name}.yaml"
        began = time.monotonic()
        process = subprocess.run(
            [str(ROLLOUT), "apply", "-f", str(path), *connection], capture_output=True, text=True, timeout=30
        )
        seconds = time.monotonic() - began  # with the interpreter's start-up and imports
        check_refusal(case, path, process.returncode, process.stderr, seconds)
        assert process.stdout == ""
    assert log_ends(kafka_bootstrap, watched) == before
    print(
        f"\n{len(cases)} malformed files refused in-process in {elapsed:.1f}s; slowest {slowest[1]}: {slowest[0]:.2f}s"
    )
