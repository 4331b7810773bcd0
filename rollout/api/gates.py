"""Health gates: what must keep passing while a stage soaks, beyond Flux's Ready.

    stages[].gates: [{name, prometheus: {url, query, min?, max?}} | {name, webhook: {url}}
                     | {name, compare: {url, query with $clusters, maxRatio?, maxDifference?}}]
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

A gate with `count` is an analysis ("Health gates" → "Analysis"; Argo Rollouts'
AnalysisTemplate fields): `count` measurements `interval` apart, of which more than
`failureLimit` failing fails it and more than `inconclusiveLimit` inconclusive pauses the
rollout until resumed; `dryRun` gates are measured and recorded but hold nothing.

A **compare** gate is a comparative canary: the runner asks `query` once for the stage's
updated clusters and once for the clusters of later stages not updated yet (the baseline),
`$clusters` standing for each side's names as an escaped regex alternation; it passes when
updated ≤ baseline * `maxRatio` and/or updated - baseline ≤ `maxDifference`. No updated
cluster, no baseline cluster (the last stage, or all updated) or a side without exactly one
sample is inconclusive.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rollout.api.formats import check_dns1123_label, check_duration, check_url, shown

MAX_GATES = 16  # per stage
MAX_QUERY = 4096
MAX_COUNT = 1000  # measurements of one analysis: the engine keeps three counters, whatever the count


class GateSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class PromQLGate(GateSpec):
    """A PromQL `query` (instant) against `url`, the Prometheus base URL: the runner asks
    `<url>/api/v1/query`. What the answer must be is the subclass's."""

    url: str
    query: str

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


class PrometheusGate(PromQLGate):
    """`query` against `url`; passes when every sample is ≥ `min` and ≤ `max`."""

    min: float | None = None
    max: float | None = None

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


CLUSTERS = "$clusters"  # in a comparative query: the clusters compared, as a regex alternation


class CompareGate(PromQLGate):
    """A comparative canary: `query` (PromQL, instant, against `url`) asked twice — once
    with `$clusters` standing for the stage's updated clusters, once for the module's
    clusters not updated yet (the baseline) — each answer one sample; passes when the
    updated value is ≤ baseline * `maxRatio` and/or ≤ baseline + `maxDifference`."""

    max_ratio: float | None = Field(default=None, alias="maxRatio")
    max_difference: float | None = Field(default=None, alias="maxDifference")

    @field_validator("query")
    @classmethod
    def _names_the_clusters(cls, value: str) -> str:
        if CLUSTERS not in value:
            raise ValueError(
                f"query must name {CLUSTERS} where the compared clusters go, e.g. "
                f"'sum(rate(errors{{cluster=~\"{CLUSTERS}\"}}[5m]))'"
            )
        return value

    @model_validator(mode="after")
    def _thresholds(self) -> CompareGate:
        if self.max_ratio is None and self.max_difference is None:
            raise ValueError("give 'maxRatio', 'maxDifference' or both: how much worse than the baseline may pass")
        for name, bound in (("maxRatio", self.max_ratio), ("maxDifference", self.max_difference)):
            if bound is not None and (not math.isfinite(bound) or bound < 0):
                raise ValueError(f"{name} must be a finite number ≥ 0")
        return self


class HealthGate(GateSpec):
    """One gate of a stage: exactly one of `prometheus`, `webhook` or `compare`, and optionally an
    analysis — `count` measurements, taken `interval` apart by the gate runner, of which at
    most `failureLimit` may fail and at most `inconclusiveLimit` be inconclusive (without
    `count`: the latest result must be passing for the stage's soak). `dryRun`: measured
    and recorded, never holding or failing the stage."""

    name: str
    prometheus: PrometheusGate | None = None
    webhook: WebhookGate | None = None
    compare: CompareGate | None = None
    count: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    interval: str | None = None  # between two measurements; None: the gate runner's --interval
    failure_limit: int | None = Field(default=None, alias="failureLimit", ge=0)  # None: 0
    inconclusive_limit: int | None = Field(default=None, alias="inconclusiveLimit", ge=0)  # None: 0
    dry_run: bool = Field(default=False, alias="dryRun")

    @property
    def analysis(self) -> bool:
        """Whether the gate counts measurements (`count` given) rather than watch its latest result."""
        return self.count is not None

    @property
    def failures_allowed(self) -> int:
        return self.failure_limit or 0

    @property
    def inconclusives_allowed(self) -> int:
        return self.inconclusive_limit or 0

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns1123_label(value)

    @model_validator(mode="after")
    def _exactly_one(self) -> HealthGate:
        if [self.prometheus, self.webhook, self.compare].count(None) != 2:
            raise ValueError(f"gate {shown(self.name)}: give exactly one of 'prometheus', 'webhook' or 'compare'")
        return self

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: str | None) -> str | None:
        return check_duration(value, field="interval", positive=True) if value is not None else None

    @model_validator(mode="after")
    def _analysis(self) -> HealthGate:
        given = [name for name, value in self._analysis_fields() if value is not None]
        if self.count is None:
            if given:
                raise ValueError(
                    f"gate {shown(self.name)}: {', '.join(given)} need 'count': the number of measurements "
                    "of the gate's analysis"
                )
            return self
        for name, value in self._analysis_fields()[1:]:
            if value is not None and value >= self.count:  # type: ignore[operator]
                raise ValueError(
                    f"gate {shown(self.name)}: {name} {value} must be below count {self.count}, "
                    f"or the analysis could never {'fail' if name == 'failureLimit' else 'pause'}"
                )
        return self

    def _analysis_fields(self) -> list[tuple[str, object]]:
        return [
            ("interval", self.interval),
            ("failureLimit", self.failure_limit),
            ("inconclusiveLimit", self.inconclusive_limit),
        ]


def check_gates(gates: list[HealthGate]) -> list[HealthGate]:
    names = [gate.name for gate in gates]
    if len(names) != len(set(names)):
        raise ValueError("gate names must be unique within a stage")
    if len(gates) > MAX_GATES:
        raise ValueError(f"at most {MAX_GATES} gates per stage")
    return gates


def gate_key(stage: str, gate: str) -> str:
    return f"{stage}/{gate}"
