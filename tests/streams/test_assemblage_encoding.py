"""The assembler's encodings (streams/assemblage_encoding.py) write the same bytes as pydantic
and orjson wrote before — for the state record and for the published snapshot — while each
sync is encoded once as long as the record keeps it."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.api.manifests import Sync
from rollout.assembly.snapshots import AssemblageRecord, assemble, snapshot
from rollout.engine import stored
from rollout.engine.outcome import Assignment
from rollout.wire.assemblages import AssignedSync
from streams.assemblage_encoding import EncodedSyncs
from streams.assembler import state_mappings
from streams.state import PartitionState

SOURCES: list[dict[str, Any]] = [
    {"source": {"git": {"url": "https://example.com/app", "version": {"tag": "1.0.0"}}}},
    {
        "source": {
            "git": {
                "url": "ssh://git@example.com/app",
                "version": {"revision": "a" * 40},
                "secretRef": {"name": "git-credentials"},
            }
        },
        "package": {"kustomize": {"path": "./deploy", "targetNamespace": "apps", "force": True}},
    },
    {"source": {"oci": {"url": "oci://registry.local:5000/app", "version": {"tag": "2.0.0"}, "insecure": True}}},
    {
        "source": {"helm": {"url": "https://charts.example.com", "chart": "podinfo", "version": "6.7.0"}},
        "package": {"helm": {"values": {"replicas": 2, "image": {"tag": "6.7.0"}, "labels": {"é": "ü"}}}},
    },
]

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@st.composite
def syncs(draw: st.DrawFn, module: str) -> AssignedSync:
    document = dict(draw(st.sampled_from(SOURCES)))
    if "git" in document["source"] or "oci" in document["source"]:
        substitute = draw(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), texts))
        package = dict(document.get("package", {}).get("kustomize", {}))
        document = {**document, "package": {"kustomize": {**package, "substitute": substitute}}}
    return AssignedSync(
        module=module,
        module_namespace=draw(st.sampled_from(["fleet", "team-ä"])),
        revision=draw(texts),
        generation=draw(st.none() | st.integers(min_value=1, max_value=10**6)),
        sync=Sync.model_validate(document),
    )


@st.composite
def records(draw: st.DrawFn) -> AssemblageRecord:
    record = AssemblageRecord(cluster=draw(texts), namespace=draw(texts))
    for kind in draw(st.lists(st.sampled_from(["ProxyAssemblage", "RemoteAssemblage"]), unique=True, max_size=2)):
        modules = draw(st.lists(st.from_regex(r"m-[a-z0-9]{1,4}", fullmatch=True), unique=True, max_size=5))
        record.syncs[kind] = {module: draw(syncs(module)) for module in modules}
        record.versions[kind] = draw(st.integers(min_value=0, max_value=10**9))
    return record


@settings(max_examples=200, deadline=None)
@given(records())
def test_a_records_state_json_and_its_snapshots_are_the_bytes_pydantic_and_orjson_write(
    record: AssemblageRecord,
) -> None:
    encoded = EncodedSyncs()
    for _ in range(2):  # the second time from the table
        assert encoded.record_json(record) == record.__pydantic_serializer__.to_json(record) == stored.encode(record)
        for kind in ("ProxyAssemblage", "RemoteAssemblage"):
            published = snapshot(record, kind)
            expected = (
                None
                if published is None
                else orjson.dumps(published.model_dump(mode="json", by_alias=True), option=orjson.OPT_SORT_KEYS)
            )
            assert encoded.snapshot_json(record, kind) == expected
    assert AssemblageRecord.model_validate_json(encoded.record_json(record)) == record


def assignment(cluster: str, module: str, tag: str) -> Assignment:
    sync = Sync.model_validate({"source": {"git": {"url": f"https://example.com/{module}", "version": {"tag": tag}}}})
    return Assignment(
        cluster=cluster,
        cluster_namespace="fleet",
        module=module,
        assemblage="ProxyAssemblage",
        sync=AssignedSync(module=module, module_namespace="fleet", revision=tag, sync=sync),
        reason="test",
    )


def test_a_move_encodes_only_the_sync_that_changed_and_the_others_come_from_the_table() -> None:
    encoded = EncodedSyncs()
    record: AssemblageRecord | None = None
    for n in range(100):
        record, _ = assemble(record, assignment("eu-1", f"m-{n:03d}", "1.0.0"))
    assert record is not None
    encoded.record_json(record)
    encoded.snapshot_json(record, "ProxyAssemblage")
    assert (encoded.encoded, len(encoded)) == (100, 100)

    moved, _ = assemble(record, assignment("eu-1", "m-042", "1.1.0"))
    before = encoded.encoded
    state_json = encoded.record_json(moved)
    snapshot_json = encoded.snapshot_json(moved, "ProxyAssemblage")

    assert encoded.encoded - before == 1  # m-042's new sync; its 99 peers were reused
    assert state_json == stored.encode(moved)
    published = snapshot(moved, "ProxyAssemblage")
    assert published is not None
    assert snapshot_json == orjson.dumps(published.model_dump(mode="json", by_alias=True), option=orjson.OPT_SORT_KEYS)


def test_the_table_holds_at_most_its_capacity_and_encodes_an_evicted_sync_again_the_same() -> None:
    encoded = EncodedSyncs(capacity=10, clusters=0)  # no cluster's forms kept: every sync through the table
    record: AssemblageRecord | None = None
    for n in range(30):
        record, _ = assemble(record, assignment("eu-1", f"m-{n:03d}", "1.0.0"))
    assert record is not None
    first = encoded.record_json(record)
    assert len(encoded) == 10
    assert encoded.record_json(record) == first == stored.encode(record)
    assert len(encoded) == 10
    assert encoded.encoded == 60  # nothing reused: 30 syncs through a table of 10, twice


def test_a_move_looks_up_only_the_changed_sync_and_joins_the_clusters_kept_pieces() -> None:
    encoded = EncodedSyncs()
    record: AssemblageRecord | None = None
    for n in range(100):
        record, _ = assemble(record, assignment("eu-1", f"m-{n:03d}", "1.0.0"))
    assert record is not None
    encoded.record_json(record)
    encoded.snapshot_json(record, "ProxyAssemblage")
    looked_up = encoded.encoded + encoded.reused

    moved, _ = assemble(record, assignment("eu-1", "m-042", "1.1.0"))
    assert encoded.record_json(moved) == stored.encode(moved)
    assert encoded.snapshot_json(moved, "ProxyAssemblage") == orjson.dumps(
        snapshot(moved, "ProxyAssemblage").model_dump(mode="json", by_alias=True),  # type: ignore[union-attr]
        option=orjson.OPT_SORT_KEYS,
    )
    # m-042's new sync: encoded once, then its snapshot form from the table; the 99 others not looked up
    assert encoded.encoded + encoded.reused - looked_up <= 3


def test_a_module_gone_and_back_between_two_encodings_is_encoded_where_the_record_now_has_it() -> None:
    """m-a removed and assigned again with the very sync it had (a wave's shared
    `AssignedSync`) while no version was encoded: the same modules, the same syncs, another
    order — the record's, not the one last encoded (found by the property below)."""
    encoded = EncodedSyncs()
    first = assignment("eu-1", "m-a", "1")
    record, _ = assemble(None, first)
    record, _ = assemble(record, assignment("eu-1", "m-b", "1"))
    assert encoded.record_json(record) == stored.encode(record)
    record, _ = assemble(record, first.model_copy(update={"sync": None}))
    record, _ = assemble(record, first)
    assert list(record.syncs["ProxyAssemblage"]) == ["m-b", "m-a"]

    assert encoded.record_json(record) == stored.encode(record)


moves = st.lists(
    st.tuples(
        st.sampled_from(["eu-1", "eu-2"]),
        st.sampled_from(["m-a", "m-b", "m-c", "m-d"]),
        st.sampled_from(["1", "2", None]),
        st.booleans(),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(moves, st.integers(min_value=0, max_value=3), st.integers(min_value=1, max_value=8))
def test_records_moved_in_any_order_encode_as_pydantic_and_orjson_write_them(
    steps: list[tuple[str, str, str | None, bool]], clusters: int, capacity: int
) -> None:
    """Modules assigned, moved, removed and assigned again, over clusters whose kept forms
    are evicted (`clusters`) and syncs that leave the table (`capacity`), some versions of a
    record never encoded (a batch publishes its last): every state record and snapshot is
    the bytes pydantic and orjson write, in the record's own module order."""
    encoded = EncodedSyncs(capacity=capacity, clusters=clusters)
    records: dict[str, AssemblageRecord | None] = {"eu-1": None, "eu-2": None}
    for cluster, module, tag, published_now in steps:
        moved = assignment(cluster, module, tag or "0")
        if tag is None:
            moved = moved.model_copy(update={"sync": None})
        record, _ = assemble(records[cluster], moved)
        records[cluster] = record
        if not published_now:
            continue
        assert encoded.record_json(record) == stored.encode(record)
        published = snapshot(record, "ProxyAssemblage")
        expected = (
            None
            if published is None
            else orjson.dumps(published.model_dump(mode="json", by_alias=True), option=orjson.OPT_SORT_KEYS)
        )
        assert encoded.snapshot_json(record, "ProxyAssemblage") == expected


def test_the_assemblers_changelog_writes_its_records_as_stored_encode_writes_them() -> None:
    encoded = EncodedSyncs()
    plain = PartitionState(state_mappings())
    reusing = PartitionState(state_mappings(), encoders={"assemblages": encoded.record_json})
    record: AssemblageRecord | None = None
    for n in range(5):
        record, _ = assemble(record, assignment("eu-1", f"m-{n}", "1.0.0"))
    for state in (plain, reusing):
        state.mappings["assemblages"]["eu-1"] = record
        state.keep_event()
    assert reusing.changelog() == plain.changelog()
    assert encoded.encoded == 5


def test_the_table_keeps_no_sync_alive_and_forgets_one_once_it_is_freed() -> None:
    encoded = EncodedSyncs()
    record: AssemblageRecord | None = None
    for n in range(3):
        record = assemble(record, assignment("eu-1", f"m-{n}", "1.0.0"))[0]  # its snapshots not kept
    assert record is not None
    expected = stored.encode(record)
    assert encoded.record_json(record) == expected
    assert len(encoded) == 3

    moved = assemble(record, assignment("eu-1", "m-1", "1.1.0"))[0]
    encoded.record_json(moved)
    assert len(encoded) == 4  # m-1's old sync is still in `record`
    del record  # a record gone cold or replaced: m-1's old sync is freed, and its entry with it
    assert len(encoded) == 3
    del moved  # nothing holds the record's syncs any more: the table is empty
    assert len(encoded) == 0
