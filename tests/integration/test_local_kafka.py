"""The local Kafka broker (infra/localkafka.py, `rollout kafka ...`) against real JVMs."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from click.testing import CliRunner

from infra import localkafka
from infra.localkafka import (
    JarVerificationError,
    JavaNotFoundError,
    LocalKafka,
    PortInUseError,
    discover_bootstrap,
    ensure_jars,
    find_java,
    pid_alive,
    read_lock,
)
from rollout_cli.commands.kafka import kafka as kafka_cli

pytestmark = pytest.mark.integration


def _listening_socket() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


async def _create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def _list_topics(bootstrap: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await admin.list_topics()
    finally:
        await admin.close()


# --------------------------------------------------------------------------- session broker


async def test_produce_consume_round_trip(kafka_bootstrap: str) -> None:
    topic = f"localkafka-roundtrip-{uuid.uuid4().hex[:8]}"
    await _create_topic(kafka_bootstrap, topic, partitions=2)
    sent = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)]

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for key, value in sent:
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=kafka_bootstrap,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        got: list[tuple[bytes, bytes]] = []
        while len(got) < len(sent):
            batch = await consumer.getmany(timeout_ms=10_000)
            assert batch, f"no records within 10s; got {len(got)} of {len(sent)}"
            for records in batch.values():
                got.extend((r.key, r.value) for r in records)
        await consumer.commit()
    finally:
        await consumer.stop()
    assert sorted(got) == sorted(sent)


def test_start_on_taken_port_fails_naming_the_port(tmp_path: Path, kafka_bootstrap: str) -> None:
    state = tmp_path / "kafka.json"
    with _listening_socket() as s:
        port = s.getsockname()[1]
        with pytest.raises(PortInUseError, match=rf"\b{port}\b") as err:
            LocalKafka(state).start(port, data_dir=tmp_path / "data")
    assert err.value.port == port
    assert not state.exists()

    session_port = kafka_bootstrap.rpartition(":")[2]
    if not os.environ.get("ROLLOUT_TEST_BOOTSTRAP"):  # the session broker's own port, while it serves
        with pytest.raises(PortInUseError, match=rf"\b{session_port}\b"):
            LocalKafka(state).start(int(session_port), data_dir=tmp_path / "data")


def test_cli_reports_a_taken_port_without_traceback(tmp_path: Path) -> None:
    with _listening_socket() as s:
        port = s.getsockname()[1]
        result = CliRunner().invoke(kafka_cli, ["start", "--port", str(port), "--state-file", str(tmp_path / "k.json")])
    assert result.exit_code == 2, result.output
    assert f"error: port {port} " in result.stderr
    assert "Traceback" not in result.output + result.stderr


# --------------------------------------------------------------------------- separate brokers


def test_cli_start_status_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(tmp_path / "state"))
    state_file = tmp_path / "state" / "kafka.json"
    runner = CliRunner()

    result = runner.invoke(kafka_cli, ["status"])
    assert result.exit_code == 1
    assert "not running" in result.output

    result = runner.invoke(kafka_cli, ["start", "--heap", "256m", "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output + result.stderr
    info = json.loads(state_file.read_text())
    try:
        assert f"bootstrap: {info['bootstrap']}" in result.output
        assert pid_alive(info["pid"])
        assert Path(info["log_file"]).is_file()
        assert discover_bootstrap(state_file) == info["bootstrap"]
        assert localkafka.probe(info["bootstrap"])

        result = runner.invoke(kafka_cli, ["status"])
        assert result.exit_code == 0
        assert info["bootstrap"] in result.output
        assert str(info["pid"]) in result.output
        assert info["log_file"] in result.output

        result = runner.invoke(kafka_cli, ["stop"])
        assert result.exit_code == 0, result.output + result.stderr
        assert "stopped" in result.output
    finally:
        LocalKafka(state_file).stop()  # no-op when the CLI already stopped it

    assert not pid_alive(info["pid"])
    assert not state_file.exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", info["port"]), timeout=1).close()
    result = runner.invoke(kafka_cli, ["status"])
    assert result.exit_code == 1
    assert discover_bootstrap(state_file) is None


async def test_restart_keeps_data_and_refuses_a_second_start(tmp_path: Path) -> None:
    broker = LocalKafka(tmp_path / "kafka.json")
    data = tmp_path / "data"
    topic = f"survives-restart-{uuid.uuid4().hex[:8]}"
    try:
        first = broker.start(data_dir=data, heap="256m")
        meta = (data / "kraft-logs" / "meta.properties").read_text()
        with pytest.raises(localkafka.AlreadyRunningError, match=re.escape(first.bootstrap)):
            broker.start(data_dir=data)
        assert broker.ensure_running() == first
        await _create_topic(first.bootstrap, topic)
        assert broker.stop() == first
        assert not pid_alive(first.pid)

        second = broker.start(data_dir=data, heap="256m")
        assert second.pid != first.pid
        assert second.bootstrap == first.bootstrap  # same port: clients reconnect by themselves
        assert second.controller_port == first.controller_port
        assert (data / "kraft-logs" / "meta.properties").read_text() == meta  # not re-formatted
        assert topic in await _list_topics(second.bootstrap)
    finally:
        broker.stop()
    assert broker.status() is None


def test_start_after_stop_moves_off_a_port_taken_meanwhile(tmp_path: Path) -> None:
    said: list[str] = []
    broker = LocalKafka(tmp_path / "kafka.json", progress=said.append)
    data = tmp_path / "data"
    try:
        first = broker.start(data_dir=data, heap="256m")
        broker.stop()
        assert json.loads((data / "ports.json").read_text())["port"] == first.port  # outlives stop
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", first.port))
            squatter.listen()
            second = broker.start(data_dir=data, heap="256m")
            assert second.port != first.port
            assert any(f"port {first.port}" in m and "taken" in m and str(second.port) in m for m in said), said
        broker.stop()
        third = broker.start(data_dir=data, heap="256m")  # the latest port is the one reused
        assert third.port == second.port
    finally:
        broker.stop()


def test_stale_state_file_is_cleaned_up(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    state = tmp_path / "kafka.json"
    state.write_text(
        json.dumps(
            {
                "bootstrap": "127.0.0.1:1",
                "pid": dead.pid,
                "port": 1,
                "controller_port": 2,
                "log_file": str(tmp_path / "broker.log"),
                "data_dir": str(tmp_path),
                "started_at": "2026-01-01T00:00:00+00:00",
            }
        )
    )
    assert LocalKafka(state).status() is None
    assert not state.exists()
    assert discover_bootstrap(state) is None
    assert LocalKafka(state).stop() is None


# --------------------------------------------------------------------------- jars & java


def _mini_lock(tmp_path: Path, *artifacts: str, sha1: str | None = None) -> Path:
    lines = []
    for jar in read_lock():
        if jar.artifact in artifacts:
            lines.append(f"{jar.coordinate} {sha1 or jar.sha1}")
    assert len(lines) == len(artifacts)
    lock = tmp_path / "mini.lock"
    lock.write_text("# test lock\n" + "\n".join(lines) + "\n")
    return lock


def test_corrupted_cached_jar_is_downloaded_again(tmp_path: Path) -> None:
    lock = _mini_lock(tmp_path, "slf4j-api", "commons-cli")
    lib = tmp_path / "lib"
    ensure_jars(lib, lock_file=lock)
    jars = {j.artifact: j for j in read_lock(lock)}
    target = lib / jars["slf4j-api"].filename
    good = target.read_bytes()

    target.write_bytes(good[: len(good) // 2] + b"garbage")  # truncated / corrupted
    (lib / "stray.jar").write_bytes(b"not in the lock")
    messages: list[str] = []
    ensure_jars(lib, lock_file=lock, progress=messages.append)

    assert target.read_bytes() == good
    assert any(target.name in m and "SHA-1" in m for m in messages), messages
    assert not (lib / "stray.jar").exists()
    assert sorted(p.name for p in lib.glob("*.jar")) == sorted(j.filename for j in jars.values())

    # all verified: nothing is downloaded again
    messages.clear()
    ensure_jars(lib, lock_file=lock, progress=messages.append)
    assert messages == []


def test_download_not_matching_the_lock_is_rejected(tmp_path: Path) -> None:
    lock = _mini_lock(tmp_path, "slf4j-api", sha1="0" * 40)
    lib = tmp_path / "lib"
    with pytest.raises(JarVerificationError, match="SHA-1 mismatch"):
        ensure_jars(lib, lock_file=lock)
    assert [p.name for p in lib.iterdir() if p.name != ".lock"] == []  # no jar, no .part


def test_missing_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match=r"[Ii]nstall") as err:
        find_java()
    assert "JAVA_HOME" in str(err.value)
    with pytest.raises(JavaNotFoundError):
        LocalKafka(tmp_path / "k.json").start(data_dir=tmp_path / "data")


def test_java_home_is_preferred(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.which("java")
    assert real, "these tests need Java"
    home = Path(real).resolve().parent.parent
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_java() == str(home / "bin" / "java")


def test_reset_stops_the_broker_and_deletes_its_data_and_nothing_else(tmp_path: Path) -> None:
    state_file = tmp_path / "state" / "kafka.json"
    data = tmp_path / "data"
    info = LocalKafka(state_file).start(data_dir=data, heap="256m")
    assert (data / "server.properties").exists()
    result = CliRunner().invoke(kafka_cli, ["reset", "--yes", "--state-file", str(state_file)])
    assert result.exit_code == 0, result.output
    assert f"removed {data}" in result.output
    assert not data.exists() and not pid_alive(info.pid)
    assert LocalKafka(state_file).status() is None

    elsewhere = tmp_path / "not-kafka"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep me")
    refused = CliRunner().invoke(
        kafka_cli, ["reset", "--yes", "--state-file", str(state_file), "--data-dir", str(elsewhere)]
    )
    assert refused.exit_code != 0
    assert "does not look like a Kafka data dir" in refused.output
    assert (elsewhere / "precious.txt").read_text() == "keep me"
