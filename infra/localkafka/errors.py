"""What can go wrong with the local broker: every error is a :class:`KafkaError` whose
message is meant for humans (``rollout kafka ...`` prints it as is)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from infra.localkafka.defaults import HOST

if TYPE_CHECKING:
    from infra.localkafka.state import BrokerInfo


class KafkaError(RuntimeError):
    """Any failure of the local broker machinery; the message is meant for humans."""


class JavaNotFoundError(KafkaError):
    pass


class PortInUseError(KafkaError):
    def __init__(self, port: int, what: str = "port") -> None:
        super().__init__(
            f"{what} {port} on {HOST} is already in use; pick another with --port, or omit it to use a free port"
        )
        self.port = port


class AlreadyRunningError(KafkaError):
    def __init__(self, info: BrokerInfo, state_file: Path) -> None:
        super().__init__(
            f"a local Kafka broker is already running at {info.bootstrap} (pid {info.pid}, "
            f"state {state_file}); stop it first"
        )
        self.info = info


class JarVerificationError(KafkaError):
    pass


class BrokerStartError(KafkaError):
    def __init__(self, message: str, log_file: Path | None = None, log_tail: str = "") -> None:
        text = message
        if log_file is not None:
            text += f"\n--- last lines of {log_file} ---\n{log_tail or '(log is empty)'}"
        super().__init__(text)
        self.log_file = log_file
        self.log_tail = log_tail
