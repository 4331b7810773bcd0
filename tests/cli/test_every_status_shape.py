"""Every module-status document shape the engine emits (tests/support/status_shapes.py:
each phase, held, pending, deleting, deleted — produced by the real engine, encoded as the
decider publishes them) through every reader: `rollout up`'s summary, `rollout get modules`,
`rollout status` (its view, `--wait`, `-o json`), `rollout replay`, the dashboard's pages, the
module watcher's CRD status, the gate runner and the metrics — each reads it with the one
model (rollout/wire/status.py), renders it without error and shows what it should. Then the
verdict and dead-letter documents through theirs, and a newer schemaVersion refused by all."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import jsonschema
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from infra.client import Record
from infra.metrics import Metrics
from projections.crd_schema import crd_documents
from projections.dashboard import pages
from projections.dashboard.fleet import FleetView, ProjectionRecord, absorb
from projections.gate_runner import soaking_gates
from projections.module_status import resource_status
from rollout.engine.outcome import Verdict
from rollout.wire.dead_letters import DeadLetter
from rollout.wire.documents import DocumentError, NewerSchema
from rollout.wire.status import PENDING, ROLLOUT_PHASES, ModuleStatus, TargetStatus
from rollout.wire.verdicts import VerdictDocument
from rollout_cli.publishing.verdicts import Wait, decide, report_apply
from rollout_cli.reading.documents import dead_letters_from_records
from rollout_cli.reading.replaying import status_difference
from rollout_cli.reading.status_wait import MET, judge, parse_condition, progress_line
from rollout_cli.views import terminal
from rollout_cli.views.dead_letters import dead_letters_json, print_dead_letters
from rollout_cli.views.status import status_renderable
from rollout_cli.views.status_summary import StatusSummary
from rollout_cli.views.tables import module_row, print_table
from streams.deadletters import dead_letter
from streams.verdicts import verdict_document
from tests.support.status_shapes import Shape, every_shape

SHAPES = every_shape()
LIVE = [shape for shape in SHAPES if shape.value is not None]
T0 = "2026-01-01T00:00:00Z"


def by_label(label: str) -> Shape:
    return next(shape for shape in SHAPES if shape.label == label)


def read(shape: Shape) -> ModuleStatus:
    assert shape.value is not None
    return ModuleStatus.read(shape.value)


def printed(renderable: Any) -> str:
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_the_shapes_cover_every_phase_held_pending_deleting_and_deleted() -> None:
    phases = {read(shape).phase for shape in LIVE}
    assert phases == {*ROLLOUT_PHASES, PENDING}
    assert read(by_label("held")).held is not None and read(by_label("held")).staged
    assert not read(by_label("pending")).staged and read(by_label("pending")).stages == []
    assert read(by_label("deleting")).deleting and by_label("deleted").value is None


@pytest.mark.parametrize("shape", LIVE, ids=[shape.label for shape in LIVE])
def test_a_document_reads_back_to_exactly_the_json_the_engine_wrote(shape: Shape) -> None:
    assert shape.value is not None
    assert read(shape).as_json() == orjson.loads(shape.value)  # same keys: what the dashboard's JS reads
    for key, value in shape.targets.items():
        assert TargetStatus.read(value).as_json() == orjson.loads(value), key


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.label for shape in SHAPES])
def test_up_summary_and_get_modules_show_it(shape: Shape) -> None:
    line = StatusSummary().line(shape.module, shape.value)
    assert line is not None
    if shape.value is None:
        assert line == f"{shape.module}: deleted"
        return
    status = read(shape)
    assert line.startswith(f"{shape.module:<14} {status.phase}")
    assert f"target {status.target_revision or '-'}" in line
    row = module_row(shape.module, status, wide=True)
    assert row[:3] == [shape.module, status.kind or "-", status.phase]
    assert row[6] == f"{status.succeeded}/{status.members}"
    assert shape.module in printed_table({shape.module: status})


def printed_table(documents: dict[str, Any]) -> str:
    console = Console(width=400, record=True, file=io.StringIO())
    original, terminal.console = terminal.console, console
    try:
        print_table("module_status", documents, wide=True)
    finally:
        terminal.console = original
    return console.export_text()


SHOWN_BY_STATUS = {  # what `rollout status` must say of a shape, beyond its phase
    "Soaking": ["gate errors not evaluated yet", "soak 1m"],
    "AwaitingApproval": ["approval required", "gate errors passing"],
    "Paused": ["Paused"],
    "held": ["Held", "1 intent(s): waiting for cluster observations up to partition 0 offset 5"],
    "pending": ["not staged yet", "1 intent(s): waiting for cluster observations"],
    "Progressing, window closed": ["window closed, opens"],
    "Progressing, waiting": ["Waiting", "1 cluster not ready"],
    "Progressing, frozen": ["Frozen", "by calendar ice/always until"],
    "Progressing, break-glass": ["Break-glass", "every freeze calendar overridden until", "by alice via cli: sev-1"],
    "deleting": ["Deleting", "waits for the modules depending on it"],
    "Halted": ["Failed clusters:", "w1 at v1"],
}


@pytest.mark.parametrize("shape", LIVE, ids=[shape.label for shape in LIVE])
def test_rollout_status_shows_it(shape: Shape) -> None:
    status = read(shape)
    targets = [TargetStatus.read(value) for value in shape.targets.values()]
    text = printed(status_renderable(status, targets, [], known_modules={shape.module}))
    assert shape.module in text and status.phase in text
    for expected in SHOWN_BY_STATUS.get(shape.label, []):
        assert expected in text, (shape.label, expected, text)
    line = progress_line(status)  # `status --wait`
    assert line.startswith(f"module/{shape.module}: {status.phase}")
    if status.phase == PENDING:  # not a phase to wait for: on its way to Complete
        assert judge(status, parse_condition("phase=Complete")) is None
    else:
        assert judge(status, parse_condition(f"phase={status.phase}")) == MET


@pytest.mark.parametrize("shape", LIVE, ids=[shape.label for shape in LIVE])
def test_rollout_replay_finds_no_difference_not_even_with_a_document_written_before_versions(shape: Shape) -> None:
    assert shape.value is not None
    unversioned = {k: v for k, v in orjson.loads(shape.value).items() if k != "schemaVersion"}
    assert status_difference(shape.module, shape.value, shape.value) is None
    assert status_difference(shape.module, shape.value, unversioned) is None


def test_the_dashboard_shows_every_shape_and_drops_a_deleted_module() -> None:
    view = FleetView()
    for shape in SHAPES:
        absorb(view, "module_status", ProjectionRecord(shape.module, shape.value))
        for key, value in shape.targets.items():
            absorb(view, "targets", ProjectionRecord(key, value))
        page = pages.module_page(view, shape.module)
        if shape.value is None:
            assert shape.module not in view.modules and page is None
            continue
        status = read(shape)
        assert page is not None and page["status"]["phase"] == status.phase, shape.label
        json.dumps(page)  # what the server answers
        assert page["status"]["stages"] == [
            {**stage, **{k: v for k, v in shown.items() if k not in stage}}
            for stage, shown in zip(orjson.loads(shape.value).get("stages", []), page["status"]["stages"], strict=True)
        ]  # each stage as the document has it, with clocks and holds added
        row = next(row for row in pages.module_list(view) if row["name"] == shape.module)
        assert (row["phase"], row["members"], row["succeeded"]) == (status.phase, status.members, status.succeeded)
        listed = pages.stage_clusters(view, shape.module, pages.Query())
        assert listed["total"] == len(shape.targets)
    pending = pages.module_list(view)[[row["name"] for row in pages.module_list(view)].index("app")]
    assert pending["reason"].startswith("waiting for cluster observations") and pending["stages"] == []
    soaking = pages.module_page(FleetView(modules={"podinfo": read(by_label("Soaking"))}), "podinfo")
    assert soaking is not None and soaking["status"]["stages"][0]["gateStates"][0]["state"] == "pending"


MODULE_STATUS_SCHEMA = next(doc for doc in crd_documents() if doc["spec"]["names"]["kind"] == "Module")["spec"][
    "versions"
][0]["schema"]["openAPIV3Schema"]["properties"]["status"]


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.label for shape in SHAPES])
def test_the_module_watcher_writes_a_crd_status_for_it(shape: Shape) -> None:
    status = read(shape) if shape.value is not None else None
    written = resource_status(status, generation=1, previous=None, now=T0)
    jsonschema.validate(written, MODULE_STATUS_SCHEMA)  # what the API server would accept
    assert written["phase"] == (status.phase if status is not None else PENDING)
    if status is not None and status.stages:
        assert written["progress"] == f"{status.succeeded}/{status.members + status.unstaged.members}"
        assert [stage["name"] for stage in written["stages"]] == [stage.name for stage in status.stages]
    if shape.label == "pending":
        message = {condition["message"] for condition in written["conditions"]}
        assert message == {"Pending: waiting for cluster observations up to partition 0 offset 5"}


@pytest.mark.parametrize("shape", LIVE, ids=[shape.label for shape in LIVE])
def test_the_gate_runner_evaluates_the_gates_of_a_soaking_stage_only(shape: Shape) -> None:
    gates = soaking_gates(read(shape))
    if shape.label == "Soaking":
        assert [(stage, gate.name, gate.prometheus and gate.prometheus.max) for stage, gate in gates] == [
            ("canary", "errors", 0.05)
        ]
    else:
        assert gates == []


@pytest.mark.parametrize("shape", [s for s in LIVE if s.record is not None], ids=lambda s: s.label)
def test_metrics_label_a_module_as_its_document_shows_it(shape: Shape) -> None:
    assert shape.record is not None
    record = shape.record
    metrics = Metrics(modules=lambda: [record])
    families = text_string_to_metric_families(metrics.render().decode())
    (info,) = [s.labels for f in families if f.name == "rollout_module_info" for s in f.samples]
    status = read(shape)
    assert (info["module"], info["phase"], info["target"]) == (status.module, status.phase, status.target_revision)
    assert info["stable"] == (status.stable_revision or "")


# --- verdicts and dead letters ------------------------------------------------------------------


def verdicts() -> tuple[VerdictDocument, VerdictDocument]:
    """An accepted and a refused verdict as the decider writes them."""
    accepted = verdict_document(Verdict("e1", "podinfo", True, "Module podinfo created at v1", (0, 0)), [], "0-1-")
    refused = verdict_document(Verdict("e2", "podinfo", False, "module podinfo has no stage 'x'"), [], "")
    return VerdictDocument.read(accepted), VerdictDocument.read(refused)


def test_the_cli_reports_an_accepted_verdict_and_exits_1_on_a_refused_one(capsys: pytest.CaptureFixture[str]) -> None:
    accepted, refused = verdicts()
    decide("module/podinfo: pause", {"e1": accepted}, "e1", Wait(1.0))
    assert capsys.readouterr().out == "module/podinfo: pause accepted: Module podinfo created at v1\n"
    with pytest.raises(SystemExit) as exit:
        decide("module/podinfo: approve x", {"e2": refused}, "e2", Wait(1.0))
    assert exit.value.code == 1
    assert "refused: module podinfo has no stage 'x'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        report_apply([("module/podinfo", "e1"), ("module/other", "e2")], {"e1": accepted, "e2": refused}, Wait(1.0))
    assert "module/podinfo unchanged" in capsys.readouterr().out


def test_the_dashboard_reads_verdicts_and_dead_letters() -> None:
    view = FleetView()
    accepted, refused = verdicts()
    absorb(view, "verdicts", ProjectionRecord("e1", orjson.dumps(accepted.as_json())))
    absorb(view, "verdicts", ProjectionRecord("e2", orjson.dumps(refused.as_json())))
    assert (pages.verdict(view, "e1")["state"], pages.verdict(view, "e2")["state"]) == ("accepted", "refused")
    letter = dead_letter("not JSON", Record("t.intents", 2, 7, "podinfo", b"\xff{"), "route")
    absorb(view, "dead_letters", ProjectionRecord("podinfo", letter, 9.0))
    (shown,) = pages.dead_letter_page(view, pages.Query())["items"]
    assert (shown["at"], shown["reason"], shown["topic"], shown["offset"], shown["size"]) == (
        9.0,
        "not JSON",
        "t.intents",
        7,
        2,
    )
    assert "valueBase64" not in shown  # the payload stays on the server


def test_rollout_dead_letters_lists_each_letter_and_an_unreadable_one() -> None:
    letter = dead_letter("not JSON", Record("t.intents", 2, 7, "podinfo", b"{"), "route")
    records = [Record("t.dead-letters", 0, 0, "podinfo", letter, 5.0), Record("t.dead-letters", 0, 1, "x", b"[", 6.0)]
    letters = dead_letters_from_records(records)
    assert [(at, shown.position, shown.reason.split(":")[0]) for at, shown in letters] == [
        (5.0, "t.intents[2]@7", "not JSON"),
        (6.0, "?[?]@?", "unreadable dead letter"),
    ]
    assert DeadLetter.read(letter).value == "{" and dead_letters_json(letters)[0]["at"] == 5.0
    assert "t.intents[2]@7" in printed_dead_letters(letters)


def printed_dead_letters(letters: list[tuple[float | None, DeadLetter]]) -> str:
    console = Console(width=400, record=True, file=io.StringIO())
    original, terminal.console = terminal.console, console
    try:
        print_dead_letters(letters)
    finally:
        terminal.console = original
    return console.export_text()


# --- a newer schemaVersion ----------------------------------------------------------------------

NEWER = orjson.dumps({**orjson.loads(by_label("Complete").value or b"{}"), "schemaVersion": 2, "renamed": True})


def test_every_reader_refuses_a_newer_major_version_saying_so(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(NewerSchema, match=r"schemaVersion 2: this rollout reads up to 1 .* upgrade rollout"):
        ModuleStatus.read(NEWER)
    line = StatusSummary().line("podinfo", NEWER)
    assert line is not None and "upgrade rollout" in line  # the summary goes on
    from rollout_cli.reading.documents import module_status

    with pytest.raises(SystemExit):
        module_status("podinfo", NEWER)
    assert "error: module podinfo: module-status document of schemaVersion 2" in capsys.readouterr().err
    view = FleetView()
    with caplog.at_level(logging.ERROR):
        assert not absorb(view, "module_status", ProjectionRecord("podinfo", NEWER))
    assert "podinfo" not in view.modules and "schemaVersion 2" in caplog.text
    with pytest.raises(DocumentError):
        VerdictDocument.read(b'{"schemaVersion": 3, "event": "e", "verdict": "accepted"}')


def test_fields_a_newer_writer_adds_are_ignored() -> None:
    document = {**orjson.loads(by_label("Complete").value or b"{}"), "somethingNew": {"x": 1}}
    assert ModuleStatus.read(document).phase == "Complete"
    assert "somethingNew" not in ModuleStatus.read(document).as_json()
