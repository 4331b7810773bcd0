"""The engine's hot-path outcome models (rollout/engine/outcome.py `assignment`, `decision`)
are what pydantic's validation makes of the same values: the same fields, the same fields
set, the same JSON — built without validating them again."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rollout.api.manifests import Sync
from rollout.engine.outcome import Assignment, Decision, DecisionAction, assignment, decision
from rollout.wire.assemblages import AssignedSync
from rollout.wire.decision_reasons import MovedToTarget, StageSkipped, SyncSucceeded

texts = st.text(max_size=10)
SYNC = AssignedSync(
    module="m",
    module_namespace="fleet",
    revision="1.0.0",
    generation=3,
    sync=Sync.model_validate({"source": {"git": {"url": "https://example.com/app", "version": {"tag": "1.0.0"}}}}),
)
reasons = st.one_of(
    st.builds(
        MovedToTarget, cluster=texts, revision=texts, stage=texts, slot=st.integers(0, 99), movable=st.integers(0, 99)
    ),
    st.builds(SyncSucceeded, cluster=texts, revision=texts),
    st.builds(StageSkipped, stage=texts),
)


def same(ours: object, theirs: object) -> None:
    assert type(ours) is type(theirs)
    for slot in ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
        assert getattr(ours, slot) == getattr(theirs, slot), slot
    assert ours == theirs
    assert ours.model_dump_json(by_alias=True) == theirs.model_dump_json(by_alias=True)  # type: ignore[attr-defined]
    assert list(ours.__dict__) == list(theirs.__dict__)  # the decider's records read __dict__ in order


@settings(max_examples=100, deadline=None)
@given(texts, texts, texts, st.sampled_from(["ProxyAssemblage", "RemoteAssemblage"]), st.booleans(), texts)
def test_an_assignment_is_the_validated_model(
    cluster: str, namespace: str, module: str, assemblage: str, removal: bool, reason: str
) -> None:
    values = {
        "cluster": cluster,
        "cluster_namespace": namespace,
        "module": module,
        "assemblage": assemblage,
        "sync": None if removal else SYNC,
        "reason": reason,
    }
    same(assignment(**values), Assignment(**values))  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(
    texts,
    st.sampled_from(list(DecisionAction)),
    texts,
    reasons,
    st.none() | texts,
    st.none() | st.integers(1, 10**6),
    st.none() | texts,
    st.floats(min_value=0, max_value=1e9) | st.integers(0, 10**9),  # a clock set by hand holds an int
    st.none() | texts,
    st.none() | st.floats(min_value=0, max_value=1e6) | st.integers(0, 10**6),
)
def test_a_decision_is_the_validated_model(
    module: str,
    action: DecisionAction,
    reason: str,
    because: MovedToTarget | SyncSucceeded | StageSkipped,
    cluster: str | None,
    generation: int | None,
    revision: str | None,
    at: float,
    stage: str | None,
    stage_seconds: float | None,
) -> None:
    values = {
        "module": module,
        "action": action,
        "reason": reason,
        "because": because,
        "cluster": cluster,
        "generation": generation,
        "revision": revision,
        "at": at,
        "stage": stage,
        "stage_seconds": stage_seconds,
    }
    same(decision(**values), Decision(**values))  # type: ignore[arg-type]
