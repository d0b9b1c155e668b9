{{/* The picker's name: Deployment, Service, ServiceAccount, ConfigMap and RBAC objects. */}}
{{- define "inferencepool.eppName" -}}
{{- printf "%s-epp" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "inferencepool.labels" -}}
app.kubernetes.io/name: {{ include "inferencepool.eppName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pyepp
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 }}
{{- end -}}

{{- define "inferencepool.selectorLabels" -}}
inferencepool: {{ include "inferencepool.eppName" . }}
{{- end -}}

{{- define "inferencepool.image" -}}
{{- $img := .Values.inferenceExtension.image -}}
{{- printf "%s/%s:%s" $img.registry $img.repository ($img.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* "true" when more than one replica runs: leader election, Lease RBAC, leader-only readiness. */}}
{{- define "inferencepool.leaderElection" -}}
{{- if gt (int .Values.inferenceExtension.replicas) 1 }}true{{ end -}}
{{- end -}}

{{/* The API group of the InferencePool (for --pool-group and RBAC). */}}
{{- define "inferencepool.group" -}}
{{- (split "/" .Values.inferencePool.apiVersion)._0 -}}
{{- end -}}

{{- define "inferencepool.metricsAuth" -}}
{{- $p := .Values.inferenceExtension.monitoring.prometheus -}}
{{- if and $p.enabled $p.auth.enabled }}true{{ end -}}
{{- end -}}

{{/* Fails the render with a message naming the value and what it expects. */}}
{{- define "inferencepool.validate" -}}
{{- $ie := .Values.inferenceExtension -}}
{{- $pool := .Values.inferencePool -}}
{{- if not $pool.modelServers.matchLabels -}}
{{- fail "inferencePool.modelServers.matchLabels is required: the labels of the model-server pods, e.g. --set inferencePool.modelServers.matchLabels.app=vllm-llama3-8b-instruct" -}}
{{- end -}}
{{- if hasKey $pool "targetPortNumber" -}}
{{- fail (printf "inferencePool.targetPortNumber (older GIE charts) is not read: use inferencePool.targetPorts: [{number: %v}]" $pool.targetPortNumber) -}}
{{- end -}}
{{- if or (hasKey $ie.image "hub") (hasKey $ie.image "name") -}}
{{- fail "inferenceExtension.image.hub/name (older GIE charts) are not read: use inferenceExtension.image.registry and .repository" -}}
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
{{- if not (has $pool.modelServerType (list "vllm" "sglang" "trtllm-serve" "triton-tensorrt-llm")) -}}
{{- fail (printf "inferencePool.modelServerType: expected vllm, sglang, trtllm-serve or triton-tensorrt-llm, got %q" $pool.modelServerType) -}}
{{- end -}}
{{- if not (has $ie.failureMode (list "FailOpen" "FailClose")) -}}
{{- fail (printf "inferenceExtension.failureMode: expected FailOpen or FailClose, got %q" $ie.failureMode) -}}
{{- end -}}
{{- if lt (int $ie.replicas) 1 -}}
{{- fail (printf "inferenceExtension.replicas: expected at least 1, got %v" $ie.replicas) -}}
{{- end -}}
{{- if not (has .Values.provider.name (list "none" "istio")) -}}
{{- fail (printf "provider.name: expected none or istio, got %q (this chart renders no gke resources)" .Values.provider.name) -}}
{{- end -}}
{{- if and (not (hasKey ($ie.pluginsCustomConfig | default dict) $ie.pluginsConfigFile)) (ne $ie.pluginsConfigFile "default-plugins.yaml") -}}
{{- fail (printf "inferenceExtension.pluginsConfigFile: %q is neither default-plugins.yaml nor a key of inferenceExtension.pluginsCustomConfig" $ie.pluginsConfigFile) -}}
{{- end -}}
{{- end -}}
