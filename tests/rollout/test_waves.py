"""Randomized waves (docs/rollout-semantics.md, "Randomized waves"): one given/when/then test
per rule. A stage with `waves: {size, order, seed, delay}` moves its members a wave at a time
in a seeded order; the order is computed here from the documented rank — SHA-256 over
"<seed>/<cluster>", its first 15 hex digits — not from the engine's function."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pydantic import ValidationError

from rollout.api.manifests import Stage
from rollout.wire.decision_reasons import WaveStarted
from tests.rollout.builders import Fleet, cluster, given, module, removed, stage

CANARY = {"ring": "canary"}
FLEET = [f"c{n:02d}" for n in range(1, 9)]  # eight members of one stage
SEED = 7


def seeded_order(seed: int, names: list[str]) -> list[str]:
    return sorted(names, key=lambda name: (int(hashlib.sha256(f"{seed}/{name}".encode()).hexdigest()[:15], 16), name))


def app(tag: str = "v1", **waves: Any) -> Any:
    spec = {"size": 3, "seed": SEED, **waves}
    return module("app", {}, tag, stage("all", None, waves={k: v for k, v in spec.items() if v is not None}))


def fleet_of(*manifests: Any, names: list[str] = FLEET, **labels: str) -> Fleet:
    return given(*[cluster(name, dict(labels)) for name in names], *manifests)


def updating(fleet: Fleet) -> list[str]:
    return sorted(name for name in FLEET if fleet.category("app", name) == "updating")


def waves_started(fleet: Fleet) -> list[WaveStarted]:
    return [d.because for d in fleet.decisions if d.action == "wave-started"]  # type: ignore[misc]


def test_a_stage_with_waves_moves_its_members_a_wave_at_a_time_in_seeded_order() -> None:
    order = seeded_order(SEED, FLEET)
    assert order != sorted(FLEET)  # the seed shuffles: this test is not the name order by chance
    fleet = fleet_of(app())
    assert updating(fleet) == sorted(order[:3])
    fleet.succeed("app", *order[:3])
    assert updating(fleet) == sorted(order[3:6])
    fleet.succeed("app", *order[3:6])
    assert updating(fleet) == sorted(order[6:])
    fleet.succeed("app", *order[6:])
    assert fleet.phase("app") == "Complete"


def test_the_next_wave_starts_only_once_the_wave_is_done_and_its_delay_has_passed() -> None:
    order = seeded_order(SEED, FLEET)
    fleet = fleet_of(app(delay="10m"))
    fleet.succeed("app", *order[:2])
    assert updating(fleet) == [order[2]]  # the wave is not done while one member updates
    fleet.wait(3600)
    assert updating(fleet) == [order[2]]
    fleet.succeed("app", order[2])  # done now: the delay starts
    assert updating(fleet) == []
    fleet.wait(599)
    assert updating(fleet) == []
    fleet.wait(1)
    assert updating(fleet) == sorted(order[3:6])


def test_the_delay_is_tick_time_and_a_wave_done_before_the_first_tick_waits_from_it() -> None:
    order = seeded_order(SEED, FLEET)
    fleet = given(*[cluster(name, {}) for name in FLEET], app(delay="10m"), at=None)
    fleet.succeed("app", *order[:3])
    assert updating(fleet) == []
    fleet.tick(50_000.0)  # the first tick: the delay starts now, not at time 0
    assert updating(fleet) == []
    fleet.tick(50_000.0 + 599)
    assert updating(fleet) == []
    fleet.tick(50_000.0 + 600)
    assert updating(fleet) == sorted(order[3:6])


def test_max_concurrency_still_applies_within_a_wave() -> None:
    order = seeded_order(SEED, FLEET)
    fleet = fleet_of(module("app", {}, "v1", stage("all", None, concurrency=2, waves={"size": 4, "seed": SEED})))
    assert updating(fleet) == sorted(order[:2])
    fleet.succeed("app", order[0])
    assert updating(fleet) == sorted([order[1], order[2]])
    fleet.succeed("app", order[1], order[2])
    assert updating(fleet) == [order[3]]  # the wave's fourth; the fifth waits for wave 2
    fleet.succeed("app", order[3])
    assert updating(fleet) == sorted(order[4:6])


def test_each_wave_start_is_decided_with_the_wave_its_members_and_the_seed() -> None:
    order = seeded_order(SEED, FLEET)
    fleet = fleet_of(app())
    fleet.succeed("app", *order[:3])
    first, second = waves_started(fleet)
    assert (first.stage, first.wave, first.waves, first.size, first.seed) == ("all", 1, 3, 3, SEED)
    assert first.clusters == order[:3] and second.clusters == order[3:6] and second.wave == 2
    assert second.digest == hashlib.sha256("\n".join(order[3:6]).encode()).hexdigest()[:16]
    reasons = [d.reason for d in fleet.decisions if d.action == "wave-started"]
    assert reasons[1] == f"stage all wave 2/3 started (seed {SEED}, size 3): {', '.join(order[3:6])}"


def test_the_seed_when_omitted_is_derived_from_the_module_and_its_revision_and_replays_alike() -> None:
    one, two = fleet_of(app(seed=None)), fleet_of(app(seed=None))
    expected = int(
        hashlib.sha256(b"app\nv1\n" + one.record("app").revisions[1].bindings_digest.encode()).hexdigest()[:15], 16
    )
    assert waves_started(one)[0].seed == expected
    assert waves_started(one)[0].clusters == waves_started(two)[0].clusters == seeded_order(expected, FLEET)[:3]


def test_a_new_revision_reshuffles_and_an_explicit_seed_keeps_the_order() -> None:
    fleet = fleet_of(app(seed=None))
    fleet.succeed_all("app", "v1")
    fleet.apply(app("v2", seed=None))
    derived = [w.clusters for w in waves_started(fleet)]
    assert derived[-1] != derived[0] and waves_started(fleet)[-1].seed != waves_started(fleet)[0].seed
    fixed = fleet_of(app())
    fixed.succeed_all("app", "v1")
    fixed.apply(app("v2"))
    assert waves_started(fixed)[-1].clusters == waves_started(fixed)[0].clusters == seeded_order(SEED, FLEET)[:3]


def test_a_not_ready_member_is_skipped_and_moves_in_the_first_wave_with_room_once_ready() -> None:
    order = seeded_order(SEED, FLEET)
    late = order[1]
    fleet = given(*[cluster(name, {}, ready=name != late) for name in FLEET], app())
    assert updating(fleet) == sorted([order[0], order[2], order[3]])  # the next in order takes its place
    fleet.send(cluster(late, {}))  # ready again while the wave runs: it has no room
    assert fleet.category("app", late) == "pending"
    fleet.succeed("app", order[0], order[2], order[3])
    assert updating(fleet) == sorted([late, order[4], order[5]])  # first in the order of what is left


def test_a_member_that_leaves_mid_wave_frees_its_place_for_the_next_in_order() -> None:
    order = seeded_order(SEED, FLEET)
    fleet = fleet_of(app())
    fleet.send(removed(order[0]))
    assert updating(fleet) == sorted([order[1], order[2], order[3]])


def test_a_member_joining_mid_stage_takes_its_place_in_the_order() -> None:
    order = seeded_order(SEED, [*FLEET, "joiner"])
    first_wave = [name for name in order if name != "joiner"][:3]
    fleet = fleet_of(app())
    assert updating(fleet) == sorted(first_wave)
    fleet.send(cluster("joiner", {}))
    assert fleet.category("app", "joiner") == "pending"  # never a wave early
    fleet.succeed("app", *first_wave)
    rest = [name for name in order if name not in first_wave]
    assert sorted(n for n in [*FLEET, "joiner"] if fleet.category("app", n) == "updating") == sorted(rest[:3])


def test_a_failure_within_budget_ends_its_wave_and_one_over_it_halts_before_the_next() -> None:
    order = seeded_order(SEED, FLEET)
    fleet = fleet_of(module("app", {}, "v1", stage("all", None, failures=1, waves={"size": 3, "seed": SEED})))
    fleet.fail("app", order[0])
    fleet.succeed("app", order[1], order[2])
    assert updating(fleet) == sorted(order[3:6])
    fleet.fail("app", order[3])
    fleet.succeed("app", order[4], order[5])
    assert fleet.phase("app") == "Halted" and updating(fleet) == []


def test_sorted_waves_cut_the_sorting_order() -> None:
    names = ["a", "b", "c", "d", "e"]
    fleet = given(
        *[cluster(name, {"order": str(10 - i)}) for i, name in enumerate(names)],
        module("app", {}, "v1", stage("all", None, waves={"size": 2, "order": "Sorted"}), sorting="order"),
    )
    moving = sorted(n for n in names if fleet.category("app", n) == "updating")
    assert moving == ["d", "e"]  # order labels 7 and 6 come first
    assert waves_started(fleet)[0].seed is None


def test_a_percentage_wave_size_rounds_down_and_is_at_least_one() -> None:
    fleet = fleet_of(app(size="30%"))  # 30 % of 8 is 2.4: 2
    assert len(updating(fleet)) == 2
    small = given(cluster("only", {}), module("app", {}, "v1", stage("all", None, waves={"size": "10%"})))
    assert small.category("app", "only") == "updating"


def test_waves_continue_after_a_restart_as_they_would_have() -> None:
    order = seeded_order(SEED, FLEET)
    fleet = fleet_of(app(delay="5m"))
    fleet.succeed("app", *order[:3])
    fleet.restart()
    fleet.wait(299)
    assert updating(fleet) == []
    fleet.wait(1)
    assert updating(fleet) == sorted(order[3:6])


def test_status_shows_the_current_wave_and_when_the_next_starts() -> None:
    order = seeded_order(SEED, FLEET)
    fleet = fleet_of(app(delay="10m"))
    waves = fleet.status("app")["stages"][0]["waves"]
    assert (waves["size"], waves["count"], waves["current"], waves["seed"]) == (3, 3, 1, SEED)
    assert waves.get("nextWave") is None  # the first wave runs
    fleet.succeed("app", *order[:3])
    waves = fleet.status("app")["stages"][0]["waves"]
    assert waves["nextWave"] == fleet.now + 600 and waves["delay"] == "10m"


def test_a_stage_without_waves_moves_as_before() -> None:
    fleet = fleet_of(module("app", {}, "v1", stage("all", None)))
    assert len(updating(fleet)) == 8 and not waves_started(fleet)
    assert "waves" not in fleet.status("app")["stages"][0]


@pytest.mark.parametrize(
    ("waves", "problem"),
    [
        ({"size": 0}, "waves.size must be at least 1"),
        ({"size": "0%"}, "waves.size must be at least 1"),
        ({"size": "150%"}, "must be an integer or a percentage 0%..100%"),
        ({"size": 2, "order": "Shuffled"}, "'Random' or 'Sorted'"),
        ({"size": 2, "seed": -1}, "greater than or equal to 0"),
        ({"size": 2, "delay": "soon"}, "is not a duration"),
        ({"order": "Random"}, "size"),
    ],
)
def test_invalid_waves_are_refused_naming_the_field(waves: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Stage.model_validate({"name": "all", "waves": waves})
    assert problem in str(refused.value) and "waves" in str(refused.value)
