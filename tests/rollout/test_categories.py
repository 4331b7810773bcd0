"""The categories a target can be in, named once by the engine (`Category`) and once by the
status document every reader shares (`TARGET_STATES`): the same names in the same order."""

from __future__ import annotations

from rollout.engine.state import CATEGORIES, StageCounts
from rollout.wire.status import TARGET_STATES


def test_the_status_documents_target_states_are_the_engines_categories_in_order() -> None:
    assert TARGET_STATES == CATEGORIES


def test_every_category_has_a_counter_in_a_stages_counts() -> None:
    assert set(CATEGORIES) <= set(StageCounts.model_fields)
