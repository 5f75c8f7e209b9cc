{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "batchop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects: <release>-batchop unless the release name has it. */}}
{{- define "batchop.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "batchop.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "batchop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "batchop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "batchop.labels" -}}
helm.sh/chart: {{ include "batchop.chart" . }}
{{ include "batchop.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: batchop
{{- end }}

{{- define "batchop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "batchop.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "batchop.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The rules batchop needs in each namespace it manages (docs/helm.md derives each one from the
operator's code): its own resource (read; patch for kopf's annotations; status), the
children it server-side-applies, lists, restores and prunes, the pods it watches and whose
delay annotation it patches, and events. No secrets, no configmaps, no wildcards.
*/}}
{{- define "batchop.rules" -}}
- apiGroups: ["batchop.io"]
  resources: ["batchedmodels"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["batchop.io"]
  resources: ["batchedmodels/status"]
  verbs: ["patch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- if .Values.podMonitorPerModel }}
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- end }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
Cluster-wide only: kopf watches CRDs to notice kinds installed after it started (e.g. the
PodMonitor CRD). Read-only. A namespaced install does without (scanning is off there).
*/}}
{{- define "batchop.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
{{- end }}
