{{/* Rules as YAML lists; rbac.yaml puts them in Roles or ClusterRoles. */}}

{{- define "rollout.fluxResourceRules" -}}
- apiGroups: [source.toolkit.fluxcd.io]
  resources: [gitrepositories, ocirepositories]
  verbs: {{ .verbs }}
- apiGroups: [kustomize.toolkit.fluxcd.io]
  resources: [kustomizations]
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
