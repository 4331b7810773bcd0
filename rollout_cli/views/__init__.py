"""How the CLI shows what it read: rich tables and screens for people, `-o json|yaml` for
scripts. Views take documents already read (rollout_cli/reading/) and print or return
renderables; they read no topic themselves."""
