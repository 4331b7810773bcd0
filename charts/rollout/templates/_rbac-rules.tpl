{{/* Rules as YAML lists; rbac.yaml puts them in Roles or ClusterRoles. */}}

{{- define "rollout.kubeconfigSecretRule" -}}
- apiGroups: [""]
  resources: [secrets]
  {{- with .Values.rbac.kubeconfigSecretNames }}
  resourceNames:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  verbs: [get]
{{- end -}}

{{- define "rollout.watcherRules" -}}
- apiGroups: [cluster.x-k8s.io]
  resources: [clusters]
  verbs: [get, list, watch]
{{ include "rollout.kubeconfigSecretRule" . }}
{{- end -}}

{{- define "rollout.fluxVerbs" -}}
[get, list, watch, create, update, patch, delete]
{{- end -}}

{{- define "rollout.applierRules" -}}
- apiGroups: [source.toolkit.fluxcd.io]
  resources: [gitrepositories, ocirepositories]
  verbs: {{ include "rollout.fluxVerbs" . }}
- apiGroups: [kustomize.toolkit.fluxcd.io]
  resources: [kustomizations]
  verbs: {{ include "rollout.fluxVerbs" . }}
{{ include "rollout.kubeconfigSecretRule" . }}
{{- end -}}
