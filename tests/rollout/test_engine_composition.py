"""The engine is composed, not inherited (rollout/engine/core.py): a dispatch table from event
type to handler, and hook lists run in a fixed order. These tests make losing or reordering
an entry visible — the defect of the mixin tower, where lease expiry ran on a Tick only
through a `super()` chain that a reordering of base classes silently cut.

* every event type the journal carries has a handler;
* for every hook list of the engine, removing any one entry changes what some scenario
  below decides (so a hook list cannot lose an entry unnoticed, and a new hook list or
  entry needs a scenario here);
* leases expire before modules move on the same Tick.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, get_args

import pytest

import rollout.engine.core as core
from rollout.engine.core import RolloutEngine, new_engine
from rollout.engine.tombstones import TOMBSTONE_HORIZON
from rollout.wire.events import InputEvent
from tests.rollout.builders import (
    T0,
    Fleet,
    applied,
    calendar_break_glass,
    cluster,
    command,
    freeze_calendar,
    given,
    heartbeat,
    module,
    observed,
    removed,
    reported,
    serialize,
    stage,
    tick,
)

CANARY = {"ring": "canary"}
WAVE = {"ring": "wave"}
EVENINGS = {"schedule": "0 22 * * 1-5", "duration": "4h", "timeZone": "Europe/Berlin"}
MONDAY_20H_UTC = 1772481600.0  # 2026-03-02T20:00:00Z: 21:00 in Berlin, the evening window opens in an hour


# -- the dispatch table ----------------------------------------------------------------------


def test_every_journal_event_type_has_a_handler() -> None:
    event_types = set(get_args(get_args(InputEvent)[0]))
    assert set(new_engine().handlers) == event_types


def test_no_part_of_the_engine_builds_on_another_by_inheritance() -> None:
    """Concerns receive their collaborators; none subclasses another (no `super()` chains)."""
    engine = new_engine()
    parts = [value for value in vars(engine).values() if type(value).__module__.startswith("rollout.engine.")]
    assert len(parts) >= 12
    for part in [*parts, engine]:
        assert type(part).__bases__ == (object,), f"{type(part).__name__} inherits {type(part).__bases__}"
        source = inspect.getsource(type(part))
        assert "super()" not in source, f"{type(part).__name__} calls super()"


# -- scenarios that notice each hook -------------------------------------------------------


def app(*stages: dict[str, Any], **spec: Any) -> Any:
    return module("app", {}, "v1", *(stages or (stage("canary", CANARY), stage("wave", WAVE))), **spec)


def lease_expiry(fleet: Fleet) -> None:
    """w1's lease runs out before the wave starts: it is skipped, not moved."""
    fleet.send(tick(T0), cluster("c1", CANARY), cluster("w1", WAVE), heartbeat("w1", 60), app())
    fleet.run_for(61)
    fleet.succeed("app", "c1")


def lease_renewed_before_the_first_tick(fleet: Fleet) -> None:
    """A lease renewed before any tick runs from the first one, then expires."""
    fleet.send(cluster("c1", CANARY), cluster("w1", WAVE), heartbeat("w1", 60), tick(T0), app())
    fleet.run_for(61)
    fleet.succeed("app", "c1")


def soak_from_the_first_tick(fleet: Fleet) -> None:
    """A stage done before the engine knew the time soaks from the first tick."""
    fleet.send(cluster("c1", CANARY), cluster("w1", WAVE), app(stage("canary", CANARY, soak="5m"), stage("wave", WAVE)))
    fleet.send(reported("app", "c1", "v1", "succeeded"), tick(T0))


def window_waits_from_the_first_tick(fleet: Fleet) -> None:
    """A window wait entered before any tick is entered again at the first one, saying when
    the window opens."""
    fleet.send(cluster("c1", CANARY), app(windows=[EVENINGS]), tick(MONDAY_20H_UTC))


def progress_deadline(fleet: Fleet) -> None:
    """An assigned cluster that never reports fails once progressDeadline passed."""
    fleet.send(tick(T0), cluster("c1", CANARY), cluster("w1", WAVE), app(deadline="2m"))
    fleet.wait(121)


def hold_lapsed(fleet: Fleet) -> None:
    """w1's owner holds it until T0 + 10 minutes: the tick past it releases it, and it moves."""
    until = datetime.fromtimestamp(T0 + 600, tz=UTC).isoformat()
    held = cluster("w1", WAVE, annotations={"rollout.dev/hold": "true", "rollout.dev/hold-until": until})
    fleet.send(tick(T0), cluster("c1", CANARY), held, app())
    fleet.succeed("app", "c1")
    fleet.wait(601)


def break_glass_ended(fleet: Fleet) -> None:
    """A calendar freezes app; break-glass lets c1 move for 10 minutes; the tick past it ends
    the override, and w1 waits for the freeze again."""
    always = {"name": "every-minute", "schedule": "* * * * *", "duration": "1h"}
    fleet.send(tick(T0), freeze_calendar("always", always), cluster("c1", CANARY), cluster("w1", WAVE), app())
    fleet.send(command("app", "break-glass", reason="sev-1", until=T0 + 600))
    fleet.wait(601)
    fleet.succeed("app", "c1")


def calendar_break_glass_ended(fleet: Fleet) -> None:
    """A calendar's break-glass lets app's c1 move for 10 minutes; the tick past it ends it
    (decided about the calendar) and shows app's status without it."""
    always = {"name": "every-minute", "schedule": "* * * * *", "duration": "1h"}
    fleet.send(tick(T0), freeze_calendar("always", always), cluster("c1", CANARY), cluster("w1", WAVE), app())
    fleet.send(calendar_break_glass("always", T0 + 600))
    fleet.wait(601)


def dependency_answered_after_its_intent(fleet: Fleet) -> None:
    """app applied with base's intent (`after`), its link folded before that intent: base
    answers once the intent is applied (the `after_intent` hook), and app moves."""
    base = module("base", {}, "b1")
    fleet.send(tick(T0), cluster("c1", CANARY), base, module("app", {}, "v1", depends_on=["base"]))
    fleet.succeed("base", "c1")
    fleet.succeed("app", "c1")
    base_apply = applied(module("base", {}, "b2"))
    fleet.send(applied(module("app", {}, "v2", depends_on=["base"]), after={"base": base_apply.id}), base_apply)
    fleet.succeed("base", "c1")


def redo(fleet: Fleet, event: Any) -> None:
    """`event` folded, its writes discarded and the indexes reset (what the runtime does when
    an event fails before the commit), then folded again."""
    saved = copy.deepcopy(fleet.state)
    fleet.engine.handle(event)
    for name, mapping in fleet.state.items():
        mapping.clear()
        mapping.update(saved[name])
    fleet.engine.reset_indexes()
    fleet.send(event)


def lease_expiry_redone(fleet: Fleet) -> None:
    """The tick that expired w1's lease is discarded and folded again: it expires again."""
    fleet.send(tick(T0), cluster("c1", CANARY), cluster("w1", WAVE), heartbeat("w1", 60), app())
    fleet.run_for(40)  # ticks as a worker sends them: leases count each in full
    redo(fleet, tick(T0 + 61))
    fleet.succeed("app", "c1")


def report_redone(fleet: Fleet) -> None:
    """The report that let the next canary cluster move is discarded and folded again."""
    fleet.send(tick(T0), cluster("c1", CANARY), cluster("c2", CANARY))
    fleet.send(app(stage("canary", CANARY, concurrency=1)))
    redo(fleet, reported("app", "c1", "v1", "succeeded"))


def past_the_tombstone_horizon(fleet: Fleet, redone: bool = False) -> None:
    """Hourly ticks up to the horizon from now, the last one at it (redone, if asked)."""
    end = fleet.now + TOMBSTONE_HORIZON
    while fleet.now + 3600 < end:
        fleet.wait(3600)
    if redone:
        redo(fleet, tick(end))
    else:
        fleet.tick(end)


def offline_wait_over(fleet: Fleet) -> None:
    """w1 goes offline before the wave starts; the wave waits a minute for it, then skips it
    and passes."""
    fleet.send(tick(T0), observed(cluster("c1", CANARY)), observed(cluster("w1", WAVE)), heartbeat("w1", 30))
    fleet.send(app(offline={"wait": "1m"}))
    fleet.tick(T0 + 31)
    fleet.send(reported("app", "c1", "v1", "succeeded"))
    fleet.tick(T0 + 100)


def tombstone_pruned(fleet: Fleet) -> None:
    """c1 removed; a horizon later its tombstone is pruned, and its old observation, sent
    again, is a new cluster: app takes it."""
    observation = observed(cluster("c1", CANARY))
    fleet.send(tick(T0), observation, app(), removed("c1"))
    past_the_tombstone_horizon(fleet)
    fleet.send(observation)


def tombstone_pruned_redone(fleet: Fleet) -> None:
    """The tick that prunes c1's tombstone is discarded and folded again: it prunes again."""
    observation = observed(cluster("c1", CANARY))
    fleet.send(tick(T0), observation, app(), removed("c1"))
    past_the_tombstone_horizon(fleet, redone=True)
    fleet.send(observation)


SCENARIOS: list[Callable[[Fleet], None]] = [
    lease_expiry,
    lease_renewed_before_the_first_tick,
    soak_from_the_first_tick,
    window_waits_from_the_first_tick,
    progress_deadline,
    hold_lapsed,
    break_glass_ended,
    calendar_break_glass_ended,
    offline_wait_over,
    dependency_answered_after_its_intent,
    lease_expiry_redone,
    report_redone,
    tombstone_pruned,
    tombstone_pruned_redone,
]

# every hook list of the engine, by where it lives
HOOK_LISTS: dict[str, Callable[[RolloutEngine], list[Any]]] = {
    "on_clock_moved": lambda engine: engine.on_clock_moved,
    "timers.steps": lambda engine: engine.timers.steps,
    "after_intent": lambda engine: engine.after_intent,
    "on_reset": lambda engine: engine.on_reset,
}


def run(scenario: Callable[[Fleet], None], without: tuple[str, int] | None = None) -> list[dict[str, Any]]:
    """The outcomes of `scenario`, on an engine whose hook list `without[0]` lacks its entry
    `without[1]` (None: the engine as built)."""
    fleet = Fleet()
    if without is not None:
        fleet.check_each_event = False  # a crippled engine may well be inconsistent
        del HOOK_LISTS[without[0]](fleet.engine)[without[1]]
    scenario(fleet)
    return [serialize(outcome) for outcome in fleet.outcomes]


def hook_entries() -> list[tuple[str, int, str]]:
    engine = new_engine()
    return [
        (name, index, hook.__qualname__)
        for name, hooks in ((name, get(engine)) for name, get in HOOK_LISTS.items())
        for index, hook in enumerate(hooks)
    ]


def test_every_hook_list_of_the_engine_is_checked_here() -> None:
    engine = new_engine()
    found = {
        f"{owner}{name}"
        for owner, holder in (("", engine), ("timers.", engine.timers))
        for name, value in vars(holder).items()
        if isinstance(value, list) and value and all(callable(item) for item in value)
    }
    assert found == set(HOOK_LISTS)


@pytest.mark.parametrize(("hooks", "index", "hook"), hook_entries(), ids=[f"{h}-{q}" for h, _, q in hook_entries()])
def test_an_engine_missing_any_hook_decides_differently(hooks: str, index: int, hook: str) -> None:
    changed = [scenario.__name__ for scenario in SCENARIOS if run(scenario, (hooks, index)) != run(scenario)]
    assert changed, f"no scenario notices {hooks} without {hook}: add one that does"


def test_a_lease_expires_on_the_first_tick_past_it() -> None:
    fleet = given(cluster("w1", WAVE), heartbeat("w1", 60))
    fleet.run_for(59)
    assert fleet.clusters["w1"].ready
    fleet.run_for(1)
    assert not fleet.clusters["w1"].ready
    assert fleet.clusters["w1"].lease is not None and fleet.clusters["w1"].lease.expired


def test_leases_expire_before_modules_move_on_the_same_tick() -> None:
    """The tick that ends the canary's soak also ends w1's lease: the wave starts without w1."""
    fleet = given(cluster("c1", CANARY), cluster("w1", WAVE), heartbeat("w1", 60))
    fleet.apply(app(stage("canary", CANARY, soak="60s"), stage("wave", WAVE)))
    fleet.wait(10)
    fleet.succeed("app", "c1")  # soaks until T0 + 70; w1's lease runs out at T0 + 60
    fleet.run_for(40)
    fleet.tick(T0 + 70)
    assert fleet.phase("app") != "Soaking"
    assert fleet.revision("app", "w1") is None
    assert fleet.category("app", "w1") == "not_ready"


def test_the_clock_hooks_are_documented_in_their_order() -> None:
    engine = new_engine()
    names = [hook.__qualname__ for hook in engine.on_clock_moved]
    assert names == [
        "Leases.expire_leases",
        "ModuleTimers.on_clock_moved",
        "FreezeCalendars.end_break_glass",
        "Tombstones.prune",
    ]
    doc = core.__doc__ or ""
    places = [doc.index(name) for name in names]
    assert places == sorted(places)
