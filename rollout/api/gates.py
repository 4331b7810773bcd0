"""Health gates: what must keep passing while a stage soaks, beyond Flux's Ready.

    stages[].gates: [{name, prometheus: {url, query, min?, max?}} | {name, webhook: {url}}]
    gate runner ──► GateEvaluated(module, stage, gate, generation, passed) ──► the engine
    gates_passed(record, stage, now, soak) ──► may the stage pass? (stages.py)

The engine never does I/O: a separate process, `rollout gate-runner`
(projections/gate_runner.py), reads the module statuses, evaluates the gates of every
stage that is soaking and publishes the results as events. A **prometheus** gate passes
when its query returns at least one sample and every sample is within [`min`, `max`]; a
**webhook** gate passes when a POST of the stage's facts answers 2xx, fails on any other
status. A result the runner could not get (unreachable, malformed answer, no samples) is
`passed: null` — inconclusive: the stage keeps waiting, nothing fails.

The rule (docs/rollout-semantics.md, "Health gates"): a stage with gates is done only once
every gate has been passing for its soak (`minSuccessTime`; none: one passing result), for
the current target; a failing result while the stage runs or soaks counts as a failure for
`onFailure` — the rollout halts, or rolls back.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from rollout.api.formats import check_dns1123_label, check_url, shown

MAX_GATES = 16  # per stage
MAX_QUERY = 4096


class GateSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class PrometheusGate(GateSpec):
    """`query` (PromQL, instant) against `url` (the Prometheus base URL: the runner asks
    `<url>/api/v1/query`); passes when every sample is ≥ `min` and ≤ `max`."""

    url: str
    query: str
    min: float | None = None
    max: float | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value, schemes=("http", "https"), what="Prometheus")

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        if not value.strip() or len(value) > MAX_QUERY:
            raise ValueError(f"query must be a PromQL expression of 1 to {MAX_QUERY} characters")
        return value

    @model_validator(mode="after")
    def _bounds(self) -> PrometheusGate:
        if self.min is None and self.max is None:
            raise ValueError("give 'min', 'max' or both: the bounds every sample must keep within")
        for bound in (self.min, self.max):
            if bound is not None and not math.isfinite(bound):
                raise ValueError("min and max must be finite numbers")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self


class WebhookGate(GateSpec):
    """POST to `url` (JSON: module, stage, gate, revision, generation): 2xx passes."""

    url: str

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value, schemes=("http", "https"), what="webhook")


class HealthGate(GateSpec):
    name: str
    prometheus: PrometheusGate | None = None
    webhook: WebhookGate | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)

    @model_validator(mode="after")
    def _exactly_one(self) -> HealthGate:
        if (self.prometheus is None) == (self.webhook is None):
            raise ValueError(f"gate {shown(self.name)}: give exactly one of 'prometheus' or 'webhook'")
        return self


def check_gates(gates: list[HealthGate]) -> list[HealthGate]:
    names = [gate.name for gate in gates]
    if len(names) != len(set(names)):
        raise ValueError("gate names must be unique within a stage")
    if len(gates) > MAX_GATES:
        raise ValueError(f"at most {MAX_GATES} gates per stage")
    return gates


def gate_key(stage: str, gate: str) -> str:
    return f"{stage}/{gate}"
