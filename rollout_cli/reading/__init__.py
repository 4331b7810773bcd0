"""What the CLI reads from the topics: the engine's documents with their wire models
(documents.py), the fleet folded (known_clusters.py), `get`'s lists, the status screen and
`status --wait`, the decision chains checked (verifying.py) and the logs refolded
(replaying.py). Shown by rollout_cli/views/."""
