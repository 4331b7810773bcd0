"""The assembler's assignment decoder (streams/assignment_decoding.py) returns what
`Assignment.model_validate_json` returns and raises what it raises, for any record — while
equal syncs come out as one object."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rollout.engine.outcome import Assignment
from streams.assignment_decoding import AssignmentDecoder
from tests.streams.test_assemblage_encoding import syncs, texts


def outcome(decode: Any, value: bytes) -> tuple[str, Any]:
    try:
        return "ok", decode(value)
    except (ValidationError, ValueError) as error:
        return type(error).__name__, str(error)


@st.composite
def assignment_documents(draw: st.DrawFn) -> dict[str, Any]:
    module = draw(st.sampled_from(["m-a", "m-b"]))
    sync = draw(st.none() | syncs(module))
    return {
        "cluster": draw(st.sampled_from(["eu-1", "eu-2", "us-1"])),
        "clusterNamespace": draw(st.sampled_from(["fleet", "team-ä"])),
        "module": module,
        "assemblage": draw(st.sampled_from(["ProxyAssemblage", "RemoteAssemblage"])),
        "sync": None if sync is None else sync.model_dump(mode="json", by_alias=True),
        "reason": draw(texts),
    }


JSON_ODDITIES = st.sampled_from(
    [
        12345678901234567890123,  # past 64 bits: orjson cannot write it, pydantic reads an int
        1.0,
        1,
        True,
        None,
        float("nan"),  # written as NaN below
        "x",
        [],
        {},
    ]
)


@st.composite
def damaged(draw: st.DrawFn, document: dict[str, Any]) -> bytes:
    """`document` as the decider writes it, or with one field made odd — the values JSON
    parsers disagree on, a wrong type, a field missing or doubled — or not JSON at all."""
    how = draw(st.sampled_from(["as-is", "field", "sync-field", "missing", "doubled", "nan", "text", "reordered"]))
    document = dict(document)
    if how == "field":
        document[draw(st.sampled_from(sorted(document)))] = draw(JSON_ODDITIES)
    elif how == "sync-field" and document["sync"] is not None:
        sync = dict(document["sync"])
        sync[draw(st.sampled_from([*sorted(sync), "extra"]))] = draw(JSON_ODDITIES)
        document["sync"] = sync
    elif how == "missing":
        del document[draw(st.sampled_from(sorted(document)))]
    elif how == "doubled":
        return written(document)[:-1] + b',"cluster":' + written(draw(JSON_ODDITIES)) + b"}"
    elif how == "nan" and document["sync"] is not None:
        return written({**document, "sync": {**document["sync"], "generation": float("nan")}})
    elif how == "text":
        return draw(st.binary(max_size=40))
    elif how == "reordered":
        return json.dumps(dict(reversed(list(document.items()))), indent=2, ensure_ascii=False).encode()
    return written(document)


def written(value: Any) -> bytes:
    """JSON as the decider writes it (compact, UTF-8), but with what orjson refuses to write —
    integers past 64 bits, NaN — written too (by the standard library)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@settings(max_examples=300, deadline=None)
@given(st.lists(assignment_documents(), min_size=1, max_size=8).flatmap(lambda ds: st.tuples(*map(damaged, ds))))
def test_decoding_returns_and_raises_what_model_validate_json_does(values: tuple[bytes, ...]) -> None:
    decoder = AssignmentDecoder()
    for value in (*values, *values):  # the second time, syncs seen before come from the decoder
        assert outcome(decoder.decode, value) == outcome(Assignment.model_validate_json, value)


def document(cluster: str, tag: str) -> bytes:
    sync = {"module": "m-a", "moduleNamespace": "fleet", "revision": tag, "generation": 1}
    sync["sync"] = {"source": {"git": {"url": "https://example.com/app", "version": {"tag": tag}}}}
    body = {"cluster": cluster, "clusterNamespace": "fleet", "module": "m-a", "assemblage": "ProxyAssemblage"}
    return orjson.dumps({**body, "sync": sync, "reason": f"assigned {tag}"})


def test_a_sync_assigned_to_many_clusters_is_decoded_once_and_shared() -> None:
    decoder = AssignmentDecoder()
    decoded = [decoder.decode(document(f"c-{n}", "1.0.0")) for n in range(50)]
    assert (decoder.decoded, decoder.shared) == (1, 49)
    assert all(a.sync is decoded[0].sync for a in decoded)
    assert [a.cluster for a in decoded] == [f"c-{n}" for n in range(50)]
    assert decoded[7] == Assignment.model_validate_json(document("c-7", "1.0.0"))
    other = decoder.decode(document("c-0", "1.1.0"))
    assert other.sync is not decoded[0].sync and decoder.decoded == 2


def test_the_decoder_holds_at_most_its_capacity_and_decodes_an_evicted_sync_again() -> None:
    decoder = AssignmentDecoder(capacity=3)
    for tag in ("1", "2", "3", "4"):
        decoder.decode(document("c-0", tag))
    assert len(decoder) == 3
    again = decoder.decode(document("c-1", "1"))  # evicted: validated in full, equal
    assert decoder.decoded == 5 and again == Assignment.model_validate_json(document("c-1", "1"))
    assert len(decoder) == 3


def test_an_envelope_that_does_not_validate_raises_as_before_even_with_its_sync_known() -> None:
    decoder = AssignmentDecoder()
    decoder.decode(document("c-0", "1.0.0"))
    broken = document("c-1", "1.0.0").replace(b'"cluster":"c-1"', b'"cluster":7')
    with pytest.raises(ValidationError) as raised:
        decoder.decode(broken)
    with pytest.raises(ValidationError) as expected:
        Assignment.model_validate_json(broken)
    assert str(raised.value) == str(expected.value)


def test_values_one_parser_reads_and_another_would_not_are_not_taken_for_a_sync_seen_before() -> None:
    """NaN is written as null by orjson, and an integer past 64 bits read as a float by it:
    neither may stand for the sync it would be mistaken for."""
    decoder = AssignmentDecoder()
    known = orjson.loads(document("c-0", "1.0.0"))
    known["sync"]["generation"] = None
    outcome(decoder.decode, orjson.dumps(known))
    known["sync"]["generation"] = 1.2345678901234568e22
    outcome(decoder.decode, orjson.dumps(known))
    nan = written({**known, "sync": {**known["sync"], "generation": float("nan")}})
    big = written({**known, "sync": {**known["sync"], "generation": 12345678901234567890123}})
    for value in (nan, big):
        assert outcome(decoder.decode, value) == outcome(Assignment.model_validate_json, value)
    assert outcome(decoder.decode, nan)[0] == "ValidationError"
    assert outcome(decoder.decode, big)[1].sync.generation == 12345678901234567890123
