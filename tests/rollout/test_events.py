"""Poison-proof parsing: whatever bytes arrive, `parse_event` returns an event or raises
`EventRejected` with a short reason — never anything that would stop a worker.

docs/rollout-semantics.md, "What the engine accepts".
"""

from __future__ import annotations

import json
import random
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.wire.events import (
    MAX_EVENT_BYTES,
    MAX_JSON_DEPTH,
    MAX_REASON_CHARS,
    DependencyCurrent,
    DependencyReported,
    DependentLinked,
    EventBase,
    EventRejected,
    FleetSeen,
    HelmValuesObserved,
    HolderClaims,
    HolderHeartbeat,
    InputEvent,
    LeasesContinued,
    ModuleApplied,
    ReleasePromoted,
    ReleaseStageApproved,
    RestrictionApplied,
    RestrictionDeleted,
    RolloutContinued,
    SyncStatusReported,
    Tick,
    claim_chunk,
    parse_event,
)
from tests.rollout.builders import (
    applied,
    calendar_applied,
    calendar_break_glass,
    calendar_deleted,
    cluster,
    cluster_command,
    command,
    deleted,
    freeze_calendar,
    gate_result,
    heartbeat,
    heartbeats,
    module,
    observed,
    promotion,
    release_observed,
    removed,
    reported,
    restriction,
    stage,
    tick,
)

VALID = [
    tick(1_700_000_000.0).to_bytes(),
    applied(module("app", {}, "v1", stage("canary", {"ring": "canary"}), stage("rest")), fleet={0: 7}).to_bytes(),
    observed(cluster("a", {"ring": "canary"})).to_bytes(),
    reported("app", "a", "v1", "failed", "boom", generation=3).to_bytes(),
    command("app", "approve", stage="rest").to_bytes(),
    FleetSeen(partition=1, position=42).to_bytes(),
]


def rejected_reason(raw: bytes | str | None) -> str:
    try:
        parse_event(raw)
    except EventRejected as rejected:
        return rejected.reason
    return ""  # accepted


def check_only_rejected(raw: bytes) -> None:
    """parse_event gives an event or EventRejected with a short reason; anything else fails."""
    try:
        parse_event(raw)
    except EventRejected as rejected:
        assert 0 < len(rejected.reason) <= MAX_REASON_CHARS


def mutations(rng: random.Random, count: int) -> list[bytes]:
    """`count` malformed inputs: valid events cut, flipped, spliced, nested, inflated."""
    nasty = [
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"1e400",
        b"-1e400",
        b"9" * 5000,
        b"[" * 5000,
        b"{" * 5000,
        b'{"a":' * 200,
        b'"\\ud800"',
        b"\xff\xfe\x00",
        b"null",
        b"true",
        b'"' + b"x" * 3000 + b'"',
        b"{}",
        b"[]",
    ]
    out = []
    for _ in range(count):
        base = bytearray(rng.choice(VALID))
        how = rng.randrange(8)
        if how == 0:  # truncated
            base = base[: rng.randrange(len(base))]
        elif how == 1:  # random bytes flipped
            for _ in range(rng.randrange(1, 8)):
                base[rng.randrange(len(base))] = rng.randrange(256)
        elif how == 2:  # a nasty value spliced in somewhere
            at = rng.randrange(len(base))
            base[at:at] = rng.choice(nasty)
        elif how == 3:  # a value replaced by a nasty one
            text = base.decode()
            colon = [i for i, c in enumerate(text) if c == ":"]
            at = rng.choice(colon) + 1
            end = min([i for i in (text.find(",", at), text.find("}", at)) if i != -1] or [len(text)])
            base = bytearray(text[:at].encode() + rng.choice(nasty) + text[end:].encode())
        elif how == 4:  # nested too deep, inside a valid field
            depth = rng.randrange(MAX_JSON_DEPTH - 2, 3 * MAX_JSON_DEPTH)
            base = bytearray(base[:-1] + b',"x":' + b"[" * depth + b"]" * depth + b"}")
        elif how == 5:  # random bytes
            base = bytearray(rng.randbytes(rng.randrange(0, 200)))
        elif how == 6:  # a type that is wrong or missing
            data = json.loads(base)
            data["type"] = rng.choice(["Tick", "Nope", 3, None, "FleetSeen", "ModuleApplied" * 200])
            base = bytearray(json.dumps(data).encode())
        else:  # an unknown key, very long
            base = bytearray(base[:-1] + b',"' + b"k" * rng.randrange(1, 5000) + b'":1}')
        out.append(bytes(base))
    return out


def test_valid_events_parse() -> None:
    for raw in VALID:
        assert parse_event(raw).to_bytes() == raw


def test_malformed_bytes_are_only_ever_rejected_with_a_short_reason() -> None:
    inputs = mutations(random.Random(20260101), 3000)
    assert len(inputs) >= 1000
    for raw in inputs:
        check_only_rejected(raw)


@settings(max_examples=1000, deadline=None, derandomize=True, database=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(lambda s: s.encode("utf-8", "surrogatepass")))
def test_arbitrary_bytes_are_only_ever_rejected_with_a_short_reason(raw: bytes) -> None:
    check_only_rejected(raw)


def test_oversized_event_is_rejected_with_its_size() -> None:
    raw = b'{"type":"Tick","now":1,"x":"' + b"a" * MAX_EVENT_BYTES + b'"}'
    reason = rejected_reason(raw)
    assert str(len(raw)) in reason and "1 MiB" in reason


@pytest.mark.parametrize("opening", [b"[", b'{"a":'])
def test_deeply_nested_json_is_rejected_before_decoding(opening: bytes) -> None:
    closing = b"]" if opening == b"[" else b"}"
    for depth in (MAX_JSON_DEPTH + 1, 100_000):
        assert (
            rejected_reason(opening * depth + b"1" + closing * depth)
            == f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
        )


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    raw = json.dumps({"type": "Tick", "now": 1_700_000_000, "id": "[" * 500 + '"\\' + "{" * 500}).encode()
    assert isinstance(parse_event(raw), Tick)


def test_nesting_up_to_the_limit_reaches_validation() -> None:
    depth = MAX_JSON_DEPTH - 1
    raw = b'{"type":"Tick","now":5,"x":' + b"[" * depth + b"]" * depth + b"}"
    assert "Extra inputs are not permitted" in rejected_reason(raw)


@pytest.mark.parametrize("now", ["NaN", "Infinity", "-Infinity", "1e400", "-1", "0", "8e9"])
def test_tick_time_must_be_finite_and_plausible(now: str) -> None:
    reason = rejected_reason(b'{"type":"Tick","now":' + now.encode() + b"}")
    assert reason and len(reason) <= MAX_REASON_CHARS


def test_tick_cannot_be_built_with_infinity_either() -> None:
    with pytest.raises(ValueError):
        Tick(now=float("inf"))


def test_reason_of_a_huge_invalid_event_is_bounded() -> None:
    raw = json.dumps({"type": "x" * 100_000, **{f"k{i}" * 50: i for i in range(1000)}}).encode()
    assert 0 < len(rejected_reason(raw)) <= MAX_REASON_CHARS


def test_module_applied_carries_fleet_positions_as_a_json_object() -> None:
    event = applied(module("app", {}, "v1"), fleet={0: 7, 3: 12})
    data = json.loads(event.to_bytes())
    assert data["fleet"] == {"0": 7, "3": 12}
    parsed = parse_event(event.to_bytes())
    assert isinstance(parsed, ModuleApplied) and parsed.fleet == {0: 7, 3: 12}
    without = {k: v for k, v in data.items() if k != "fleet"}
    assert parse_event(json.dumps(without)).fleet == {}


def test_fleet_positions_are_not_negative() -> None:
    raw = applied(module("app", {}, "v1"), fleet={0: 7}).to_bytes().replace(b'"fleet":{"0":7}', b'"fleet":{"0":-7}')
    assert "not negative" in rejected_reason(raw)


def test_fleet_seen_is_an_event_of_the_journal() -> None:
    event = parse_event(b'{"type":"FleetSeen","id":"f1","at":"t","partition":2,"position":40}')
    assert isinstance(event, FleetSeen) and (event.partition, event.position) == (2, 40)


def test_status_report_generation_is_optional() -> None:
    raw = b'{"type":"SyncStatusReported","cluster":"a","module":"app","revision":"v1","state":"succeeded"}'
    event = parse_event(raw)
    assert isinstance(event, SyncStatusReported) and event.generation is None


def test_a_long_integer_is_read_exactly_not_rounded_through_a_float() -> None:
    raw = (
        b'{"id":"r1","type":"SyncStatusReported","cluster":"c","module":"m","revision":"1.0.0",'
        b'"state":"succeeded","generation":123456789012345678901234567890}'
    )
    assert parse_event(raw).generation == 123456789012345678901234567890


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b'{"type":"Tick","now":1e400}', "infinity"),
        (b'{"type":"Tick","now":NaN}', "expected a JSON value"),
        (b'{"type":"Tick","now":-Infinity}', "no digit after sign"),
        (b'{"id":"\\ud800","type":"Tick","now":1}', "surrogate"),
        (b'{"id":"\xed\xa0\x80","type":"Tick","now":1}', "surrogates not allowed"),
        (b'{"id":"\xff","type":"Tick","now":1}', "UTF-8"),
    ],
)
def test_what_strict_json_refuses_is_a_rejection_naming_why(raw: bytes, why: str) -> None:
    with pytest.raises(EventRejected, match=r"^not JSON: ") as refused:
        parse_event(raw)
    assert why in str(refused.value)


def test_nesting_is_measured_outside_strings_and_only_where_it_can_exceed_the_limit() -> None:
    from rollout.wire.events import MAX_JSON_DEPTH, json_depth_exceeds

    at_limit = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    over = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    shallow_but_bracketed = b'{"message": "' + b"[{" * MAX_JSON_DEPTH + b'"}'
    wide = b"[" + b"[]," * (MAX_JSON_DEPTH * 2) + b"[]]"
    assert not json_depth_exceeds(at_limit, MAX_JSON_DEPTH)
    assert json_depth_exceeds(over, MAX_JSON_DEPTH)
    assert not json_depth_exceeds(shallow_but_bracketed, MAX_JSON_DEPTH)  # brackets in a string
    assert not json_depth_exceeds(wide, MAX_JSON_DEPTH)  # many brackets, depth 2
    assert json_depth_exceeds(b'{"a": "]]]]", "b": ' + over + b"}", MAX_JSON_DEPTH)


def _every_event() -> list[EventBase]:
    """One event of every input type, each optional field left out (None) — and, where a
    field may be None on purpose (an inconclusive gate result), None."""
    helm = module("chart", {}, "1.0.0", stage("rest"))
    return [
        applied(helm, fleet={0: 7}),
        deleted("app"),
        command("app", "resume"),
        observed(cluster("a", {"ring": "canary"})),
        removed("a"),
        RestrictionApplied(restriction=restriction()),
        RestrictionDeleted(namespace="fleet", name="tenant-lane"),
        calendar_applied(freeze_calendar("year-end", {"name": "w", "schedule": "0 0 * * *", "duration": "1h"})),
        calendar_deleted("fleet", "weekends"),
        command("app", "break-glass", reason="sev-1", until=1_700_000_000.0, calendar="year-end"),
        calendar_break_glass("weekends", 1_700_000_000.0, scope="fleet", via="crd"),
        reported("app", "a", "v1", "updating"),
        HelmValuesObserved(cluster="a", module="app"),
        tick(1_700_000_000.0),
        FleetSeen(partition=1, position=42),
        heartbeat("a"),
        heartbeats("a", "b"),
        HolderHeartbeat(holder="applier-0", lease_seconds=30),
        HolderClaims(holder="applier-0", chunk=claim_chunk("a"), clusters=["a"], lease_seconds=30),
        cluster_command("a", "leave"),
        DependentLinked(module="base", dependent="app", linked=True, seq=0),
        DependencyReported(dependent="app", module="base", cluster="a", ready=False, seq=1),
        DependencyCurrent(dependent="app", module="base", after="ev-1", seq=2),
        RolloutContinued(module="app", slice=1),
        LeasesContinued(partition=2, slice=1),
        DependentLinked(module="base", dependent="app", linked=True, seq=3, after="ev-1"),
        applied(module("app", {}, "v1", depends_on=["base"]), after={"base": "ev-1"}),
        gate_result("app", "canary", "errors", None, message="no samples"),
        gate_result("app", "canary", "errors", True),
        promotion("app", "v1.4.0"),
        promotion("chart", "1.5.0-rc.1", kind="helm", url="https://charts.example.com", chart="chart"),
        release_observed("api", "shop", {"web": "1.1.0", "api": "v2.0.0"}),
        ReleasePromoted(
            id="dep-0-7",
            at="2026-03-01T00:00:00Z",
            module="web",
            release="shop",
            version="1.1.0",
            after={"api": "dep-0-6"},
            promoter="p",
        ),
        ReleasePromoted(
            id="dep-0-8", at="2026-03-01T00:00:00Z", module="cache", release="shop", user="bob", via="dashboard"
        ),
        ReleaseStageApproved(
            id="dep-0-9",
            at="2026-03-01T00:00:00Z",
            module="web",
            release="shop",
            stage="wave",
            user="bob",
            via="dashboard",
            groups=["sre"],
        ),
        command("api", "approve", stage="wave").model_copy(update={"release": "shop"}),
    ]


def test_a_claim_naming_a_cluster_of_another_chunk_is_refused_naming_it() -> None:
    other = (claim_chunk("a") + 1) % 64
    raw = json.dumps({"type": "HolderClaims", "holder": "applier-0", "chunk": other, "clusters": ["a"]})
    with pytest.raises(EventRejected, match=r"clusters \['a'\] are not of chunk"):
        parse_event(raw)


def test_a_holder_name_that_cannot_key_its_claims_is_refused() -> None:
    with pytest.raises(EventRejected, match="holder"):
        parse_event(json.dumps({"type": "HolderHeartbeat", "holder": "a/0", "leaseSeconds": 30}))


def test_every_event_type_is_covered_by_the_round_trip() -> None:
    union = typing.get_args(typing.get_args(InputEvent)[0])
    assert {type(event) for event in _every_event()} == set(union)


@pytest.mark.parametrize("event", _every_event(), ids=lambda event: f"{event.type}")
def test_what_an_event_writes_its_parser_reads_back_unchanged(event: EventBase) -> None:
    assert parse_event(event.to_bytes()) == event


def test_inconclusive_gate_result_is_read_back_as_inconclusive_with_its_message() -> None:
    written = gate_result("app", "canary", "errors", None, message="no samples").to_bytes()
    read = parse_event(written)
    assert read.passed is None and read.message == "no samples"


def test_an_event_type_cannot_declare_a_field_its_writer_would_drop() -> None:
    with pytest.raises(TypeError, match="verdict"):

        class Dropped(EventBase):  # None is left out of the bytes: a required None could never be read back
            verdict: bool | None
