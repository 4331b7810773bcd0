"""Infrastructure shared by the stream processors, the appliers and the CLI: Kafka settings,
topics, plain Kafka clients, observability and the local broker. Imports only point down:
`rollout` (the domain) <- `infra` <- `streams` and `projections` <- `rollout_cli`."""
