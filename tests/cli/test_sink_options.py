"""`rollout applier`'s Kubernetes sink flags reach the sink (resync, timeouts, drift watch)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from projections.render import FluxRenderer
from rollout_cli.main import cli
from rollout_cli.processes.kubernetes_sink import make_kubernetes_sink
from rollout_cli.sink_options import SinkTimings, sink_timing_options, timings_from


async def test_the_timings_configure_the_sink() -> None:
    timings = SinkTimings(
        resync_interval=42.0,
        not_ready_interval=3.0,
        request_timeout=2.5,
        write_timeout=1.5,
        max_backoff=60.0,
        watch_drift=False,
    )
    sink = make_kubernetes_sink(None, None, FluxRenderer(), timings=timings)
    try:
        assert (sink.resync_interval, sink.not_ready_interval, sink.write_timeout, sink.max_backoff) == (
            42.0,
            3.0,
            1.5,
            60.0,
        )
        assert sink.policy.request_timeout == 2.5
        assert sink.watch_drift is False
    finally:
        await sink.close()


def test_flags_and_environment_variables_become_timings(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[SinkTimings] = []

    @click.command()
    @sink_timing_options
    def command(**options: object) -> None:
        seen.append(timings_from(options))
        assert options == {}

    monkeypatch.setenv("ROLLOUT_WRITE_TIMEOUT", "9")
    result = CliRunner().invoke(command, ["--resync-interval", "30", "--no-drift-watch"])
    assert result.exit_code == 0, result.output
    assert seen == [SinkTimings(resync_interval=30.0, write_timeout=9.0, watch_drift=False)]


def test_a_non_positive_interval_is_refused_naming_the_flag() -> None:
    result = CliRunner().invoke(cli, ["applier", "--sink", "kubernetes", "--resync-interval", "0"])
    assert result.exit_code == 2
    assert "--resync-interval" in result.output
