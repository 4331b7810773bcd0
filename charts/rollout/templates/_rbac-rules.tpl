{{/* Rules as YAML lists; rbac.yaml puts them in Roles or ClusterRoles. */}}

{{- define "rollout.fluxResourceRules" -}}
- apiGroups: [source.toolkit.fluxcd.io]
  resources: [gitrepositories, ocirepositories, helmrepositories]
  verbs: {{ .verbs }}
- apiGroups: [kustomize.toolkit.fluxcd.io]
  resources: [kustomizations]
  verbs: {{ .verbs }}
- apiGroups: [helm.toolkit.fluxcd.io]
  resources: [helmreleases]
  verbs: {{ .verbs }}
{{- end -}}

{{/* The watcher: Clusters, and which kubeconfig secrets exist (it asks for metadata only). */}}
{{- define "rollout.watcherRules" -}}
- apiGroups: [cluster.x-k8s.io]
  resources: [clusters]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [list, watch]
{{- end -}}

{{/* The module watcher: the rollout.dev objects and their status, Events on them. */}}
{{- define "rollout.moduleWatcherRules" -}}
- apiGroups: [rollout.dev]
  resources: [modules, bootstrapmodules, rolloutapprovals, rolloutcommands, rolloutbreakglasses, modulerestrictions, freezecalendars]
  verbs: [get, list, watch]
- apiGroups: [rollout.dev]
  resources: [modules/status, bootstrapmodules/status, rolloutapprovals/status, rolloutcommands/status, rolloutbreakglasses/status]
  verbs: [get, update, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{/* The module watcher, cluster-wide whatever the fleet namespaces: the fleet's freeze calendars. */}}
{{- define "rollout.moduleWatcherClusterRules" -}}
- apiGroups: [rollout.dev]
  resources: [clusterfreezecalendars]
  verbs: [get, list, watch]
{{- end -}}

{{/* A leader-elected watcher, in the release namespace: its own Lease (kubernetes-asyncio's
LeaseLock reads, creates and replaces it; `create` cannot be limited to a name). */}}
{{- define "rollout.leaseRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{{ .lease }}]
  verbs: [get, update]
{{- end -}}

{{/* The applier in the fleet namespaces: own Flux objects, read kubeconfig secrets by name. */}}
{{- define "rollout.applierRules" -}}
{{ include "rollout.fluxResourceRules" (dict "verbs" "[get, list, watch, create, update, patch, delete]") }}
- apiGroups: [""]
  resources: [secrets]
  {{- with .Values.rbac.kubeconfigSecretNames }}
  resourceNames:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  verbs: [get]
{{- end -}}

{{/* The applier everywhere: it finds its objects and their status by label, cluster-wide. */}}
{{- define "rollout.applierReadRules" -}}
{{ include "rollout.fluxResourceRules" (dict "verbs" "[get, list, watch]") }}
{{- end -}}
