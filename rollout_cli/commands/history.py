"""`rollout history [MODULE] [--verify]`: a module's decisions, oldest first, or the check of
the decision hash chains (rollout_cli/reading/verifying.py)."""

from __future__ import annotations

import sys

import click

from rollout_cli.options import Context, fail, kafka_options
from rollout_cli.views.output import emit, output_option


@click.command()
@click.argument("module", required=False)
@click.option(
    "--verify",
    is_flag=True,
    help="Check the hash chains of the decision records instead (all of them, or those holding "
    "MODULE's records): exit 0 if every record matches, 1 naming the first record that does not.",
)
@click.option(
    "--release",
    "whole_release",
    is_flag=True,
    help="MODULE's whole Release: the decisions of every member, by engine time (a MODULE column).",
)
@output_option
@kafka_options
def history(ctx: Context, module: str | None, verify: bool, whole_release: bool, output: str) -> None:
    """Every decision taken for MODULE, oldest first, from the decisions topic.

    A module with neither decisions nor a status is an error (exit 1). With -o json|yaml,
    each decision record as written: its action, its reason as `because` (a code and the
    facts, e.g. the stage and its counts) and as the sentence shown (`reason`) — records
    written before structured reasons have no `because`.

    --verify: each decision record carries `seq`, `prev` (the previous record's hash in the
    chain of its journal partition) and `hash` (SHA-256 of the record without `hash`, as JSON
    with sorted keys and no whitespace). Every chain is recomputed record by record and its tip
    compared with the head the decider committed (decide-state). Prints OK per chain with its
    head — record the heads elsewhere to pin the history down — or the first record that does
    not match: its id, its place on the topic and what differs. Records older than the chain
    (written before decisions were hashed) are reported as unchained; the oldest record left
    by retention starts its chain unchecked (said in a note).
    """
    if verify:
        from rollout_cli.reading import verifying

        report = verifying.verify_history(ctx, module)
        if module is not None and not report.chains and not report.breaks:
            fail(f"module {module} has no decision records", code=1)
        if output != "table":
            emit(verifying.report_document(report), output)
        else:
            verifying.print_report(report, module)
        if not report.ok:
            sys.exit(1)
        return
    if module is None:
        fail("history needs a MODULE (or --verify, which checks every chain)")
        return
    from rollout_cli.reading.documents import decisions_for
    from rollout_cli.views.decisions import print_decisions

    members = [module]
    if whole_release:  # every member of its Release, as its module status names them
        from rollout_cli.reading.documents import module_status

        document = ctx.latest(ctx.topics.module_status).get(module)
        release = module_status(module, document).release if document is not None else None
        if release is None:
            fail(f"module {module} is not a member of a Release (its status names none)", code=1)
            return
        members = list(release.members)
    records = ctx.records(ctx.topics.decisions)
    decisions = [decision for member in members for decision in decisions_for(records, member)]
    if whole_release:
        decisions.sort(key=lambda decision: decision.at)  # stable: each member's own order kept
    if not decisions and module not in ctx.latest(ctx.topics.module_status):
        fail(f"module {module} not found", code=1)
    if output != "table":
        emit([decision.as_json() for decision in decisions], output)
    else:
        print_decisions(decisions, with_module=whole_release)
