"""The applier's snapshot decoder (projections/snapshot_decoder.py): the same `Assemblage` and
the same errors as validating the whole document, each distinct sync validated once."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from projections.snapshot_decoder import SnapshotDecoder
from rollout.wire.assemblages import Assemblage
from tests.projections.test_directory_sink import snapshot, sync


def encoded(assemblage: Assemblage) -> bytes:
    """As the assembler writes it (streams/assembler.py)."""
    return orjson.dumps(assemblage.model_dump(mode="json", by_alias=True), option=orjson.OPT_SORT_KEYS)


def test_a_decoded_snapshot_equals_the_whole_document_validated() -> None:
    value = encoded(snapshot(3, sync("podinfo", substitute={"A": "x"}), sync("ingress"), cluster="eu-1"))
    assert SnapshotDecoder().decode(value) == Assemblage.model_validate_json(value)


def test_a_sync_is_validated_once_however_many_snapshots_and_clusters_carry_it() -> None:
    decoder = SnapshotDecoder()
    for version in range(1, 4):
        for cluster in ("eu-1", "eu-2"):
            decoder.decode(
                encoded(snapshot(version, sync("podinfo"), sync("ingress", tag=f"{version}.0"), cluster=cluster))
            )
    # podinfo once; ingress once per tag
    assert (decoder.validated, decoder.reused) == (1 + 3, 12 - 4)
    first = decoder.decode(encoded(snapshot(4, sync("podinfo"), cluster="eu-3"))).spec.syncs[0]
    second = decoder.decode(encoded(snapshot(5, sync("podinfo"), cluster="eu-4"))).spec.syncs[0]
    assert first is second


def test_the_decoders_table_of_syncs_is_bounded() -> None:
    decoder = SnapshotDecoder(capacity=3)
    for n in range(10):
        decoder.decode(encoded(snapshot(1, sync(f"m-{n}"))))
    assert len(decoder._syncs) == 3
    decoder.decode(encoded(snapshot(2, sync("m-0"))))  # evicted: validated again
    assert decoder.validated == 11


def invalid_sync_document() -> bytes:
    document = orjson.loads(encoded(snapshot(2, sync("podinfo"), sync("ingress"))))
    document["spec"]["syncs"][1]["sync"]["source"]["git"]["url"] = "not a url"
    return orjson.dumps(document)


@pytest.mark.parametrize(
    "value",
    [
        b"{not json",
        b"[]",
        b'{"kind": "ProxyAssemblage"}',
        b'{"kind": "ProxyAssemblage", "metadata": {"name": "a", "namespace": "b"}, "version": 1, "spec": {"syncs": 3}}',
        b'{"kind": "Nope", "metadata": {"name": "a", "namespace": "b"}, "version": 1, "spec": {"syncs": []}}',
        invalid_sync_document(),
    ],
    ids=["not-json", "not-an-object", "no-spec", "syncs-not-a-list", "bad-kind", "bad-sync"],
)
def test_a_malformed_snapshot_fails_with_the_error_of_the_whole_document(value: bytes) -> None:
    with pytest.raises(ValidationError) as whole:
        Assemblage.model_validate_json(value)
    with pytest.raises(ValidationError) as decoded:
        SnapshotDecoder().decode(value)
    assert decoded.value.json() == whole.value.json()


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=4), st.floats(allow_nan=False))


def _mutations() -> st.SearchStrategy[list[tuple[list[str], Any]]]:
    paths = st.sampled_from(
        [
            ["version"],
            ["kind"],
            ["metadata", "name"],
            ["spec", "syncs", 0, "revision"],
            ["spec", "syncs", 0, "generation"],
            ["spec", "syncs", 1, "sync", "interval"],
            ["spec", "syncs", 1, "sync", "package", "kustomize", "path"],
            ["spec", "syncs", 0, "sync", "source", "git", "version"],
            ["spec", "syncs", 0, "extra"],
        ]
    )
    return st.lists(st.tuples(paths, _SCALARS), max_size=3)


@settings(max_examples=200, deadline=None)
@given(_mutations())
def test_the_decoder_accepts_and_refuses_what_the_whole_document_validation_does(
    mutations: list[tuple[list[str], Any]],
) -> None:
    document = orjson.loads(encoded(snapshot(2, sync("podinfo"), sync("ingress"))))
    for path, value in mutations:
        target = document
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    raw = orjson.dumps(document)
    try:
        expected: Any = Assemblage.model_validate_json(raw)
    except ValidationError as error:
        expected = error.json()
    decoder = SnapshotDecoder()
    for _ in range(2):  # a second time from the table
        try:
            got: Any = decoder.decode(raw)
        except ValidationError as error:
            got = error.json()
        assert got == expected
