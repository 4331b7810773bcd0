"""The rollout domain: pure — nothing here performs I/O, reads a clock or talks to Kafka or
Kubernetes. Layered bottom to top (each package imports only those below it; the import
contracts in pyproject.toml are checked by `make test`):

    api       manifests users write, their formats, gates, windows; loading manifest files
    wire      events on Kafka, heartbeats as read, the documents published (assemblages,
              module status, rollout targets, verdicts, dead letters, decisions and their
              typed reasons: one model each)
    values    Helm values: layers merged under policies, bindings, one cluster's release
    engine    the fold: events → state, decisions, assignments, status documents
    assembly  assignments → per-cluster assemblage snapshots
    planning  `rollout plan`, surprises, dependency cycles, sent values explained
"""
