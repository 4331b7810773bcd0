"""The API users write: manifests (Module, BootstrapModule, Cluster, ModuleRestriction),
their formats, Flux and Helm options, gates, windows and the Kubernetes-object views, and
the safe loading of manifest files. The bottom layer of the domain: imports nothing above it."""
