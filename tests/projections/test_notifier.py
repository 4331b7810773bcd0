"""The notifier's parts without Kafka: its configuration, the backoff, what an answer means,
which offsets may be committed, and one webhook's delivery against a real HTTP receiver."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
from pathlib import Path

import aiohttp
import pytest

from infra.metrics import Metrics
from projections.notifier.config import ConfigError, Retry, Webhook, load_config
from projections.notifier.delivery import Notification, Outcome, WebhookDelivery, backoff_delay, judge
from projections.notifier.progress import Progress
from rollout.wire.dead_letters import DeadLetter
from rollout.wire.decision_reasons import AwaitingApproval
from rollout.wire.decisions import DecisionDocument
from rollout.wire.notifications import CONTENT_TYPE, cloud_event
from tests.support.webhook_receiver import running_receiver

# -- configuration ------------------------------------------------------------------------

EXAMPLE = """
source: /rollout/prod
queueSize: 50
retry: {attempts: 5, initialDelay: 500ms, maxDelay: 30s}
webhooks:
  - name: oncall
    url: https://hooks.example.com/rollout
    types: [dev.rollout.module.halted, dev.rollout.module.rollback-started]
    authHeader: {valueEnv: ONCALL_TOKEN}
  - name: chat
    url: http://relay.chat.svc:8080/rollout
    modules: ["shop", "pay-*"]
    timeout: 3s
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "notifier.yaml"
    path.write_text(text)
    return path


def test_the_documented_example_configuration_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, EXAMPLE))
    assert config.source == "/rollout/prod" and config.queue_size == 50
    assert config.retry == Retry(attempts=5, initial_delay=0.5, max_delay=30.0)
    oncall, chat = config.webhooks
    assert oncall.auth_header is not None and oncall.auth_header.value_env == "ONCALL_TOKEN"
    assert chat.modules == ["shop", "pay-*"] and chat.timeout == 3.0


ONE = "webhooks: [{name: a, url: 'http://x'"  # one webhook, its mapping left open for a field


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("webhooks: []", "webhooks: List should have at least 1 item"),
        ("webhooks: [{name: a, url: ftp://x}]", "webhooks.0.url: 'ftp://x' is not an http(s) URL"),
        ("webhooks: [{name: a, url: 'https://u:p@x'}]", "webhooks.0.url: credentials do not go into the URL"),
        (ONE + ", types: [dev.rollout.stage.begun]}]", "webhooks.0.types: 'dev.rollout.stage.begun' is not a"),
        (ONE + "}, {name: a, url: 'http://y'}]", "webhook names must be distinct: a"),
        (ONE + ", authHeader: {valueEnv: A, valueFile: /f}}]", "webhooks.0.authHeader: give exactly one of"),
        (ONE + ", timout: 3s}]", "webhooks.0.timout: Extra inputs are not permitted"),
        ("retry: {maxDelay: 1s, initialDelay: 2s}\n" + ONE + "}]", "retry: maxDelay must be at least initialDelay"),
        ("retry: {initialDelay: soon}\n" + ONE + "}]", "retry.initialDelay: 'soon' is not a duration"),
        ("- a list", "expected a mapping with `webhooks`, got list"),
    ],
)
def test_a_bad_configuration_names_the_file_the_field_and_why(tmp_path: Path, text: str, error: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert error in str(raised.value)


def test_webhook_flags_join_the_files_webhooks(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, EXAMPLE), urls=["http://a.example/x"], source="/rollout/other")
    assert [w.name for w in config.webhooks] == ["oncall", "chat", "hook-1"]
    assert config.source == "/rollout/other"
    only_flags = load_config(None, urls=["http://a.example/x", "http://b.example/y"])
    assert [(w.name, w.url) for w in only_flags.webhooks] == [
        ("hook-1", "http://a.example/x"),
        ("hook-2", "http://b.example/y"),
    ]


# -- backoff and answers --------------------------------------------------------------------


def test_backoff_is_exponential_with_full_jitter_up_to_max_delay() -> None:
    retry = Retry(attempts=10, initial_delay=1.0, max_delay=16.0)
    rng = random.Random(7)
    for number, ceiling in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 16), (6, 16), (40, 16)]:
        delays = [backoff_delay(number, retry, rng) for _ in range(2000)]
        assert 0 <= min(delays) and max(delays) <= ceiling
        assert max(delays) > 0.95 * ceiling  # the whole range is used: full jitter
        assert abs(statistics.mean(delays) - ceiling / 2) < 0.05 * ceiling


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(200, Outcome.ACCEPTED), (202, Outcome.ACCEPTED), (204, Outcome.ACCEPTED), (408, Outcome.RETRY),
     (429, Outcome.RETRY), (500, Outcome.RETRY), (503, Outcome.RETRY), (301, Outcome.REFUSED),
     (400, Outcome.REFUSED), (401, Outcome.REFUSED), (404, Outcome.REFUSED), (410, Outcome.REFUSED)],
)  # fmt: skip
def test_what_an_answer_means(status: int, outcome: Outcome) -> None:
    assert judge(status) is outcome


# -- which offsets may be committed ---------------------------------------------------------


def test_an_offset_is_committed_only_once_every_webhook_is_done_with_everything_before_it() -> None:
    progress = Progress()
    progress.start("p0", 10, epoch=1)
    progress.add("p0", 10, 2)  # two webhooks
    progress.add("p0", 11, 0)  # not notified: done at once
    progress.add("p0", 12, 2)
    assert progress.to_commit() == {}
    progress.done("p0", 12, 1)
    progress.done("p0", 12, 1)  # both done with 12, not with 10: nothing to commit
    assert progress.to_commit() == {}
    progress.done("p0", 10, 1)
    assert progress.to_commit() == {}
    progress.done("p0", 10, 1)
    assert progress.to_commit() == {"p0": 13}
    progress.mark_committed({"p0": 13})
    assert progress.to_commit() == {}


def test_the_commit_moves_past_transaction_markers_once_nothing_before_them_is_owed() -> None:
    progress = Progress()
    progress.start("p0", 0, epoch=1)
    progress.add("p0", 0, 1)
    progress.partitions["p0"].advance(2)  # offset 1: the transaction's commit marker
    assert progress.to_commit() == {}
    progress.done("p0", 0, 1)
    assert progress.to_commit() == {"p0": 2}


def test_a_done_from_an_earlier_assignment_of_the_partition_does_not_count() -> None:
    progress = Progress()
    progress.start("p0", 0, epoch=1)
    progress.add("p0", 0, 1)
    progress.drop("p0")  # revoked, then assigned again: read again from 0
    progress.start("p0", 0, epoch=2)
    progress.add("p0", 0, 1)
    progress.done("p0", 0, 1)  # the old copy finished: this assignment's still owes it
    assert progress.to_commit() == {}
    progress.done("p0", 0, 2)
    assert progress.to_commit() == {"p0": 1}


# -- one webhook's delivery, against a real receiver -------------------------------------------


def notification(offset: int, module: str = "shop") -> Notification:
    because = AwaitingApproval(stage=f"stage-{offset}")
    decision = DecisionDocument(
        id=f"0-{offset}-0", module=module, action="awaiting-approval", reason=because.sentence(), because=because,
        stage=because.stage, at=100.0 + offset,
    )  # fmt: skip
    event = cloud_event(decision, "/rollout/test")
    assert event is not None
    record = json.dumps(decision.model_dump(mode="json", by_alias=True, exclude_none=True)).encode()
    return Notification(
        tp="p0", offset=offset, epoch=1, topic="t.decisions", partition=0, event=event, body=event.body(), record=record
    )


class Harness:
    def __init__(self, webhook: Webhook, retry: Retry) -> None:
        self.done: list[int] = []
        self.letters: list[tuple[str, DeadLetter]] = []
        self.metrics = Metrics()

        async def dead_letters(key: str, document: bytes) -> None:
            self.letters.append((key, DeadLetter.read(document)))

        self.delivery = WebhookDelivery(
            webhook,
            retry,
            capacity=10,
            dead_letters=dead_letters,
            on_done=lambda n: self.done.append(n.offset),
            metrics=self.metrics,
            rng=random.Random(1),
        )

    async def deliver(self, *offsets: int, until: int | None = None) -> None:
        for offset in offsets:
            self.delivery.put(notification(offset))
        async with aiohttp.ClientSession() as session:
            task = asyncio.create_task(self.delivery.run(session))
            try:
                for _ in range(500):
                    if len(self.done) >= (until if until is not None else len(offsets)):
                        break
                    await asyncio.sleep(0.02)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def count(self, outcome: str) -> float:
        name = self.delivery.webhook.name
        return sum(
            sample.value
            for metric in self.metrics.notifications.collect()
            for sample in metric.samples
            if sample.labels.get("webhook") == name and sample.labels.get("outcome") == outcome
        )


FAST = Retry(attempts=4, initial_delay=0.01, max_delay=0.05)


async def test_a_failing_webhook_gets_each_event_again_until_accepted_in_order() -> None:
    with running_receiver(lambda hook, n, event: 503 if n in (1, 2, 4) else 200) as receiver:
        harness = Harness(Webhook(name="a", url=receiver.url("a")), FAST)
        await harness.deliver(1, 2, 3)
    assert [e.id for e in receiver.accepted("a")] == ["0-1-0", "0-2-0", "0-3-0"]
    assert [r.status for r in receiver.requests("a")] == [503, 503, 200, 503, 200, 200]
    assert harness.done == [1, 2, 3] and harness.letters == []
    assert all(r.content_type == CONTENT_TYPE for r in receiver.requests("a"))


async def test_an_event_a_webhook_refuses_is_dead_lettered_at_once_and_the_next_goes_on() -> None:
    with running_receiver(lambda hook, n, event: 400 if event.id == "0-1-0" else 200) as receiver:
        harness = Harness(Webhook(name="strict", url=receiver.url("strict")), FAST)
        await harness.deliver(1, 2)
    assert [r.status for r in receiver.requests("strict")] == [400, 200]
    assert harness.done == [1, 2]
    [(key, letter)] = harness.letters
    assert key == "shop" and letter.stage == "notifier" and letter.event == "0-1-0"
    assert (letter.topic, letter.partition, letter.offset) == ("t.decisions", 0, 1)
    assert letter.reason.startswith("webhook strict: answered 400") and "(refused)" in letter.reason
    assert DecisionDocument.read(letter.value or "").id == "0-1-0"
    assert harness.count("dead-lettered") == 1 and harness.count("delivered") == 1


async def test_a_webhook_out_of_retries_dead_letters_and_then_tries_each_event_once_until_it_answers() -> None:
    with running_receiver(lambda hook, n, event: 200 if n >= 7 else 503) as receiver:
        harness = Harness(Webhook(name="down", url=receiver.url("down")), FAST)
        await harness.deliver(1, 2, 3, 4)
    # 1: four tries, dead-lettered; 2, 3: one try each (down), dead-lettered; 4: accepted at once
    assert [(r.event.id, r.status) for r in receiver.requests("down")] == [
        ("0-1-0", 503), ("0-1-0", 503), ("0-1-0", 503), ("0-1-0", 503),
        ("0-2-0", 503), ("0-3-0", 503), ("0-4-0", 200),
    ]  # fmt: skip
    assert [letter.event for _, letter in harness.letters] == ["0-1-0", "0-2-0", "0-3-0"]
    assert "after 4 attempts" in harness.letters[0][1].reason and "after 1 attempt)" in harness.letters[1][1].reason
    assert harness.done == [1, 2, 3, 4] and not harness.delivery.down


async def test_an_unreachable_webhook_is_retried_like_an_error_answer() -> None:
    with running_receiver() as receiver:
        closed = receiver.url("x")
    harness = Harness(
        Webhook(name="gone", url=closed, timeout=1.0), Retry(attempts=2, initial_delay=0.01, max_delay=0.01)
    )
    await harness.deliver(1)
    [(_, letter)] = harness.letters
    assert "no answer" in letter.reason and "after 2 attempts" in letter.reason


async def test_the_auth_header_comes_from_its_file_and_follows_a_rotation(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("Bearer one\n")
    webhook = Webhook.model_validate(
        {"name": "a", "url": "http://127.0.0.1:1/", "authHeader": {"name": "X-Token", "valueFile": str(token)}}
    )
    with running_receiver() as receiver:
        webhook = webhook.model_copy(update={"url": receiver.url("a")})
        harness = Harness(webhook, FAST)
        await harness.deliver(1)
        token.write_text("Bearer two\n")
        import os

        os.utime(token, (1, 1))  # a new modification time, whatever the clock's resolution
        await harness.deliver(2, until=2)
    assert [r.headers.get("X-Token") for r in receiver.requests("a")] == ["Bearer one", "Bearer two"]


def test_filters_pick_modules_by_pattern_and_types_by_name() -> None:
    harness = Harness(
        Webhook(name="a", url="http://x", modules=["pay-*", "shop"], types=["dev.rollout.module.halted"]), FAST
    )
    wants = harness.delivery.wants
    assert wants("pay-eu", "dev.rollout.module.halted") and wants("shop", "dev.rollout.module.halted")
    assert not wants("shopping", "dev.rollout.module.halted")
    assert not wants("shop", "dev.rollout.stage.started")
    assert Harness(Webhook(name="b", url="http://x"), FAST).delivery.wants("anything", "dev.rollout.stage.started")
