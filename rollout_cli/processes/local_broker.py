"""`rollout kafka start --foreground`: the local broker (infra/localkafka) as a process in the
terminal — its log copied to stdout until it exits; Ctrl-C or SIGTERM stops it."""

from __future__ import annotations

import contextlib
import signal
import sys
import time

import click

from infra.localkafka import BrokerInfo, KafkaError, LocalKafka
from rollout_cli.options import fail


def follow(broker: LocalKafka, info: BrokerInfo) -> None:
    """Copy the broker log to stdout until the broker exits; Ctrl-C / SIGTERM stop it."""

    def on_term(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        with info.log_file.open("rb") as log:
            log.seek(0, 2)
            while broker.status() is not None:
                chunk = log.read()
                if chunk:
                    sys.stdout.write(chunk.decode("utf-8", "replace"))
                    sys.stdout.flush()
                else:
                    time.sleep(0.3)
            sys.stdout.write(log.read().decode("utf-8", "replace"))
        fail(f"Kafka exited on its own; see {info.log_file}")
    except KeyboardInterrupt:
        click.echo("\nstopping Kafka ...", err=True)
        try:
            broker.stop()
        except (KafkaError, OSError) as e:
            fail(str(e))
        click.echo("stopped", err=True)
    finally:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)
