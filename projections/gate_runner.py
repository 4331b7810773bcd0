"""The gate runner: evaluates the health gates of soaking stages; the engine never does I/O.

    module-status topic ──► stages soaking with gates ──► Prometheus / webhook (HTTP)
                        ──► GateEvaluated(module, stage, gate, generation, passed)
                        ──► sync-status topic (key: module) ──► router ──► the engine

Every `interval` seconds the runner reads the latest module statuses (a compacted topic,
each document read with its model, rollout/wire/status.py) and, for each module whose
current stage (in a stage graph: any stage) is `Soaking` and has gates (the status carries each gate's definition,
`StageGate`), evaluates every gate and publishes the result:

* prometheus — GET `<url>/api/v1/query?query=…` (the instant-query API); passed when the
  answer holds at least one sample and every sample is within [min, max], failed when one
  is outside; inconclusive (`passed: null`) when the server cannot be reached, answers an
  error or something else than a vector or scalar, has no samples or a NaN one;
* webhook — POST `url` with JSON `{module, stage, gate, revision, generation}`; a 2xx
  answer passes, any other status fails, no answer is inconclusive;
* compare — a comparative canary: the same query asked (a form POST to `/api/v1/query`)
  with `$clusters` standing for the stage's updated clusters, then for the baseline — the
  later stages' members still pending (`compared_clusters`, from the module status and the
  engine's rollout-targets documents, read once a round and only when a comparison soaks);
  names escaped into a regex alternation (`cluster_regex`), at most MAX_COMPARED a side;
  each side must answer one sample; passed by `judge_comparison` (maxRatio, maxDifference).
  No updated cluster, no baseline cluster, or a side without one sample: inconclusive.
  Cost: from the first comparison on, the runner keeps the latest rollout-targets document
  of every (module, cluster) — as `rollout status` reads them — and groups them by module
  once a round (O(fleet * modules) memory, O(targets) a round, outside the engine).

A gate with `count` is an analysis (rollout/engine/gate_results.py): the runner measures it
at most once per gate `interval` (none: its own `--interval`; shorter than that: once a
round), numbering each result with the next (run, measurement) the status implies
(`StageGate.next_measurement`) — the identity the engine counts once, so a result that
was lost is simply measured again under the same number, and two runners measuring the same
one count once. Once the analysis concluded (Successful, or a dry run that failed or was
inconclusive) it is not measured again; a failed or inconclusive one is measured again (a
new run) only once the stage soaks again — after `rollout resume`. When it last measured
is kept per analysis soaking now (forgotten as they stop), in the runner's memory: a
restarted runner measures at once.

The statuses are read by one consumer kept for the runner's life (`client.LatestReader`):
each round reads only what changed since the last. Each result is logged at INFO (module,
stage, gate, generation, passed / failed / inconclusive, and the message). A status the
runner cannot read (a newer schemaVersion) is logged and its gates are not evaluated.

Like the appliers, the runner holds no state the engine needs: several may run (each
result is an event with its own id; the engine keeps the latest), and a restarted one
simply evaluates again. Results are for the generation the status named, so a result that
arrives after a new revision started is ignored by the engine.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from infra import client
from infra.observability import RATE_LIMITED
from infra.topics import TopicNames
from projections.publisher import Publish
from projections.rounds import run_rounds
from rollout.api.formats import parse_duration
from rollout.api.gates import CLUSTERS
from rollout.wire.documents import DocumentError
from rollout.wire.events import GateEvaluated
from rollout.wire.status import CompareQuery, ModuleStatus, StageGate, TargetStatus

log = logging.getLogger("rollout.gates")

REQUEST_TIMEOUT = 10.0
VERDICTS = {True: "passed", False: "failed", None: "inconclusive"}
AnalysisKey = tuple[str, str, str, int]  # module, stage, gate, generation
MAX_COMPARED = 200  # clusters per side of a comparison: the first, by name (the query stays bounded)
REGEX_SPECIALS = frozenset("\\.+*?()|[]{}^$")


@dataclass(frozen=True)
class Result:
    passed: bool | None
    message: str


def soaking_gates(status: ModuleStatus) -> list[tuple[str, StageGate]]:
    """(stage, gate) of every gate of every stage that soaks: a chain's current stage; in a
    stage graph (rollout/engine/stage_graph.py) each of the stages soaking at once."""
    return [(stage.name, gate) for stage in status.stages if stage.state == "Soaking" for gate in stage.gates]


def judge_samples(payload: Any, low: float | None, high: float | None) -> Result:
    """A Prometheus instant-query answer against the bounds [low, high]."""
    if not isinstance(payload, dict) or payload.get("status") != "success":
        error = payload.get("error") if isinstance(payload, dict) else None
        return Result(None, f"Prometheus answered an error: {error or 'not a success'}")
    data = payload.get("data") or {}
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        samples = [result[1]]
    elif kind == "vector" and isinstance(result, list):
        samples = [item.get("value", [None, None])[1] for item in result if isinstance(item, dict)]
    else:
        return Result(None, f"expected a vector or scalar, got {kind}")
    try:
        values = [float(sample) for sample in samples]
    except (TypeError, ValueError):
        return Result(None, "a sample is not a number")
    if not values:
        return Result(None, "no samples")
    if any(math.isnan(v) for v in values):
        return Result(None, "a sample is NaN (no data)")
    outside = [v for v in values if (low is not None and v < low) or (high is not None and v > high)]
    bounds = f"[{'-∞' if low is None else f'{low:g}'}, {'∞' if high is None else f'{high:g}'}]"
    if outside:
        return Result(False, f"{outside[0]:g} outside {bounds} ({len(outside)} of {len(values)} samples)")
    return Result(True, f"{len(values)} sample(s) within {bounds}, latest {values[-1]:g}")


def cluster_regex(clusters: list[str]) -> str:
    """`clusters` as a PromQL regex alternation inside a double-quoted string: each name's
    RE2 metacharacters escaped (cluster names are DNS labels, which have none — escaped
    anyway), then the backslashes and quotes escaped for the PromQL string literal."""
    regex = "|".join("".join("\\" + ch if ch in REGEX_SPECIALS else ch for ch in name) for name in clusters)
    return regex.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class Compared:
    """The clusters of a comparison: the current stage's updated ones and the baseline."""

    updated: list[str]
    baseline: list[str]


def compared_clusters(status: ModuleStatus, targets: list[TargetStatus], stage: str | None = None) -> Compared:
    """From the engine's typed documents: the updated clusters — members of the gate's
    stage (default: the current stage) that run the target generation and succeeded — and
    the baseline — members of the stages after it in the list still waiting to move
    (`pending`: on the stable revision, or none). Each side sorted, at most MAX_COMPARED."""
    names = [stage.name for stage in status.stages]
    measured = stage or status.current_stage
    current = names.index(measured) if measured in names else len(names)
    later = set(names[current + 1 :])
    generation = status.generation
    updated = sorted(
        t.cluster for t in targets if t.stage == measured and t.generation == generation and t.state == "succeeded"
    )
    baseline = sorted(t.cluster for t in targets if t.stage in later and t.state == "pending")
    return Compared(updated[:MAX_COMPARED], baseline[:MAX_COMPARED])


def one_sample(payload: Any) -> float | str:
    """The one value of a Prometheus instant-query answer, or why there is none (a str)."""
    if not isinstance(payload, dict) or payload.get("status") != "success":
        error = payload.get("error") if isinstance(payload, dict) else None
        return f"Prometheus answered an error: {error or 'not a success'}"
    data = payload.get("data") or {}
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        samples = [result[1]]
    elif kind == "vector" and isinstance(result, list):
        samples = [item.get("value", [None, None])[1] for item in result if isinstance(item, dict)]
    else:
        return f"expected a vector or scalar, got {kind}"
    if len(samples) != 1:
        return "no samples" if not samples else f"expected one sample (aggregate with sum or avg), got {len(samples)}"
    try:
        value = float(samples[0])
    except (TypeError, ValueError):
        return "the sample is not a number"
    return "the sample is NaN (no data)" if math.isnan(value) else value


def judge_comparison(spec: CompareQuery, updated: float, baseline: float) -> Result:
    """updated ≤ baseline * maxRatio and/or updated - baseline ≤ maxDifference (both when
    both are given). A ratio never divides: a zero baseline passes only a zero."""
    said = f"updated {updated:g} vs baseline {baseline:g}"
    broken = []
    if spec.max_ratio is not None and updated > baseline * spec.max_ratio:
        ratio = f"{updated / baseline:.3g}" if baseline else "∞"
        broken.append(f"ratio {ratio} > maxRatio {spec.max_ratio:g}")
    if spec.max_difference is not None and updated - baseline > spec.max_difference:
        broken.append(f"difference {updated - baseline:.3g} > maxDifference {spec.max_difference:g}")
    if broken:
        return Result(False, f"{said}: {', '.join(broken)}")
    return Result(
        True,
        f"{said}: within "
        + ", ".join(
            name
            for name, bound in (("maxRatio", spec.max_ratio), ("maxDifference", spec.max_difference))
            if bound is not None
        ),
    )


class GateRunner:
    """Evaluates the gates of soaking stages and publishes the results."""

    def __init__(
        self,
        *,
        bootstrap: str,
        prefix: str,
        publish: Publish,
        interval: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap = bootstrap
        self.topics = TopicNames(prefix)
        self.publish = publish
        self.interval = interval
        self.clock = clock
        self.published = 0
        # when this runner last measured each analysis soaking now (module, stage, gate, generation)
        self.measured_at: dict[AnalysisKey, float] = {}
        self.statuses = client.LatestReader(bootstrap, self.topics.module_status)
        # the engine's per-cluster documents, read only once a comparative gate soaks
        self.targets = client.LatestReader(bootstrap, self.topics.targets)
        self.round_targets: dict[str, list[TargetStatus]] | None = None

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await run_rounds(
                self.round, interval=self.interval, stop=stop, request_timeout=REQUEST_TIMEOUT, what="gate"
            )
        finally:
            await self.statuses.close()
            await self.targets.close()

    async def round(self, session: aiohttp.ClientSession) -> None:
        """One evaluation of every gate of every soaking stage (of an analysis: when due)."""
        statuses = await self.statuses.latest()
        self.round_targets = None  # read again, if a comparison asks, once this round
        analyses: set[AnalysisKey] = set()
        for module, document in sorted(statuses.items()):
            try:
                status = ModuleStatus.read(document)
            except DocumentError as error:
                log.warning("module %s: %s; its gates are not evaluated", module, error, extra=RATE_LIMITED)
                continue
            if status.generation is None:
                continue  # pending: no stage soaks
            for stage, gate in soaking_gates(status):
                identity = gate.next_measurement() if gate.count is not None else None
                if gate.count is not None:
                    key = (module, stage, gate.name, status.generation)
                    analyses.add(key)
                    if identity is None or not self._due(key, gate):
                        continue  # its analysis is over, or measured less than `interval` ago
                await self._measure(session, module, stage, gate, status, identity)
        self.measured_at = {key: at for key, at in self.measured_at.items() if key in analyses}

    def _due(self, key: AnalysisKey, gate: StageGate) -> bool:
        """Whether the analysis `key` is to be measured now: `interval` (none: the runner's)
        since this runner last measured it; then it is measured, from now."""
        interval = parse_duration(gate.interval) if gate.interval else self.interval
        now = self.clock()
        last = self.measured_at.get(key)
        if last is not None and now - last < interval:
            return False
        self.measured_at[key] = now
        return True

    async def _measure(
        self,
        session: aiohttp.ClientSession,
        module: str,
        stage: str,
        gate: StageGate,
        status: ModuleStatus,
        identity: tuple[int, int] | None,
    ) -> None:
        """Evaluate one gate and publish the result (with its measurement's identity)."""
        assert status.generation is not None
        result = await self.evaluate(session, module, stage, gate, status)
        event = GateEvaluated(
            module=module,
            stage=stage,
            gate=gate.name,
            generation=status.generation,
            passed=result.passed,
            message=result.message[:1000],
            run=identity[0] if identity else None,
            measurement=identity[1] if identity else None,
        )
        await self.publish(module, event.to_bytes())
        self.published += 1
        log.info(
            "gate %s of %s stage %s (generation %s)%s: %s: %s",
            event.gate,
            module,
            stage,
            event.generation,
            f" measurement {event.measurement} of run {event.run}" if identity else "",
            VERDICTS[event.passed],
            event.message,
        )

    async def evaluate(
        self, session: aiohttp.ClientSession, module: str, stage: str, gate: StageGate, status: ModuleStatus
    ) -> Result:
        try:
            if gate.prometheus is not None:
                spec = gate.prometheus
                url = spec.url.rstrip("/") + "/api/v1/query"
                async with session.get(url, params={"query": spec.query}) as response:
                    payload = await response.json(content_type=None)
                return judge_samples(payload, spec.min, spec.max)
            if gate.compare is not None:
                return await self.compare(session, module, gate.compare, status, stage)
            if gate.webhook is None:
                return Result(None, "the gate has neither prometheus, webhook nor compare")
            facts = {
                "module": module,
                "stage": stage,
                "gate": gate.name,
                "revision": status.target_revision,
                "generation": status.generation,
            }
            async with session.post(gate.webhook.url, json=facts) as response:
                text = (await response.text())[:200]
                passed = 200 <= response.status < 300
                return Result(passed, f"webhook answered {response.status}" + (f": {text}" if text else ""))
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            return Result(None, f"cannot evaluate: {type(error).__name__}: {error}")

    async def compare(
        self,
        session: aiohttp.ClientSession,
        module: str,
        spec: CompareQuery,
        status: ModuleStatus,
        stage: str | None = None,
    ) -> Result:
        """A comparative canary: the query over the updated clusters of `stage` (default: the
        current stage) against the baseline."""
        clusters = compared_clusters(status, (await self.module_targets()).get(module, []), stage)
        if not clusters.updated:
            return Result(None, f"no updated cluster of stage {stage or status.current_stage} to compare")
        if not clusters.baseline:
            return Result(None, "no baseline: no cluster of a later stage is waiting for the target")
        values = []
        for side in (clusters.updated, clusters.baseline):
            query = spec.query.replace(CLUSTERS, cluster_regex(side))
            async with session.post(spec.url.rstrip("/") + "/api/v1/query", data={"query": query}) as response:
                value = one_sample(await response.json(content_type=None))
            if isinstance(value, str):
                which = "updated clusters" if side is clusters.updated else "baseline"
                return Result(None, f"{which}: {value}")
            values.append(value)
        result = judge_comparison(spec, values[0], values[1])
        counts = f" ({len(clusters.updated)} updated, {len(clusters.baseline)} baseline clusters)"
        return Result(result.passed, result.message + counts)

    async def module_targets(self) -> dict[str, list[TargetStatus]]:
        """The rollout-targets documents per module, read once a round when asked."""
        if self.round_targets is None:
            grouped: dict[str, list[TargetStatus]] = {}
            for document in (await self.targets.latest()).values():
                try:
                    target = TargetStatus.read(document)
                except DocumentError:
                    continue  # a newer release's document: not compared
                grouped.setdefault(target.module, []).append(target)
            self.round_targets = grouped
        return self.round_targets
