"""`rollout history [MODULE] --verify`: check the decision chains on the decisions topic.

    decisions (read_committed, every partition) ──► streams.chain.verify ──► OK per chain | the first break
    decide-state (chain:head per partition, read after) ─┘

Every decision record is linked into the hash chain of the journal partition that decided
it (streams/chain.py). The chains interleave on the decisions topic (keyed by module), so
verifying one module still reads the whole topic and verifies every chain that holds one
of its records. The decider's committed heads are read from `decide-state` *after* the
decisions, so every record the decider committed before that read is at or below its head:
a record past it was written by someone else. A commit's markers reach the decisions and
the state partitions one after the other, so a record past the head is re-checked once
against the records and heads both read again a second later before it counts (the heads
alone read again would let a forgery pass whose seq the decider has written since). A user who may not read
`decide-state` gets the chains checked without their tips (said in the output).

The heads printed (seq and full hash per chain) are what to record outside Kafka to pin
the history down (docs/security.md, "Tamper-evident history").
"""

from __future__ import annotations

import time
from typing import Any

import click

from infra import client
from rollout_cli.options import Context
from streams.chain import CHAIN_MAPPING, HEAD_KEY, ChainHead, ChainReport, verify

HEADS_RECHECKED_AFTER = 1.0  # seconds: a commit's markers land on the state partition a little later


def verify_history(ctx: Context, module: str | None) -> ChainReport:
    """Verify every chain, or (`module`) the chains that hold one of its records."""
    records = ctx.records(ctx.topics.decisions)
    chains = None if module is None else _chains_of(records, module)
    heads = _committed_heads(ctx)
    report = verify(records, heads=heads, chains=chains)
    if heads is not None and any("decider's committed head" in b.problem for b in report.breaks):
        # read both again, records first: newer heads against the older records would pass a
        # forgery whose seq the decider has since written too (its own record is not in them)
        time.sleep(HEADS_RECHECKED_AFTER)
        records = ctx.records(ctx.topics.decisions)
        chains = None if module is None else _chains_of(records, module)
        report = verify(records, heads=_committed_heads(ctx), chains=chains)
    if module is not None:
        for chain, summary in report.chains.items():
            summary.module_records = sum(1 for r in records if r.key == module and _chain_of(r) == chain)
    return report


def _chain_of(record: client.Record) -> int | None:
    try:
        return int(str(record.json().get("id")).split("-")[0])
    except (ValueError, AttributeError):
        return None


def _chains_of(records: list[client.Record], module: str) -> set[int]:
    return {chain for r in records if r.key == module and (chain := _chain_of(r)) is not None}


def _committed_heads(ctx: Context) -> dict[int, ChainHead] | None:
    """The decider's head per journal partition (decide-state partition p is journal
    partition p's state); None if decide-state cannot be read."""
    key = f"{CHAIN_MAPPING}:{HEAD_KEY}"
    try:
        records = client.run(client.read_all(ctx.bootstrap, ctx.topics.name("decide_state")))
    except Exception as error:
        click.echo(f"warning: cannot read the decider's heads ({error}): chain tips not checked", err=True)
        return None
    heads: dict[int, ChainHead] = {}
    for record in records:
        if record.key == key:
            if record.value is None:
                heads.pop(record.partition, None)
            else:
                heads[record.partition] = ChainHead.model_validate_json(record.value)
    return heads


def report_document(report: ChainReport) -> dict[str, Any]:
    """The report for -o json/yaml."""
    return {
        "ok": report.ok,
        "headsChecked": report.heads_checked,
        "chains": [
            {
                "chain": s.chain,
                "records": s.chained,
                "unchained": s.unchained,
                "firstSeq": s.first_seq,
                "fromGenesis": s.from_genesis,
                "head": None if s.head_seq is None else {"seq": s.head_seq, "hash": s.head_hash},
                **({} if s.module_records is None else {"moduleRecords": s.module_records}),
                "notes": s.notes,
            }
            for s in report.chains.values()
        ],
        "breaks": [
            {"chain": b.chain, "id": b.id, "where": b.where, "problem": b.problem, "line": b.line()}
            for b in report.breaks
        ],
    }


def print_report(report: ChainReport, module: str | None) -> None:
    broken = {b.chain: b for b in report.breaks}
    for b in report.breaks:
        if b.chain is None or b.chain not in report.chains:
            click.echo(f"BROKEN {b.line()}")
    for chain, s in report.chains.items():
        parts = []
        if s.module_records is not None:
            parts.append(f"{s.module_records} of {module}")
        if s.unchained:
            parts.append(f"{s.unchained} unchained (older than the chain)")
        if s.chained:
            span = f"seq {s.first_seq} to {s.head_seq}" if s.head_seq is not None else "not checked past the break"
            parts.append(f"{s.chained} chained ({span})")
        status = "BROKEN" if chain in broken else "OK"
        click.echo(f"chain {chain}: {status} — {', '.join(parts) or 'no records'}")
        if chain in broken:
            click.echo(f"  first record that does not match: {broken[chain].line()}")
        elif s.head_hash is not None:
            click.echo(f"  head: seq {s.head_seq} {s.head_hash}")
        for note in s.notes:
            click.echo(f"  note: {note}")
    if not report.chains and not report.breaks:
        click.echo("no decision records")
    if not report.heads_checked:
        click.echo("note: the tips were not compared with the decider's committed heads (decide-state unreadable)")
