"""What travels on Kafka between processes: input events, heartbeats as readers see them,
and the assemblage documents the engine publishes. Built on the API types only."""
