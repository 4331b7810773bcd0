"""The decision core: the pure fold of input events into rollout state, decisions,
assignments and status documents (core.py). Built on values, wire and API types."""
