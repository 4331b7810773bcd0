"""`rollout up`'s live summary (rollout_cli/views/status_summary.py) over every module-status
document shape the engine writes (tests/support/status_shapes.py: each phase, held, pending,
deleting, deleted), and over the example `rollout up --example` applies, run on the engine
as `up` runs it: each module printed exactly once per change — never the history again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from infra.client import Record
from rollout.wire.status import ModuleStatus
from rollout_cli.processes import up
from rollout_cli.publishing.intents import intents_for
from rollout_cli.publishing.manifest_files import load_manifest_files
from rollout_cli.views.status_summary import ModuleSummary, StatusSummary
from streams.decider import document
from tests.rollout.builders import Fleet, fleet_seen, given, reported, tick
from tests.support.status_shapes import Shape, every_shape


def records(shapes: list[tuple[str, bytes | None]]) -> list[Record]:
    return [Record("t.module-status", 0, offset, name, value) for offset, (name, value) in enumerate(shapes)]


def lines_of(shapes: list[Shape]) -> list[str | None]:
    summary = StatusSummary()
    return [summary.line(shape.module, shape.value) for shape in shapes]


def test_summary_prints_every_document_shape_once_per_change() -> None:
    shapes = {shape.label: shape for shape in every_shape()}
    lines = dict(zip(shapes, lines_of(list(shapes.values())), strict=True))
    assert all(line is not None for line in lines.values()), lines
    assert "podinfo        Progressing" in str(lines["Progressing"]) and "0/3 succeeded" in str(lines["Progressing"])
    assert "AwaitingApproval" in str(lines["AwaitingApproval"]) and "3/3 succeeded" in str(lines["Complete"])
    assert str(lines["pending"]).startswith("app            Pending          target -")
    assert "1 intent(s) held: waiting for cluster observations" in str(lines["pending"])
    assert "Paused" in str(lines["Paused"]) and "target v2" in str(lines["Paused"])
    assert "target v2" in str(lines["held"]) and "intent(s) held" in str(lines["held"])
    assert "waiting: 1 cluster not ready" in str(lines["Progressing, waiting"])
    assert "deleting once the modules depending on it are" in str(lines["deleting"])
    assert "(frozen by calendar ice/always until " in str(lines["Progressing, frozen"])
    assert "(break-glass until " in str(lines["Progressing, break-glass"])
    assert lines["deleted"] == "front: deleted"
    summary = StatusSummary()
    for shape in shapes.values():
        summary.line(shape.module, shape.value)
    latest = {shape.module: shape.value for shape in shapes.values()}
    assert [summary.line(module, value) for module, value in latest.items()] == [None] * len(latest)  # nothing new


def test_get_modules_lists_every_document_shape() -> None:
    from rollout_cli.views.tables import module_row

    rows = {
        shape.label: module_row(shape.module, ModuleStatus.read(shape.value), wide=True)
        for shape in every_shape()
        if shape.value is not None
    }
    assert rows["pending"][:7] == ["app", "-", "Pending", "-", "-", "-", "0/0"]  # not staged yet
    assert rows["Complete"][:7] == ["podinfo", "Module", "Complete", "v1", "v1", "wave", "3/3"]


# --- rollout up --example -------------------------------------------------------------------------


def example_run() -> list[tuple[str, bytes | None]]:
    """The module-status records the example makes on the engine as `rollout up --example`
    runs it: the modules applied stamped past the clusters (held, pending, until the router's
    FleetSeen), every assignment reported succeeded (the applier's --simulate-status), a tick
    every 30 s for 20 minutes (the canaries soak 5m; podinfo's wave-2 waits for approval, as
    does the rest of the Release storefront's fleet)."""
    fleet = given()
    published: list[tuple[str, bytes | None]] = []

    def send(*events: object) -> None:
        start = len(fleet.outcomes)
        fleet.send(*events)
        for outcome in fleet.outcomes[start:]:
            for name, status in sorted(outcome.module_status.items()):
                published.append((name, None if status is None else document(status)))

    intents = intents_for(load_manifest_files([up.EXAMPLES]))
    clusters = [intent.event for intent in intents if intent.role == "clusters"]
    modules = [
        intent.event.model_copy(update={"fleet": {0: len(clusters)}}) for intent in intents if intent.role == "intents"
    ]
    send(*modules)  # routed before the clusters: held
    send(*clusters, fleet_seen(0, len(clusters)))
    for _ in range(40):
        send(*simulated_reports(fleet))
        send(tick(fleet.now + 30))
    return published


def simulated_reports(fleet: Fleet) -> list[object]:
    """`succeeded` for every sync assigned and not reported yet, as the applier simulates."""
    return [
        reported(target.module, target.cluster, str(fleet.revision(target.module, target.cluster)), "succeeded")
        for target in fleet.targets.values()
        if target.assigned is not None
        and target.status != "succeeded"
        and fleet.revision(target.module, target.cluster)
    ]


def changes(published: list[tuple[str, bytes | None]]) -> dict[str, list[ModuleSummary]]:
    """Per module, what it shows each time that changes."""
    shown: dict[str, list[ModuleSummary]] = {}
    for name, value in published:
        summary = ModuleSummary.read(value)
        if not shown.get(name) or shown[name][-1] != summary:
            shown.setdefault(name, []).append(summary)
    return shown


async def summarized(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], follows: list[list[Record]]
) -> list[str]:
    """What `rollout up` prints when its follow of the topic yields `follows[0]`, fails, is
    followed again (new records only) for `follows[1]`, and so on; the last waits on."""
    calls: list[bool] = []

    async def follow(bootstrap: str, topic: str, *, from_beginning: bool = True) -> AsyncIterator[Record]:
        calls.append(from_beginning)
        for record in follows[len(calls) - 1]:
            yield record
        if len(calls) < len(follows):
            raise ConnectionError("the broker went away")
        await asyncio.Event().wait()

    monkeypatch.setattr(up.client, "follow", follow)
    monkeypatch.setattr(up, "stop_on_signals", lambda stop: None)
    with pytest.raises(TimeoutError):  # `up` retries a second after an error
        await asyncio.wait_for(up._summarize("unused:9092", "t.", [], None), timeout=1.0 + len(follows))
    assert calls == [True] + [False] * (len(follows) - 1)  # the history once; after an error, new records only
    return [line.split(" ", 1)[1] for line in capsys.readouterr().out.splitlines()]  # without the time


async def test_up_example_summary_shows_every_module_exactly_once_per_change(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    published = example_run()
    expected = changes(published)
    assert set(expected) == {"flux-install", "podinfo", "monitoring", "web", "storefront-web", "storefront-api"}
    assert [summary.phase for summary in expected["podinfo"]][:2] == ["Pending", "Progressing"]
    assert expected["podinfo"][-1].phase == "AwaitingApproval"  # wave-2 waits for approval
    for member in ("storefront-web", "storefront-api"):  # the Release: its canary done, its rest waits
        assert expected[member][-1].phase == "AwaitingApproval", expected[member]
    topic = records(published)
    half = len(topic) // 2
    printed = await summarized(monkeypatch, capsys, [topic[:half], topic[half:]])
    assert printed == [summary.text(name) for name, summary in _in_order(published, expected)]
    for name, shown in expected.items():
        lines = [line for line in printed if line.startswith(f"{name} ")]
        assert len(lines) == len(shown) == len(set(lines)), name  # each change once, none twice


def _in_order(
    published: list[tuple[str, bytes | None]], expected: dict[str, list[ModuleSummary]]
) -> list[tuple[str, ModuleSummary]]:
    """The changes in the order their records come on the topic."""
    last: dict[str, ModuleSummary] = {}
    ordered = []
    for name, value in published:
        summary = ModuleSummary.read(value)
        if last.get(name) != summary:
            last[name] = summary
            ordered.append((name, summary))
    assert [s for n, s in ordered if n == "podinfo"] == expected["podinfo"]
    return ordered


async def test_up_summary_read_again_from_the_beginning_prints_nothing_twice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shapes = [(shape.module, shape.value) for shape in every_shape()]
    printed = await summarized(monkeypatch, capsys, [records(shapes)])
    assert len(printed) == len(shapes)  # each change once; before, the held document restarted the topic
    assert any(line.startswith("app ") and "Pending" in line for line in printed)
