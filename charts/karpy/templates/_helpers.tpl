{{/* The base name of the chart's objects: karpenter, as upstream's, unless nameOverride. */}}
{{- define "karpy.name" -}}
{{- default "karpenter" .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name: fullnameOverride, else the release name when it holds the name, else RELEASE-NAME. */}}
{{- define "karpy.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "karpy.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels that select the controller's pods. */}}
{{- define "karpy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The labels of every object. */}}
{{- define "karpy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "karpy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: karpy
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* metadata.labels and metadata.annotations of every object. */}}
{{- define "karpy.metadata" -}}
labels:
  {{- include "karpy.labels" . | nindent 2 }}
{{- with .Values.additionalAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "karpy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "karpy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "karpy.image" -}}
{{- $image := .Values.controller.image }}
{{- $ref := printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag | toString) }}
{{- if $image.digest }}{{ $ref = printf "%s@%s" $ref $image.digest }}{{ end }}
{{- $ref }}
{{- end }}

{{/* FEATURE_GATES from settings.featureGates: upstream's gate names (nodeRepair is NodeRepair), true or false. */}}
{{- define "karpy.featureGates" -}}
{{- $gates := list }}
{{- range $key, $on := .Values.settings.featureGates }}
{{- if not (kindIs "bool" $on) }}
{{- fail (printf "settings.featureGates.%s: %v is not true or false" $key $on) }}
{{- end }}
{{- $gates = append $gates (printf "%s%s=%t" (upper (substr 0 1 $key)) (substr 1 -1 $key) $on) }}
{{- end }}
{{- join "," $gates }}
{{- end }}

{{/* A label selector of the controller's pods on each pod (anti-)affinity term and spread constraint without one,
as upstream's chart does. */}}
{{- define "karpy.withSelector" -}}
{{- if not (hasKey .target "labelSelector") }}
{{- $_ := set .target "labelSelector" (dict "matchLabels" (include "karpy.selectorLabels" .root | fromYaml)) }}
{{- end }}
{{- end }}

{{- define "karpy.affinity" -}}
{{- $affinity := deepCopy .Values.affinity }}
{{- range $kind := list "podAffinity" "podAntiAffinity" }}
{{- with (get $affinity $kind) }}
{{- range $term := (default list .requiredDuringSchedulingIgnoredDuringExecution) }}
{{- include "karpy.withSelector" (dict "target" $term "root" $) }}
{{- end }}
{{- range $weighted := (default list .preferredDuringSchedulingIgnoredDuringExecution) }}
{{- include "karpy.withSelector" (dict "target" $weighted.podAffinityTerm "root" $) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $affinity }}
{{- end }}

{{- define "karpy.topologySpreadConstraints" -}}
{{- $constraints := deepCopy .Values.topologySpreadConstraints }}
{{- range $c := $constraints }}
{{- include "karpy.withSelector" (dict "target" $c "root" $) }}
{{- end }}
{{- toYaml $constraints }}
{{- end }}

{{/* Refuse values karpy cannot honour: an unknown provider, a provider's setting with another provider, AWS without a
cluster name (Azure's settings, upstream's controller.env, are checked by karpy at start: a missing one exits 2). */}}
{{- define "karpy.validate" -}}
{{- $provider := .Values.cloudProvider }}
{{- if not (has $provider (list "kwok" "simulated" "aws" "azure")) }}
{{- fail (printf "cloudProvider: %q is not one of kwok, simulated, aws, azure" (toString $provider)) }}
{{- end }}
{{- $s := .Values.settings }}
{{- if and (eq $provider "aws") (not $s.clusterName) }}
{{- fail "settings.clusterName is required with cloudProvider aws: --set settings.clusterName=NAME" }}
{{- end }}
{{- if ne $provider "aws" }}
{{- $aws := list }}
{{- if $s.interruptionQueue }}{{ $aws = append $aws "settings.interruptionQueue" }}{{ end }}
{{- if $s.isolatedVPC }}{{ $aws = append $aws "settings.isolatedVPC" }}{{ end }}
{{- if ne (toString $s.reservedENIs) "0" }}{{ $aws = append $aws "settings.reservedENIs" }}{{ end }}
{{- with $aws }}
{{- fail (printf "%s: AWS settings, read with cloudProvider aws only (cloudProvider is %s): add --set cloudProvider=aws" (join ", " .) $provider) }}
{{- end }}
{{- end }}
{{- if and (ne $provider "azure") $s.tags }}
{{- fail (printf "settings.tags: an Azure setting, read with cloudProvider azure only (cloudProvider is %s): add --set cloudProvider=azure" $provider) }}
{{- end }}
{{- end }}

{{/* Upstream settings set to what karpy does not implement, one per line. */}}
{{- define "karpy.ignored" -}}
{{- $s := .Values.settings }}
{{- if not (has (toString $s.preferencePolicy) (list "" "Respect")) }}
settings.preferencePolicy={{ $s.preferencePolicy }}: karpy always respects preferences
{{- end }}
{{- if $s.enableZonalShift }}
settings.enableZonalShift=true: karpy does not follow zonal shifts
{{- end }}
{{- if not $s.ignoreDRARequests }}
settings.ignoreDRARequests=false: karpy always ignores DRA requests
{{- end }}
{{- if $s.disableClusterStateObservability }}
settings.disableClusterStateObservability=true: karpy always publishes cluster state metrics and events
{{- end }}
{{- if (($s.awsFeatureGates).nodeClassCEL) }}
settings.awsFeatureGates.nodeClassCEL=true: karpy's image lacks the CEL library (karpy[cel]), set AWS_FEATURE_GATES in controller.env on an image that has it
{{- end }}
{{- if ne (toJson .Values.logOutputPaths) "[\"stdout\"]" }}
logOutputPaths: karpy writes every log line to standard output
{{- end }}
{{- if not (has (toJson .Values.logErrorOutputPaths) (list "[\"stderr\"]" "[\"stdout\"]")) }}
logErrorOutputPaths: karpy writes every log line to standard output
{{- end }}
{{- end }}

{{/* The rules of one role of files/rbac.yaml (a copy of deploy/rbac.yaml) as YAML: (list $ "KIND/NAME"). */}}
{{- define "karpy.rules" -}}
{{- $root := index . 0 }}
{{- $want := index . 1 }}
{{- $rules := list }}
{{- range ($root.Files.Get "files/rbac.yaml" | splitList "\n---") }}
{{- $doc := fromYaml . }}
{{- if eq (printf "%s/%s" (toString $doc.kind) (toString ($doc.metadata).name)) $want }}
{{- $rules = $doc.rules }}
{{- end }}
{{- end }}
{{- if not $rules }}
{{- fail (printf "files/rbac.yaml has no %s: run python scripts/gen_crds.py" $want) }}
{{- end }}
{{- toYaml $rules }}
{{- end }}
