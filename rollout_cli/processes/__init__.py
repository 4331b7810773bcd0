"""The long-running processes the CLI starts, each until SIGINT/SIGTERM (signals.py): the
applier and its sinks, `rollout up` and its children, the dashboard, the gate runner, the
watchers (one leader each: leader.py) and the local broker in the foreground.

Each builds its parts from projections/, streams/ and infra/ and runs them; its command
(rollout_cli/commands/) only turns flags into arguments. Nothing here imports a command."""
