"""A real Prometheus on 127.0.0.1, built from the Go module proxy: the comparative canaries'
tests (and `rollout gate-runner` against something that is not a hand-written endpoint).

Flow
----
1. **Build, once per version** (:func:`ensure_prometheus`): ``go install
   github.com/prometheus/prometheus/cmd/prometheus@v0.316.0`` (Prometheus 3.x; its go.mod
   has no replace directive, so ``go install`` accepts it) through ``infra.localflux.build``
   — the same cache (``~/.cache/rollout/tools/prometheus-v0.316.0/``), stamp and file lock
   as the Flux controllers. Built without the web UI's assets (npm): the HTTP API the gate
   runner asks (``/api/v1/query``) is whole. Measured on the shared two-core machine with an
   empty module cache: 40.5 min wall under a load average of 20-26 (seven other engineers'
   tests and builds), 8.4 min user + 1.1 min system CPU — some 5-10 min wall on a quiet two
   cores. Again with the Go build cache warm (a new cache directory): 1.1 min; cached: at once.
   The binary is ~105 MB.
2. **Run** (:class:`LocalPrometheus`): a config scraping the given targets every second,
   TSDB in a work directory, ready when ``/-/ready`` answers 200; stopped with SIGTERM.
"""

from __future__ import annotations

from infra.localprometheus.server import PROMETHEUS, LocalPrometheus, LocalPrometheusError, ensure_prometheus

__all__ = ["PROMETHEUS", "LocalPrometheus", "LocalPrometheusError", "ensure_prometheus"]
