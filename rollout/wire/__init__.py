"""What travels on Kafka between processes: input events, heartbeats as readers see them,
the assemblage documents the engine publishes, and the documents it publishes for readers —
module status and rollout targets (status.py), verdicts (verdicts.py), dead letters
(dead_letters.py), decisions (decisions.py: an action, decision_actions.py, and a typed
reason, decision_reasons.py) — each one versioned model (documents.py) that the writer and
every reader import. Built on the API types only."""
