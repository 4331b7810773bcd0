"""Refold the logs and compare with the live topics (`rollout replay`)."""
