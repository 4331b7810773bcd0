"""The decider's assignment records (streams/assignment_encoding.py) are the bytes
`Assignment.model_dump_json(by_alias=True)` writes, each sync encoded once while it is held."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.api.manifests import Sync
from rollout.engine.outcome import Assignment
from rollout.wire.assemblages import AssignedSync
from streams.assignment_encoding import AssignmentEncoder

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


def sync(revision: str, generation: int | None = 1) -> AssignedSync:
    source = Sync.model_validate({"source": {"git": {"url": "https://example.com/app", "version": {"tag": "1.0.0"}}}})
    return AssignedSync(module="m", module_namespace="fleet", revision=revision, generation=generation, sync=source)


@settings(max_examples=200, deadline=None)
@given(texts, texts, texts, st.sampled_from(["ProxyAssemblage", "RemoteAssemblage"]), texts, texts, st.booleans())
def test_an_assignment_is_the_bytes_pydantic_writes(
    cluster: str, namespace: str, module: str, assemblage: str, reason: str, revision: str, removal: bool
) -> None:
    assignment = Assignment(
        cluster=cluster,
        cluster_namespace=namespace,
        module=module,
        assemblage=assemblage,
        sync=None if removal else sync(revision, None if revision == "" else 2),
        reason=reason,
    )
    assert AssignmentEncoder().encode(assignment) == assignment.model_dump_json(by_alias=True).encode()


def test_a_waves_assignments_share_one_encoding_of_their_sync() -> None:
    encoder, shared = AssignmentEncoder(), sync("1.0.0")
    for n in range(50):
        assignment = Assignment(
            cluster=f"c-{n}",
            cluster_namespace="fleet",
            module="m",
            assemblage="ProxyAssemblage",
            sync=shared,
            reason="r",
        )
        assert encoder.encode(assignment) == assignment.model_dump_json(by_alias=True).encode()
    assert encoder.encoded == 1


def test_the_encoder_holds_at_most_its_capacity() -> None:
    encoder = AssignmentEncoder(capacity=3)
    for n in range(10):
        encoder.encode(
            Assignment(
                cluster="c",
                cluster_namespace="fleet",
                module="m",
                assemblage="ProxyAssemblage",
                sync=sync(f"1.{n}.0"),
                reason="",
            )
        )
        assert len(encoder._syncs) <= 3
    assert encoder.encoded == 10
