"""What the CLI publishes and how it learns the engine's answer: manifest files → input
events (intents.py) checked before one transaction (applying.py; planning.py: the same
checks and the plans, nothing published), and the verdicts the engine writes back on each
(verdicts.py)."""
