"""A readOnly refusal says which path it kept as a field of its `values-refused` decision
(`path`), and `rollout status` and the dashboard group refusals by that field — no reader
takes the path out of the reason's sentence."""

from __future__ import annotations

from projections.dashboard import pages
from rollout.engine.outcome import Decision, DecisionAction
from rollout_cli.reading.status_values import _refusals
from streams.chain import decision_body
from tests.rollout.builders import cluster, given
from tests.rollout.test_helm_releases import helm_module, values_observed


def test_a_read_only_refusal_names_its_path_in_a_field_of_the_decision_record() -> None:
    fleet = given(cluster("c1"), helm_module(values={"seed": "abc"}, policies={"/seed": "readOnly"}))
    fleet.send(values_observed("c1", {"seed": "generated-on-cluster"}))
    (refused,) = [d for d in fleet.last.decisions if d.action == DecisionAction.VALUES_REFUSED]
    assert (refused.cluster, refused.path) == ("c1", "/seed")
    record = decision_body(0, 9, 0, refused)
    assert record["path"] == "/seed"
    assert "path" not in decision_body(0, 9, 1, Decision(module="m", action=DecisionAction.ASSIGN, reason="c1 → v2"))


def refusal(index: int, cluster: str, path: str | None, wants: str) -> dict[str, object]:
    """A values-refused decision record (`path` None: written before decisions carried it)."""
    reason = f"{cluster}: {path or '/seed'} is readOnly: the cluster has 'x', the module layer wants '{wants}'; refused"
    record = {"id": f"0-{index}-0", "module": "web", "action": "values-refused", "cluster": cluster, "reason": reason}
    return record | ({"path": path} if path is not None else {})


def test_status_and_the_dashboard_show_the_latest_refusal_per_cluster_and_path() -> None:
    decisions = [
        refusal(1, "c1", "/seed", "a"),
        refusal(2, "c1", "/logo", "m"),
        refusal(3, "c1", "/seed", "b"),  # replaces the first
        refusal(4, "c2", "/seed", "b"),
        refusal(5, "c2", None, "old"),  # an older record: on its own
    ]
    shown = _refusals(decisions)
    assert [reason.rsplit("wants ", 1)[1] for reason in shown["c1"]] == ["'m'; refused", "'b'; refused"]
    assert len(shown["c2"]) == 2
    listed = pages.values_refused(decisions)
    assert [(row["cluster"], row["reason"].rsplit("wants ", 1)[1][:3]) for row in listed] == [
        ("c1", "'m'"),
        ("c1", "'b'"),
        ("c2", "'b'"),
        ("c2", "'ol"),
    ]
