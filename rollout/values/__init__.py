"""Helm values: layers merged path by path under a policy, `$(NAME)` bindings, and one
cluster's release (its sync with the merged values). Pure; built on the API types only."""
