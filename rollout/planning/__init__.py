"""What a user sees before applying: `rollout plan`, surprises, dependency cycles, and the
values a cluster was sent, explained. Reads the engine's rules; never changes state."""
