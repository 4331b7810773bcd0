"""Auto-promotion's watcher: `rollout promoter` (promoter.py) and the sources it reads (sources.py)."""
