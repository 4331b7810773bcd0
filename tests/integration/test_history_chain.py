"""Tamper-evident history against a real worker on the real broker: the decisions of a
rollout verify (`rollout history --verify`, exit 0), a well-formed decision appended to the
decisions topic by hand — its prev the chain's real tip, its hash right — is named (exit 1),
and a worker SIGKILLed mid-rollout leaves a chain that still verifies end to end (the head
is committed with the decisions, so the next owner links to the last committed record)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from infra import client
from rollout_cli.main import cli
from streams.chain import GENESIS, record_hash
from tests.integration.chaos import run_round
from tests.integration.stack import EXAMPLES, Stack, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(kafka_bootstrap, tmp_path_factory.mktemp("history-chain"))
    stack.start_worker()
    stack.start_applier("--simulate-status")
    stack.apply(EXAMPLES)
    yield stack
    stack.stop()


def history(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(cli, ["history", *args], env=env, catch_exceptions=False)


def verified(env: dict[str, str], *args: str) -> dict[str, Any]:
    result = history(env, *args, "--verify", "-o", "json")
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    return report


def test_a_rollouts_decisions_verify_chain_by_chain(stack: Stack) -> None:
    wait_for(
        "flux-install's stages to pass (two example clusters are not ready: it stays Progressing)",
        lambda: stack.latest("module_status").get("flux-install", {}).get("stableRevision") == "v2.7.3",
    )
    # the decisions first: the rollout goes on deciding (clusters join, stages pass), so the
    # chains verified afterwards hold at least every decision read here
    decisions = [r.json() for r in stack.records("decisions")]
    report = verified(stack.env)
    assert report["ok"] and report["headsChecked"]
    assert sum(chain["records"] for chain in report["chains"]) >= len(decisions) > 10
    assert all(chain["fromGenesis"] and chain["unchained"] == 0 for chain in report["chains"])
    assert {d["chain"] for d in decisions} <= {chain["chain"] for chain in report["chains"]}
    table = history(stack.env, "podinfo", "--verify")
    assert table.exit_code == 0 and "OK" in table.output and "of podinfo" in table.output, table.output


def test_a_decision_appended_by_hand_is_named_by_verify(stack: Stack) -> None:
    podinfos = wait_for("a decision on podinfo", lambda: [r for r in stack.records("decisions") if r.key == "podinfo"])
    verified(stack.env)
    tip = max(podinfos, key=lambda r: r.json()["seq"])
    real = tip.json()
    chain = real["chain"]
    last = max((r.json() for r in stack.records("decisions") if r.json()["chain"] == chain), key=lambda d: d["seq"])
    # the best forgery someone who can write the topic can make: the chain's real tip as prev,
    # the next seq, a plausible id and reason, the hash computed as the decider computes it
    forged = {
        **real,
        "id": f"{chain}-{int(last['id'].split('-')[1]) + 1}-0",
        "action": "stage-started",
        "reason": "stage wave-2 approved by mallory",
        "seq": last["seq"] + 1,
        "prev": last["hash"],
    }
    forged["hash"] = record_hash(forged)
    value = json.dumps(forged, sort_keys=True, separators=(",", ":")).encode()
    asyncio.run(client.publish(stack.bootstrap, stack.topics.decisions, [("podinfo", value)]))
    # every reader reads committed: while the worker has a transaction open on that partition
    # (it goes on deciding), the last stable offset is before the forgery and no reader sees it
    wait_for(
        "the forgery to be readable past the worker's open transaction",
        lambda: any(r.key == "podinfo" and r.json().get("hash") == forged["hash"] for r in stack.records("decisions")),
    )

    result = history(stack.env, "podinfo", "--verify")
    assert result.exit_code == 1, result.output
    assert f"first record that does not match: chain {chain}: record {forged['id']} at decisions[" in result.output
    # the decider goes on deciding on this chain (the example rollout is not over): if it wrote
    # its own decision with that seq before the forgery landed, the forgery is the second
    # record with its seq; otherwise it is past the decider's committed head. Either way it
    # is the record named, and the chain does not verify.
    assert (
        "past the decider's committed head" in result.output
        or f"a second record with seq {forged['seq']} " in result.output
    ), result.output
    assert history(stack.env, "--verify").exit_code == 1
    replay = CliRunner().invoke(cli, ["replay", "--check"], env=stack.env, catch_exceptions=False)
    assert replay.exit_code == 1 and f"decision {forged['id']}: on the topic but not in the replay" in replay.output


def test_the_chain_verifies_end_to_end_after_the_worker_is_killed_mid_rollout(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    result = run_round(kafka_bootstrap, tmp_path, "sigkill", seed=7)
    assert result.ok, result.explain()  # the round itself: nothing lost or applied twice
    env = {"ROLLOUT_BOOTSTRAP_SERVERS": kafka_bootstrap, "ROLLOUT_TOPIC_PREFIX": result.prefix}
    report = verified(env)
    decisions = [r.json() for r in asyncio.run(client.read_all(kafka_bootstrap, f"{result.prefix}decisions"))]
    assert report["headsChecked"] and {c["chain"] for c in report["chains"]} == {d["chain"] for d in decisions}
    for chain in report["chains"]:
        linked = sorted((d for d in decisions if d["chain"] == chain["chain"]), key=lambda d: d["seq"])
        assert [d["seq"] for d in linked] == list(range(len(linked))) and linked[0]["prev"] == GENESIS
        assert chain["head"] == {"seq": len(linked) - 1, "hash": linked[-1]["hash"]}
    assert len({d["id"] for d in decisions}) == len(decisions) > 300  # two revisions on 150 clusters
