"""Shared fixtures.

``kafka_bootstrap``: one real Kafka broker per test session, started through
``infra.localkafka`` (the code behind ``rollout kafka start``) with its own temp data dir
and state file — a broker started by ``rollout kafka start`` is never touched — and the
shared jar cache (``$ROLLOUT_CACHE_DIR``, default ``~/.cache/rollout``). Set
``ROLLOUT_TEST_BOOTSTRAP=host:port`` to use an already running broker instead. A broker
that cannot start fails the tests that need it; it never skips them.

``kube_pool``: one etcd and real kube-apiservers for the session (tests/kube/cluster.py),
started on first use; tests/kube/ and the dashboard's browser tests (TokenReview,
SubjectAccessReview) share it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from infra.localkafka import KafkaError, LocalKafka

if TYPE_CHECKING:
    from tests.kube.cluster import KubePool

# The workers the tests start inherit this: they are killed on purpose and their partitions
# must move on within seconds, not Kafka's 45 s (docs/configuration.md, session timeout).
os.environ.setdefault("ROLLOUT_SESSION_TIMEOUT", "10")


def pytest_configure(config: pytest.Config) -> None:
    # Only the marker (also listed in pyproject.toml, so `--strict-markers` holds either way).
    config.addinivalue_line("markers", "integration: needs the real Kafka broker the test session starts")


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("ROLLOUT_TEST_BOOTSTRAP")
    if external:
        yield external
        return
    base = tmp_path_factory.mktemp("kafka-session")
    broker = LocalKafka(base / "kafka.json")
    try:
        info = broker.start(data_dir=base / "data")
    except KafkaError as e:
        error = str(e)
    else:
        error = None
    if error is not None:
        pytest.fail(f"cannot start the test Kafka broker: {error}", pytrace=False)
    try:
        yield info.bootstrap
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kube_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubePool]:
    from infra.localkube import LocalKubeError
    from tests.kube.cluster import KubePool

    pool = KubePool(tmp_path_factory.mktemp("kube"))
    try:
        pool.start()
    except LocalKubeError as error:
        pytest.fail(f"cannot start the test kube-apiserver: {error}", pytrace=False)
    try:
        yield pool
    finally:
        pool.stop()
