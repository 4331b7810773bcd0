"""The `rollout` command line."""
