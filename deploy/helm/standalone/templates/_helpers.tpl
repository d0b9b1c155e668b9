{{- define "standalone.name" -}}
{{- printf "%s-epp" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "standalone.labels" -}}
app.kubernetes.io/name: {{ include "standalone.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pyepp
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 }}
{{- end -}}

{{- define "standalone.selectorLabels" -}}
app.kubernetes.io/name: {{ include "standalone.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "standalone.image" -}}
{{- $img := .Values.inferenceExtension.image -}}
{{- printf "%s/%s:%s" $img.registry $img.repository ($img.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* --endpoint-selector: the matchLabels as k=v pairs, sorted by key. */}}
{{- define "standalone.endpointSelector" -}}
{{- $labels := .Values.inferencePool.modelServers.matchLabels -}}
{{- $pairs := list -}}
{{- range $key := keys $labels | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s=%v" $key (index $labels $key)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{- define "standalone.targetPorts" -}}
{{- $ports := list -}}
{{- range .Values.inferencePool.targetPorts -}}
{{- $ports = append $ports (int .number | toString) -}}
{{- end -}}
{{- join "," $ports -}}
{{- end -}}

{{/* Fails the render with a message naming the value and what it expects. */}}
{{- define "standalone.validate" -}}
{{- $ie := .Values.inferenceExtension -}}
{{- $pool := .Values.inferencePool -}}
{{- if not $pool.modelServers.matchLabels -}}
{{- fail "inferencePool.modelServers.matchLabels is required: the labels of the model-server pods, e.g. --set inferencePool.modelServers.matchLabels.app=vllm-llama3-8b-instruct" -}}
{{- end -}}
{{- $ports := $pool.targetPorts | default list -}}
{{- if or (lt (len $ports) 1) (gt (len $ports) 8) -}}
{{- fail (printf "inferencePool.targetPorts: expected 1 to 8 entries of {number: PORT}, got %d" (len $ports)) -}}
{{- end -}}
{{- range $ports -}}
{{- if or (not (kindIs "map" .)) (lt (int (.number | default 0)) 1) (gt (int (.number | default 0)) 65535) -}}
{{- fail (printf "inferencePool.targetPorts: expected entries {number: 1-65535}, got %v" .) -}}
{{- end -}}
{{- end -}}
{{- if not (has $ie.failureMode (list "FailOpen" "FailClose")) -}}
{{- fail (printf "inferenceExtension.failureMode: expected FailOpen or FailClose, got %q" $ie.failureMode) -}}
{{- end -}}
{{- if and (eq $ie.failureMode "FailOpen") (not (regexMatch "^[A-Za-z0-9.-]+:[0-9]+$" .Values.envoy.fallbackService)) -}}
{{- fail (printf "envoy.fallbackService: FailOpen needs the host:port of a Service in front of the model servers, got %q" .Values.envoy.fallbackService) -}}
{{- end -}}
{{- if lt (int $ie.replicas) 1 -}}
{{- fail (printf "inferenceExtension.replicas: expected at least 1, got %v" $ie.replicas) -}}
{{- end -}}
{{- if and (not (hasKey ($ie.pluginsCustomConfig | default dict) $ie.pluginsConfigFile)) (ne $ie.pluginsConfigFile "default-plugins.yaml") -}}
{{- fail (printf "inferenceExtension.pluginsConfigFile: %q is neither default-plugins.yaml nor a key of inferenceExtension.pluginsCustomConfig" $ie.pluginsConfigFile) -}}
{{- end -}}
{{- end -}}
