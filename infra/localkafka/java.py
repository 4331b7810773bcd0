"""The Java runtime the broker runs on: ``$JAVA_HOME/bin/java`` or ``java`` on PATH, Java 11+."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from infra.localkafka.defaults import KAFKA_VERSION, MIN_JAVA
from infra.localkafka.errors import JavaNotFoundError


def find_java() -> str:
    """Path of the ``java`` to use: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found:
        return found
    hint = f" (JAVA_HOME={home} has no bin/java)" if home else ""
    raise JavaNotFoundError(
        f"Java not found{hint}: the local Kafka broker needs a Java {MIN_JAVA}+ runtime "
        "(17 recommended). Install one — e.g. `apt-get install openjdk-17-jre-headless`, "
        "`dnf install java-17-openjdk-headless` or `brew install openjdk@17` — and put `java` "
        "on PATH or set JAVA_HOME."
    )


def check_java_version(java: str) -> None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JavaNotFoundError(f"cannot run {java}: {e}") from e
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_..."
        major = int(m.group(2))
    if major < MIN_JAVA:
        raise JavaNotFoundError(
            f"{java} is Java {major}; Kafka {KAFKA_VERSION} needs Java {MIN_JAVA}+ (17 recommended)"
        )
