"""CLI read verbs against a real broker: `dead-letters`, and unknown modules in `status` /
`history`. Each test uses its own topic prefix; no worker runs (records are published by
hand, in the shape the worker writes)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner

from infra import client
from infra.topics import TopicNames, ensure_topics
from rollout_cli.main import cli
from streams.deadletters import dead_letter

pytestmark = pytest.mark.integration


@pytest.fixture
def prefix(kafka_bootstrap: str) -> str:
    name = f"cli-{uuid.uuid4().hex[:8]}."
    asyncio.run(ensure_topics(kafka_bootstrap, name, 1))
    return name


def run(bootstrap: str, prefix: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [*args, "--bootstrap-servers", bootstrap, "--topic-prefix", prefix])
    return result.exit_code, result.output


def rejected(topic: str, offset: int, value: bytes, key: bytes = b"podinfo") -> SimpleNamespace:
    return SimpleNamespace(topic=topic, partition=0, offset=offset, key=key, value=value)


def test_dead_letters_lists_rejected_inputs_with_reason_stage_position_and_size(
    kafka_bootstrap: str, prefix: str
) -> None:
    topics = TopicNames(prefix)
    code, output = run(kafka_bootstrap, prefix, "dead-letters")
    assert (code, output) == (0, "no dead letters\n")
    big = b'{"type": "ModuleApplied", "module": "' + b"x" * 10_000 + b'"}'
    letters = [
        dead_letter("not JSON: Expecting value", rejected(topics.intents, 7, b"\xff\xfe"), "route"),
        dead_letter("event too large", rejected(topics.intents, 8, big, key=b"big"), "route"),
    ]
    asyncio.run(client.publish(kafka_bootstrap, topics.dead_letters, [("podinfo", v) for v in letters]))

    code, output = run(kafka_bootstrap, prefix, "dead-letters")
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0].split() == ["TIME", "STAGE", "INPUT", "KEY", "SIZE", "REASON"]
    assert "route" in lines[1] and f"{topics.intents}[0]@7" in lines[1] and "2 B" in lines[1]
    assert "not JSON: Expecting value" in lines[1]
    assert "big" in lines[2] and "9.8 KiB" in lines[2] and "event too large" in lines[2]

    code, output = run(kafka_bootstrap, prefix, "dead-letters", "-o", "json")
    assert code == 0
    documents = json.loads(output)
    assert [d["offset"] for d in documents] == [7, 8]
    assert documents[1]["size"] == len(big) and documents[1]["truncated"] is True
    assert all(abs(d["at"] - time.time()) < 120 for d in documents)
    code, output = run(kafka_bootstrap, prefix, "dead-letters", "-o", "yaml")
    assert code == 0 and [d["reason"] for d in yaml.safe_load(output)] == [
        "not JSON: Expecting value",
        "event too large",
    ]

    time.sleep(1.5)
    code, output = run(kafka_bootstrap, prefix, "dead-letters", "--since", "1s")
    assert (code, output) == (0, "no dead letters in that time\n")
    code, output = run(kafka_bootstrap, prefix, "dead-letters", "--since", "1h", "-o", "json")
    assert code == 0 and len(json.loads(output)) == 2


def test_status_and_history_of_an_unknown_module_are_errors(kafka_bootstrap: str, prefix: str) -> None:
    for verb in ("status", "history"):
        code, output = run(kafka_bootstrap, prefix, verb, "nosuchmodule")
        assert (code, output) == (1, "error: module nosuchmodule not found\n"), verb


def test_history_of_a_module_with_a_status_but_no_decisions_is_an_empty_list(kafka_bootstrap: str, prefix: str) -> None:
    topics = TopicNames(prefix)
    asyncio.run(
        client.publish(kafka_bootstrap, topics.module_status, [("quiet", json.dumps({"module": "quiet"}).encode())])
    )
    code, output = run(kafka_bootstrap, prefix, "history", "quiet", "-o", "json")
    assert (code, json.loads(output)) == (0, [])
