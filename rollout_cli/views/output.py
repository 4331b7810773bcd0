"""Machine-readable output of the read verbs: `-o json` and `-o yaml`, one place for both.

Every read verb (`get`, `status`, `history`, `dead-letters`, `plan`) prints the documents as
the topics hold them (the same keys as the JSON on Kafka), so a script reads the same
fields whichever verb it asks; `-o table` (the default) is for people (the other views).
"""

from __future__ import annotations

import json
from typing import Any

import click

MACHINE_FORMATS = ("json", "yaml")
output_option = click.option(
    "-o",
    "--output",
    type=click.Choice(["table", *MACHINE_FORMATS]),
    default="table",
    show_default=True,
    help="table for people; json or yaml for scripts.",
)


def emit(payload: Any, output: str) -> None:
    """Print `payload` as JSON or YAML (non-ASCII kept as is)."""
    if output == "json":
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        import yaml

        click.echo(yaml.safe_dump(payload, sort_keys=False, allow_unicode=True), nl=False)
