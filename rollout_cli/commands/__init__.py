"""The `rollout` commands, one module per command or command group: click wiring only —
options, arguments, a call into the code that does the work (processes/, publishing/,
reading/, or streams/projections/infra directly), and what is printed.

Imported one at a time, when their command runs (rollout_cli/main.py's table): a command
module imports only click and the light option helpers at the top, the rest inside the
command, so that `rollout <command> --help` stays fast too (tests/cli/test_startup.py)."""
