"""An event that fails inside the engine is undone by dropping its writes, and nothing else.

The engine never changes a stored value in place: it changes copies (`Record.working_copy`,
what to copy read from the fields' types) and writes them back (rollout/engine/tables.py).
So whatever an event had done when it failed, the worker drops its event layer
(`PartitionState.drop_event`) and resets the derived indexes, and that is the whole undo —
no list of what to put back.

Hypothesis draws a journal — a scenario of test_properties.py (a fleet, modules, commands,
reports, ticks, heartbeats, restrictions, dependencies, redeliveries), or a dependency and
its dependent applied together in a drawn interleaving (test_dependencies.py's race), or
stages waiting for maintenance windows that close and open — picks
the event that fails and the point where it fails: every method of every part of the engine
is wrapped to raise `Injected` before or after it runs at the drawn count (else the event
fails once handled). Then:

* handling any event changes no committed value (its writes stay in the event layer);
* the committed state is byte for byte what it was before the failing event, and the
  events after it fold exactly as if it had never come (same outcomes, same final state) —
  over the worker's `PartitionState`, event by event;
* the same through the decider (`streams/decider.py`) in batches: the batch holding the
  failing event is folded in one go — module records copied once and shared by the batch
  (`private_records`) — dropped when the event fails, and folded again event by event; its
  outputs but the dead letter are those of the batch without the event, and so is the
  committed state, then and after the rest of the journal.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from infra.observability import Metrics
from infra.topics import TopicNames
from rollout.engine.core import RolloutEngine
from rollout.engine.state import ENGINE_MAPPINGS
from rollout.wire.events import DependentLinked
from streams.decider import DecidePartition
from streams.outputs import Outputs
from streams.state import PartitionState
from tests.rollout import builders
from tests.rollout.builders import Fleet, applied, cluster, module, reported, serialize, stage
from tests.rollout.scenarios import World, scenarios, with_promotions

TOPICS = TopicNames("t.")
UNDO_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class Injected(Exception):
    """The failure injected into the engine."""


class Injector:
    """Makes the engine fail while handling an armed event: at checkpoint `at` (a call of
    any of its methods, entered or returned), or at the end of the event if it makes fewer."""

    def __init__(self) -> None:
        self.armed = False
        self.at = 0
        self.passed = 0

    def arm(self, at: int) -> None:
        self.armed, self.at, self.passed = True, at, 0

    def checkpoint(self) -> None:
        if not self.armed:
            return
        if self.passed == self.at:
            self.armed = False
            raise Injected(f"injected at checkpoint {self.at}")
        self.passed += 1

    def end(self) -> None:
        if self.armed:
            self.armed = False
            raise Injected(f"injected at the end of the event ({self.passed} checkpoints)")


def instrument(engine: RolloutEngine, injector: Injector, arms: Callable[[Any], bool] | None = None) -> None:
    """Every method of every part of `engine` passes a checkpoint before and after it runs;
    `engine.handle` arms the injector for the events `arms` picks and ends the event."""
    parts = [part for part in vars(engine).values() if type(part).__module__.startswith("rollout.engine.")]
    for part in [*parts, engine.stages.windows]:
        for name, _ in inspect.getmembers(type(part), inspect.isfunction):
            if not name.startswith("__"):
                setattr(part, name, _checkpointed(getattr(part, name), injector))
    handle = engine.handle

    def handle_and_end(event: Any) -> Any:
        if arms is not None and arms(event):
            injector.arm(injector.at)
        outcome = handle(event)
        injector.end()
        return outcome

    engine.handle = handle_and_end  # type: ignore[method-assign]


def _checkpointed(method: Callable[..., Any], injector: Injector) -> Callable[..., Any]:
    @functools.wraps(method)
    def checked(*args: Any, **kwargs: Any) -> Any:
        injector.checkpoint()
        result = method(*args, **kwargs)
        injector.checkpoint()
        return result

    return checked


def journal_of(scenario: dict[str, Any]) -> list[Any]:
    """The scenario's events as a journal (with the events the engine sent fed back)."""
    fleet = Fleet()
    fleet.check_each_event = False
    world = World(fleet, scenario)
    for item in [*world.setup_events(), *with_promotions(scenario)]:
        for event in world.events_for(item) if isinstance(item, tuple) else [item]:
            fleet.send(event)
            world.previous = event
    return list(fleet.journal)


@st.composite
def dependency_journals(draw: st.DrawFn) -> list[Any]:
    """base and app (app dependsOn base) rolled out, then applied again together (app's
    apply names base's, `after`) and folded in a drawn order with what each partition sends
    the other and base's success reports (test_dependencies.py's race): links, answers
    (DependencyCurrent), awaited dependencies, blocked and unblocked members."""
    canary, wave = {"ring": "canary"}, {"ring": "wave"}

    def base(tag: str) -> Any:
        return module("base", {}, tag, stage("canary", canary), stage("wave", wave))

    def app(tag: str) -> Any:
        return module("app", {}, tag, stage("canary", canary), stage("wave", wave), depends_on=["base"])

    fleet = builders.given(cluster("c1", canary), cluster("w1", wave), base("b1"), app("v1"))
    fleet.check_each_event = False
    fleet.succeed("base", "c1", "w1")
    fleet.succeed("app", "c1", "w1")
    fleet.feedback = False
    base_apply = applied(base("b2"))
    applies = [base_apply, applied(app("v2"), after={"base": base_apply.id})]
    in_flight: dict[str, list[Any]] = {"to_base": [], "to_app": []}
    while True:
        ready = [f"apply-{i}" for i in range(len(applies))] + [name for name, queue in in_flight.items() if queue]
        ready += [
            f"succeed-{c}" for c in ("c1", "w1") if (found := fleet.target("base", c)) and found.status == "updating"
        ]
        if not ready:
            return list(fleet.journal)
        choice = draw(st.sampled_from(ready))
        if choice.startswith("apply-"):
            event = applies.pop(int(choice.removeprefix("apply-")))
        elif choice.startswith("succeed-"):
            name = choice.removeprefix("succeed-")
            event = reported("base", name, fleet.revision("base", name) or "", "succeeded")
        else:
            event = in_flight[choice].pop(0)
        for sent in fleet.send(event).dependency_events:
            in_flight["to_base" if isinstance(sent, DependentLinked) else "to_app"].append(sent)


@st.composite
def window_journals(draw: st.DrawFn) -> list[Any]:
    """A module whose stages wait for an hourly maintenance window (open the first 50
    minutes of each hour), ticks that close and open it, and reports: waits entered and
    left as windows open."""
    fleet = Fleet()
    fleet.check_each_event = False
    hourly = {"schedule": "0 * * * *", "duration": "50m"}
    names = [f"c{i}" for i in range(draw(st.integers(1, 4)))]
    fleet.send(builders.tick(3_300.0))  # 00:55, the window closed
    fleet.send(*(cluster(name, {"ring": "canary" if i % 2 == 0 else "wave"}) for i, name in enumerate(names)))
    stages = [stage("canary", {"ring": "canary"}, concurrency=1), stage("wave", {"ring": "wave"})]
    fleet.send(module("app", {}, "v1", *stages, windows=[hourly]))
    for step in draw(st.lists(st.sampled_from(["tick", "succeed"]), min_size=3, max_size=12)):
        if step == "tick":
            fleet.wait(draw(st.integers(60, 3_600)))
            continue
        for name in names:
            found = fleet.target("app", name)
            if found is not None and found.status == "updating":
                fleet.send(reported("app", name, fleet.revision("app", name) or "", "succeeded"))
    return list(fleet.journal)


def journals() -> st.SearchStrategy[list[Any]]:
    return st.one_of(scenarios(max_clusters=12, max_steps=30).map(journal_of), dependency_journals(), window_journals())


def committed(state: PartitionState) -> dict[str, dict[str, bytes]]:
    """Every committed value as JSON bytes."""
    return {
        name: {key: _json(value) for key, value in mapping.committed.items()}
        for name, mapping in state.mappings.items()
    }


def _json(value: Any) -> bytes:
    if isinstance(value, BaseModel):
        return value.__pydantic_serializer__.to_json(value)
    return json.dumps(value).encode()


# -- event by event, over the worker's layered state -----------------------------------------


def layered_engine() -> tuple[PartitionState, RolloutEngine]:
    state = PartitionState(ENGINE_MAPPINGS)
    return state, RolloutEngine(**{name: state.mappings[name] for name in ENGINE_MAPPINGS})  # type: ignore[arg-type]


def fold(state: PartitionState, engine: RolloutEngine, events: list[Any]) -> list[dict[str, Any]]:
    """Each event folded and committed; the outcomes. Handling an event changes nothing
    committed — its writes are in the event layer until kept — so an event failing at its
    very end would be undone by dropping them: checked for every event."""
    outcomes = []
    for event in events:
        before = committed(state)
        outcomes.append(serialize(engine.handle(event)))
        assert committed(state) == before, f"{event.type} changed committed values in place"
        state.keep_event()
        state.commit_batch()
    return outcomes


@UNDO_SETTINGS
@given(journals(), st.data())
def test_an_event_failing_anywhere_leaves_committed_state_as_it_was_and_the_rest_folds_as_without_it(
    journal: list[Any], data: st.DataObject
) -> None:
    position = data.draw(st.integers(0, len(journal) - 1), label="the failing event")
    injector = Injector()
    injector.at = data.draw(st.integers(0, 400), label="the checkpoint it fails at")
    state, engine = layered_engine()
    instrument(engine, injector)
    fold(state, engine, journal[:position])
    before = committed(state)

    injector.arm(injector.at)
    with pytest.raises(Injected):
        engine.handle(journal[position])
    state.drop_event()  # what the decider does with an event that failed
    engine.reset_indexes()
    assert committed(state) == before, f"{journal[position].type} changed committed state before it failed"

    reference_state, reference = layered_engine()
    fold(reference_state, reference, journal[:position])
    rest = journal[position + 1 :]
    assert fold(state, engine, rest) == fold(reference_state, reference, rest)
    assert committed(state) == committed(reference_state)


# -- through the decider, in batches ----------------------------------------------------------


class InjectedDecider(DecidePartition):
    """A decider whose every engine fails on the event whose bytes are `poison`."""

    def __init__(self, injector: Injector, poison: bytes) -> None:
        self.injector = injector
        self.poison = poison
        super().__init__(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())

    def _new_engine(self) -> RolloutEngine:
        engine = super()._new_engine()
        instrument(engine, self.injector, arms=lambda event: event.to_bytes() == self.poison)
        return engine


def process(decider: DecidePartition, records: list[tuple[int, bytes]]) -> list[tuple[str, bytes | None, Any]]:
    """One batch, as the runtime folds it, committed; what it sent."""
    out = Outputs(TOPICS.dead_letters)
    consumed = [
        ConsumerRecord(TOPICS.journal, 0, offset, 0, 0, b"k", value, None, 0, len(value), ())
        for offset, value in records
    ]
    decider.process(consumed, records[-1][0] + 1, out)
    decider.state.commit_batch()
    return [(r.topic, r.key, None if r.value is None else json.loads(r.value)) for r in out.all()]


def _key(record: tuple[str, bytes | None, Any]) -> str | None:
    return record[1].decode() if record[1] is not None else None


def in_batches(records: list[tuple[int, bytes]], size: int) -> list[list[tuple[int, bytes]]]:
    return [records[start : start + size] for start in range(0, len(records), size)]


@UNDO_SETTINGS
@given(journals(), st.data())
def test_a_batch_with_an_event_failing_anywhere_decides_what_the_batch_without_it_decides(
    journal: list[Any], data: st.DataObject
) -> None:
    records = [(offset, event.to_bytes()) for offset, event in enumerate(journal)]
    position = data.draw(st.integers(0, len(records) - 1), label="the failing event")
    start = data.draw(st.integers(0, position), label="its batch starts at")
    end = data.draw(st.integers(position + 1, len(records)), label="its batch ends before")
    size = data.draw(st.integers(1, 20), label="the other batches' size")
    injector = Injector()
    injector.at = data.draw(st.integers(0, 400), label="the checkpoint it fails at")
    poison = records[position][1]
    failing = InjectedDecider(injector, poison)
    reference = DecidePartition(TopicPartition(TOPICS.journal, 0), TOPICS, Metrics())
    for chunk in in_batches([r for r in records[:start] if r[1] != poison], size):
        assert process(failing, chunk) == process(reference, chunk)

    sent = process(failing, records[start:end])
    without = [r for r in records[start:end] if r[1] != poison]
    expected = process(reference, without) if without else []
    injected = [r for r in sent if r[0] == TOPICS.dead_letters and "Injected: injected" in r[2]["reason"]]
    assert len(injected) == len(records[start:end]) - len(without)
    refused = {letter[2].get("event") for letter in injected}  # answered with a refusal, too
    assert [r for r in sent if r not in injected and not (r[0] == TOPICS.verdicts and _key(r) in refused)] == expected
    assert committed(failing.state) == committed(reference.state)

    for chunk in in_batches([r for r in records[end:] if r[1] != poison], size):
        assert process(failing, chunk) == process(reference, chunk)
    assert committed(failing.state) == committed(reference.state)
