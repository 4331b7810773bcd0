"""Warnings for a user about to be surprised: a module or a stage that will move no cluster.

A Module whose selector matches none of the known clusters is accepted and is at once
`Complete 0/0`; a stage whose selector catches none of the module's clusters passes with
nothing to do. Both are legal — a fleet may grow into them — so `rollout apply` still
applies them, and `apply` and `rollout plan` both say so with these lines. Pure: a function
of the module and its plan against the fleet as it is known.
"""

from __future__ import annotations

from rollout.api.manifests import BootstrapModuleManifest, ModuleManifest
from rollout.planning.plan import RolloutPlan


def surprises(module: ModuleManifest | BootstrapModuleManifest, plan: RolloutPlan) -> list[str]:
    """One sentence per surprise, naming the module (and stage) and what will happen."""
    what = f"{module.kind.lower()}/{module.metadata.name}"
    staged = [sum(len(batch) for batch in stage.batches) + len(stage.skipped_not_ready) for stage in plan.stages]
    selected = sum(staged) + len(plan.unstaged)
    known = selected + plan.not_selected
    if module.spec.selector is None:
        return [f"{what} has no selector: it selects no cluster and completes at once (selector: {{}} selects all)"]
    if selected == 0:
        return [
            f"{what}: its selector matches none of the {known} known cluster(s); "
            "it completes at once, deploying nothing, until a matching cluster appears"
        ]
    return [
        f"{what}: stage {stage.name} gets none of the module's {selected} cluster(s); it will pass with nothing to do"
        for stage, members in zip(plan.stages, staged, strict=True)
        if members == 0
    ]
