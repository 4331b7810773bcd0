{{/*
Names, labels, and the pieces every component's pod shares: Kafka environment, volumes,
security contexts, probes, scheduling. Components: worker, applier, watcher,
module-watcher, dashboard, topics.
*/}}

{{/* The values key of a component: its name, in camelCase where the name has a dash
(module-watcher: moduleWatcher). */}}
{{- define "rollout.valuesKey" -}}
{{- get (dict "module-watcher" "moduleWatcher" "gate-runner" "gateRunner") . | default . -}}
{{- end -}}

{{- define "rollout.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rollout.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Name of a component's objects: <fullname>-<component>, within 63 characters. */}}
{{- define "rollout.componentName" -}}
{{- printf "%s-%s" (include "rollout.fullname" .root | trunc (int (sub 62 (len .component))) | trimSuffix "-") .component -}}
{{- end -}}

{{/* Cluster-scoped objects need the release namespace in their name to stay unique. */}}
{{- define "rollout.clusterScopedName" -}}
{{- printf "%s-%s-%s" (include "rollout.fullname" .root) .root.Release.Namespace .component | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{- define "rollout.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rollout.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rollout.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "rollout.labels" -}}
helm.sh/chart: {{ include "rollout.chart" .root }}
{{ include "rollout.selectorLabels" . }}
app.kubernetes.io/part-of: rollout
{{- if .root.Chart.AppVersion }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{- define "rollout.image" -}}
{{- $image := .Values.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount of a component (its own unless serviceAccount.create is false). */}}
{{- define "rollout.serviceAccountName" -}}
{{- $sa := (index .root.Values (include "rollout.valuesKey" .component)).serviceAccount -}}
{{- if $sa.create -}}
{{- default (include "rollout.componentName" .) $sa.name -}}
{{- else -}}
{{- default "default" $sa.name -}}
{{- end -}}
{{- end -}}

{{/* Namespaces the RBAC Roles (and the watcher's --namespace flags) cover. */}}
{{- define "rollout.fleetNamespaces" -}}
{{- $namespaces := .Values.rbac.namespaces -}}
{{- if not $namespaces -}}
{{- $namespaces = list .Release.Namespace -}}
{{- end -}}
{{- toJson (uniq $namespaces) -}}
{{- end -}}

{{/*
Kafka connection as environment variables, for every container that talks to Kafka; the
argument is a component's context (dict "root" "component"). Credentials come from Secrets
only: with kafka.users.enabled, the component's own KafkaUser — Strimzi writes its password
into a Secret named after the user, key `password` (templates/kafka-users.yaml) — else
kafka.sasl.existingSecret, shared. The CA bundle is a mounted file.
*/}}
{{- define "rollout.kafkaEnv" -}}
{{- $kafka := .root.Values.kafka -}}
- name: ROLLOUT_BOOTSTRAP_SERVERS
  value: {{ $kafka.bootstrapServers | quote }}
- name: ROLLOUT_TOPIC_PREFIX
  value: {{ $kafka.topicPrefix | quote }}
- name: ROLLOUT_KAFKA_SECURITY_PROTOCOL
  value: {{ $kafka.securityProtocol | quote }}
{{- if $kafka.users.enabled }}
{{- $user := include "rollout.componentName" . }}
- name: ROLLOUT_KAFKA_SASL_MECHANISM
  value: SCRAM-SHA-512
- name: ROLLOUT_KAFKA_SASL_USERNAME
  value: {{ $user | quote }}
- name: ROLLOUT_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $user }}
      key: password
{{- else if hasPrefix "SASL_" $kafka.securityProtocol }}
- name: ROLLOUT_KAFKA_SASL_MECHANISM
  value: {{ $kafka.sasl.mechanism | quote }}
- name: ROLLOUT_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $kafka.sasl.existingSecret }}
      key: {{ $kafka.sasl.usernameKey }}
- name: ROLLOUT_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $kafka.sasl.existingSecret }}
      key: {{ $kafka.sasl.passwordKey }}
{{- end }}
{{- if $kafka.tls.caSecret }}
- name: ROLLOUT_KAFKA_CA_FILE
  value: {{ printf "/etc/rollout/kafka-ca/%s" $kafka.tls.caKey | quote }}
{{- end }}
{{- end -}}

{{- define "rollout.kafkaVolumeMounts" -}}
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-ca
  mountPath: /etc/rollout/kafka-ca
  readOnly: true
{{- end }}
{{- end -}}

{{- define "rollout.kafkaVolumes" -}}
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafka.tls.caSecret }}
    items:
      - key: {{ .Values.kafka.tls.caKey }}
        path: {{ .Values.kafka.tls.caKey }}
{{- end }}
{{- end -}}

{{/* Flags every long-running component takes: log level and format, health/metrics address
and port. The program listens on 127.0.0.1 unless told otherwise; the kubelet's probes and
Prometheus reach the pod IP, so the chart always passes 0.0.0.0. */}}
{{- define "rollout.processArgs" -}}
- --loglevel
- {{ .root.Values.logLevel | quote }}
- --log-format
- {{ .root.Values.logFormat | quote }}
- --web-host
- "0.0.0.0"
- --web-port
- {{ .port | quote }}
{{- end -}}

{{- define "rollout.probes" -}}
{{- $probes := .root.Values.probes -}}
startupProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: {{ $probes.startup.periodSeconds }}
  timeoutSeconds: {{ $probes.startup.timeoutSeconds }}
  failureThreshold: {{ $probes.startup.failureThreshold }}
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  initialDelaySeconds: {{ $probes.liveness.initialDelaySeconds }}
  periodSeconds: {{ $probes.liveness.periodSeconds }}
  timeoutSeconds: {{ $probes.liveness.timeoutSeconds }}
  failureThreshold: {{ $probes.liveness.failureThreshold }}
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  initialDelaySeconds: {{ $probes.readiness.initialDelaySeconds }}
  periodSeconds: {{ $probes.readiness.periodSeconds }}
  timeoutSeconds: {{ $probes.readiness.timeoutSeconds }}
  failureThreshold: {{ $probes.readiness.failureThreshold }}
{{- end -}}

{{/* Pod-level settings shared by every component: scheduling and security. */}}
{{- define "rollout.podSpecCommon" -}}
{{- $values := index .root.Values (include "rollout.valuesKey" .component) | default dict -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with (default .root.Values.nodeSelector $values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default .root.Values.tolerations $values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default .root.Values.affinity $values.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
A pod's labels: the chart's, with podLabels added. A podLabels key that is one of the
selector labels (name, instance, component) would detach the pods from their Deployment and
Services: refused. Any other chart label (version, part-of, ...) may be overridden.
*/}}
{{- define "rollout.podLabels" -}}
{{- $selector := include "rollout.selectorLabels" . | fromYaml -}}
{{- range $key, $_ := .root.Values.podLabels -}}
{{- if hasKey $selector $key -}}
{{- fail (printf "podLabels: %q is a selector label the chart sets itself (%s: %s); use another key" $key $key (index $selector $key)) -}}
{{- end -}}
{{- end -}}
{{- toYaml (merge (dict) $selector .root.Values.podLabels (include "rollout.labels" . | fromYaml)) -}}
{{- end -}}

{{- define "rollout.podMetadata" -}}
{{- $values := index .root.Values (include "rollout.valuesKey" .component) | default dict -}}
metadata:
  labels:
    {{- include "rollout.podLabels" . | nindent 4 }}
  {{- $annotations := merge (dict) ($values.podAnnotations | default dict) .root.Values.podAnnotations (.extraAnnotations | default dict) }}
  {{- with $annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/*
"true" when the cluster serves admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy
(Kubernetes >= 1.30); empty otherwise. The version is always checked (`helm template
--kube-version` sets it); the kind too when Helm talks to a cluster — its discovery lists
kinds ("v1/Pod"), while `helm template` offline knows group/versions only.
*/}}
{{- define "rollout.admissionPolicyAvailable" -}}
{{- $apis := .Capabilities.APIVersions -}}
{{- $served := or (not ($apis.Has "v1/Pod")) ($apis.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") -}}
{{- if and (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version) $served -}}
true
{{- end -}}
{{- end -}}
