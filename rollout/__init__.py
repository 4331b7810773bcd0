"""The rollout domain: manifests, events and the pure decision core.

Nothing in this package performs I/O, reads a clock or talks to Kafka or Kubernetes.
`manifests` and `events` describe what enters the system; `selectors` and `bindings`
are the small pure helpers the decision core (`engine`) uses to turn a fleet and its
modules into per-cluster assignments; `assemblages` describes what leaves it.
"""
