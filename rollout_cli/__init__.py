"""The `rollout` command line.

    main.py          the `rollout` group: a table of commands, each imported when it runs
    commands/        one module per command or group: flags, a call into the work, printing
    processes/       the long-running ones (applier, up, dashboard, gate runner, watchers)
    publishing/      manifests → intents in one transaction; the engine's verdicts on them
    reading/         the topics read back: documents, the fleet, lists, status, checks
    views/           how it is shown: rich tables and screens, -o json|yaml
    options.py, sink_options.py, leadership_options.py: flags shared by commands and processes

Each layer imports only those below it, in that order ([tool.importlinter] in pyproject.toml;
docs/architecture.md, "The command line").
"""
