"""`rollout dead-letters`: the rejected inputs (rollout/wire/dead_letters.py) as a table or,
with `-o json|yaml`, as documents with their record's time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

from rollout_cli.views import terminal

if TYPE_CHECKING:
    from rollout.wire.dead_letters import DeadLetter


def dead_letters_json(letters: list[tuple[float | None, DeadLetter]]) -> list[dict[str, Any]]:
    """`rollout dead-letters -o json|yaml`: each document with `at`, its record's time."""
    return [{"at": at, **letter.as_json()} for at, letter in letters]


def print_dead_letters(letters: list[tuple[float | None, DeadLetter]]) -> None:
    table = Table("TIME", "STAGE", "INPUT", "KEY", "SIZE", "REASON", box=None)
    for at, letter in letters:
        table.add_row(
            terminal.local_time(at),
            letter.stage or "-",
            letter.position,
            letter.key or "-",
            _size(letter.size),
            letter.reason,
        )
    terminal.console.print(table)


def _size(size: Any) -> str:
    if not isinstance(size, int):
        return "-"
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
