"""`rollout worker --stages`: a worker process may run a subset of the three stages."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from infra.observability import Metrics
from infra.settings import STAGES, Settings
from rollout_cli.main import cli
from streams.app import Worker, stage_specs


def test_a_worker_runs_the_stages_it_is_given_in_pipeline_order() -> None:
    settings = Settings(bootstrap_servers="unused:9092", stages=("assemble", "route"))
    assert [spec.name for spec in stage_specs(settings, Metrics())] == ["route", "assemble"]


def test_by_default_a_worker_runs_every_stage_each_in_its_own_group() -> None:
    specs = stage_specs(Settings(bootstrap_servers="unused:9092"), Metrics())
    assert [spec.name for spec in specs] == list(STAGES)
    assert len({spec.group_id for spec in specs}) == 3


def test_an_unknown_stage_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="stages must be some of route, decide, assemble, not nope"):
        stage_specs(Settings(bootstrap_servers="unused:9092", stages=("nope",)), Metrics())
    result = CliRunner().invoke(cli, ["worker", "--stages", "route,nope", "--bootstrap-servers", "unused:9092"])
    assert result.exit_code == 2
    assert "nope: stages are route, decide, assemble" in result.output


async def test_lag_is_recorded_only_for_partitions_the_consumer_has_assigned() -> None:
    """During a rebalance a stage may still hold a partition its consumer no longer has
    assigned; aiokafka's `highwater()` asserts on those. The lag gauge skips them (and any
    failure of it is logged, never the end of the worker)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from streams.app import Worker
    from streams.lifecycle import PartitionPhase
    from streams.slots import Slot

    worker = Worker(Settings(bootstrap_servers="unused:9092", stages=("route",)))
    runner = worker.runners[0]
    runner.consumer = AIOKafkaConsumer(bootstrap_servers="unused:9092")  # never started: nothing assigned
    tp = TopicPartition(worker.topics.status, 0)
    slot = runner.partitions[tp] = Slot(tp, runner.spec.new_processor(tp))
    slot.enter(PartitionPhase.TAKING_OVER)
    slot.enter(PartitionPhase.READY)  # owned
    with pytest.raises(AssertionError, match="not assigned"):
        runner.consumer.highwater(tp)  # what the gauge used to call
    stale = {(worker.topics.status, "1")}  # a partition reported before the rebalance
    worker.metrics.consumer_lag.labels(*next(iter(stale))).set(3)
    try:
        assert worker._record_lag(stale) == set()
        assert "rollout_consumer_lag{" not in worker.metrics.render().decode()
    finally:
        await runner.consumer.stop()


def test_a_workers_stage_consumers_wait_kafkas_default_session_for_a_long_batch() -> None:
    assert Settings(bootstrap_servers="x").session_timeout == 45.0
    worker = Worker(Settings(bootstrap_servers="127.0.0.1:9", stages=("decide",), session_timeout=33.0))
    assert [runner.session_timeout for runner in worker.runners] == [33.0]


def test_the_worker_command_takes_its_session_timeout_from_the_flag_or_the_environment() -> None:
    help_text = CliRunner().invoke(cli, ["worker", "--help"]).output
    assert "--session-timeout" in help_text and "ROLLOUT_SESSION_TIMEOUT" in help_text
    refused = CliRunner().invoke(cli, ["worker", "--session-timeout", "2"])
    assert refused.exit_code == 2 and "session-timeout" in refused.output
