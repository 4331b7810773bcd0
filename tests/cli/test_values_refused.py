"""A readOnly refusal says which path it kept, and what the cluster has and the layers
wanted, as fields of its `values-refused` decision's reason (`because`: ValuesRefused), and
`rollout status` and the dashboard group refusals by that path — no reader takes a fact out
of the reason's sentence. Records written before the reason was structured still group:
by the `path` at the top (the builds just before), or each on its own (older)."""

from __future__ import annotations

from typing import Any

from projections.dashboard import pages
from rollout.engine.outcome import DecisionAction
from rollout.wire.decision_reasons import ValuesRefused
from rollout.wire.decisions import DecisionDocument
from rollout_cli.reading.status_values import _refusals
from streams.chain import decision_body
from tests.rollout.builders import cluster, given
from tests.rollout.test_helm_releases import helm_module, values_observed


def test_a_read_only_refusal_names_its_path_and_values_in_fields_of_the_decision_record() -> None:
    fleet = given(cluster("c1"), helm_module(values={"seed": "abc"}, policies={"/seed": "readOnly"}))
    fleet.send(values_observed("c1", {"seed": "generated-on-cluster"}))
    (refused,) = [d for d in fleet.last.decisions if d.action == DecisionAction.VALUES_REFUSED]
    assert refused.cluster == "c1" and isinstance(refused.because, ValuesRefused)
    assert (refused.because.path, refused.because.current, refused.because.wanted) == (
        "/seed",
        "generated-on-cluster",
        "abc",
    )
    record = decision_body(0, 9, 0, refused)
    assert record["because"]["path"] == "/seed" and "path" not in record
    assert DecisionDocument.read(record).refused_path == "/seed"


def refusal(index: int, cluster: str, path: str | None, wants: str, *, structured: bool = True) -> DecisionDocument:
    """A values-refused decision record; `structured` False: written before reasons were
    structured, with the path at the top (`path` None: older still, no path at all)."""
    because = ValuesRefused(cluster=cluster, path=path or "/seed", current="x", wanted=wants, layer="module")
    record: dict[str, Any] = {
        "id": f"0-{index}-0",
        "module": "web",
        "action": "values-refused",
        "cluster": cluster,
        "reason": because.sentence(),
    }
    if structured:
        record["because"] = because.model_dump(mode="json")
    elif path is not None:
        record["path"] = path
    return DecisionDocument.read(record)


def wanted(decision: DecisionDocument) -> Any:
    assert isinstance(decision.because, ValuesRefused)
    return decision.because.wanted


def test_status_and_the_dashboard_show_the_latest_refusal_per_cluster_and_path() -> None:
    decisions = [
        refusal(1, "c1", "/seed", "a"),
        refusal(2, "c1", "/logo", "m"),
        refusal(3, "c1", "/seed", "b"),  # replaces the first
        refusal(4, "c2", "/seed", "b", structured=False),  # the path at the top
        refusal(5, "c2", "/seed", "c"),  # replaces it
        refusal(6, "c2", None, "old", structured=False),  # an older record: on its own
    ]
    shown = _refusals(decisions)
    assert [(d.refused_path, wanted(d)) for d in shown["c1"]] == [("/logo", "m"), ("/seed", "b")]
    assert [(d.id, d.refused_path) for d in shown["c2"]] == [("0-5-0", "/seed"), ("0-6-0", None)]
    listed = pages.values_refused(decisions)
    assert [(row["cluster"], row["path"]) for row in listed] == [
        ("c1", "/logo"),
        ("c1", "/seed"),
        ("c2", "/seed"),
        ("c2", None),
    ]
    assert listed[1]["reason"] == decisions[2].reason
