{{/*
Chart name, truncated for use in label values.
*/}}
{{- define "agentgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name. The usual Helm rule (release name alone when it
already contains the chart name, so release `agentgate` gives `agentgate`),
but truncated to 52 characters: names such as `<fullname>-webhook` and
`<fullname>-metrics` are Service names and must stay DNS labels (63).
*/}}
{{- define "agentgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "agentgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Standard labels on every object.
*/}}
{{- define "agentgate.labels" -}}
helm.sh/chart: {{ include "agentgate.chart" . }}
{{ include "agentgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentgate
{{- end }}

{{/*
Selector labels (immutable in the Deployment: keep them minimal).
*/}}
{{- define "agentgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of the ServiceAccount the operator runs as.
*/}}
{{- define "agentgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agentgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Container image reference: the digest, when set, wins over the tag.
*/}}
{{- define "agentgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The sandbox Pods' data-plane image: dataPlane.image, else the operator image.
*/}}
{{- define "agentgate.proxyImage" -}}
{{- default (include "agentgate.image" .) .Values.dataPlane.image }}
{{- end }}

{{/*
Names shared between the chart and the operator's flags.
*/}}
{{- define "agentgate.webhookServiceName" -}}
{{- printf "%s-webhook" (include "agentgate.fullname" .) }}
{{- end }}

{{- define "agentgate.metricsServiceName" -}}
{{- printf "%s-metrics" (include "agentgate.fullname" .) }}
{{- end }}

{{- define "agentgate.tlsSecretName" -}}
{{- printf "%s-webhook-tls" (include "agentgate.fullname" .) }}
{{- end }}

{{- define "agentgate.leaseName" -}}
{{- printf "%s-leader" (include "agentgate.fullname" .) }}
{{- end }}

{{/*
The DNS names the serving certificate must carry (both certificate modes).
*/}}
{{- define "agentgate.webhookDNSNames" -}}
{{- $svc := include "agentgate.webhookServiceName" . }}
- {{ $svc }}
- {{ $svc }}.{{ .Release.Namespace }}
- {{ $svc }}.{{ .Release.Namespace }}.svc
- {{ $svc }}.{{ .Release.Namespace }}.svc.cluster.local
{{- end }}

{{/*
namespaceSelector of every webhook: kube-system and the release namespace are
always excluded (the operator must be able to start, and be repaired, while
its own webhook is down); the user's extra matchLabels/matchExpressions are
ANDed with that exclusion.
*/}}
{{- define "agentgate.namespaceSelector" -}}
{{- $sel := .Values.webhook.namespaceSelector | default dict }}
{{- with $sel.matchLabels }}
matchLabels:
  {{- toYaml . | nindent 2 }}
{{- end }}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      - kube-system
      - {{ .Release.Namespace }}
{{- with $sel.matchExpressions }}
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
clientConfig of one webhook. Call with (dict "root" $ "path" "/validate/x").
No caBundle is ever rendered: in self-managed mode the operator owns that
field (server-side apply, field manager `agentgate`), in cert-manager mode the
cainjector does; rendering it would make every `helm upgrade` fight them.
*/}}
{{- define "agentgate.clientConfig" -}}
{{- $root := .root }}
{{- if $root.Values.webhook.url }}
url: {{ printf "%s%s" (trimSuffix "/" $root.Values.webhook.url) .path | quote }}
{{- else }}
service:
  name: {{ include "agentgate.webhookServiceName" $root }}
  namespace: {{ $root.Release.Namespace }}
  port: 443
  path: {{ .path | quote }}
{{- end }}
{{- end }}

{{/*
Checks of value combinations that the schema cannot express. Included from
the Deployment so that they run on every render.
*/}}
{{- define "agentgate.validateValues" -}}
{{- $timeoutMs := mul (int .Values.webhook.timeoutSeconds) 1000 }}
{{- $deadline := int .Values.webhook.solverDeadlineMs }}
{{- if gt (add $deadline 2000) $timeoutMs }}
{{- fail (printf "webhook.solverDeadlineMs (%d) must be at least 2000 ms under webhook.timeoutSeconds*1000 (%d): the API server gives up on the webhook before the solver does" $deadline $timeoutMs) }}
{{- end }}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) }}
{{- fail (printf "leaderElection.enabled=false with replicaCount=%d would run %d active controllers; enable leader election or set replicaCount to 1" (int .Values.replicaCount) (int .Values.replicaCount)) }}
{{- end }}
{{- if and .Values.webhook.url (not (hasPrefix "https://" .Values.webhook.url)) }}
{{- fail (printf "webhook.url must start with https:// (the API server only calls webhooks over TLS), got %q" .Values.webhook.url) }}
{{- end }}
{{- $ref := .Values.webhook.certManager.issuerRef | default dict }}
{{- if and .Values.webhook.certManager.enabled $ref (not $ref.name) }}
{{- fail "webhook.certManager.issuerRef.name is required when webhook.certManager.issuerRef is set" }}
{{- end }}
{{- end }}
