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

{{/* "true" when the chart creates an InferencePool and the picker serves it (--pool-name). */}}
{{- define "standalone.poolMode" -}}
{{- if (.Values.inferenceExtension.endpointsServer | default dict).createInferencePool }}true{{ end -}}
{{- end -}}

{{/* --endpoint-selector: endpointsServer.endpointSelector, else the matchLabels as k=v pairs sorted by key. */}}
{{- define "standalone.endpointSelector" -}}
{{- $es := .Values.inferenceExtension.endpointsServer | default dict -}}
{{- if $es.endpointSelector -}}
{{- $es.endpointSelector -}}
{{- else -}}
{{- $labels := (.Values.inferencePool.modelServers | default dict).matchLabels | default dict -}}
{{- $pairs := list -}}
{{- range $key := keys $labels | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s=%v" $key (index $labels $key)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
{{- end -}}

{{/* --endpoint-target-ports: endpointsServer.targetPorts (a list, a number or "8000,8001"), else
inferencePool.targetPorts; fails when a port is invalid. */}}
{{- define "standalone.targetPorts" -}}
{{- $value := (.Values.inferenceExtension.endpointsServer | default dict).targetPorts -}}
{{- $raw := list -}}
{{- if empty $value -}}
{{- range .Values.inferencePool.targetPorts }}{{ $raw = append $raw .number }}{{ end -}}
{{- else if kindIs "slice" $value -}}
{{- $raw = $value -}}
{{- else -}}
{{- $raw = splitList "," (toString $value) -}}
{{- end -}}
{{- $ports := list -}}
{{- range $raw -}}
{{- $text := trim (toString .) -}}
{{- if or (not (regexMatch "^[0-9]+$" $text)) (lt (int $text) 1) (gt (int $text) 65535) -}}
{{- fail (printf "inferenceExtension.endpointsServer.targetPorts: expected ports 1-65535, got %q" $text) -}}
{{- end -}}
{{- $ports = append $ports (toString (int $text)) -}}
{{- end -}}
{{- join "," $ports -}}
{{- end -}}

{{/* The model-server type: endpointsServer's in selector mode, else the pool's (as GIE). */}}
{{- define "standalone.modelServerType" -}}
{{- if include "standalone.poolMode" . -}}
{{- .Values.inferencePool.modelServerType | default "vllm" -}}
{{- else -}}
{{- (.Values.inferenceExtension.endpointsServer | default dict).modelServerType | default "vllm" -}}
{{- end -}}
{{- end -}}

{{/* The API group of the InferencePool (for --pool-group and RBAC). */}}
{{- define "standalone.group" -}}
{{- (split "/" (.Values.inferencePool.apiVersion | default "inference.networking.k8s.io/v1"))._0 -}}
{{- end -}}

{{/* The proxy sidecar as GIE resolves it: the preset of proxyType merged with the sidecar.* overrides.
Without an image it is pyepp's own Envoy sidecar (envoy.*). Rendered as YAML; read with fromYaml. */}}
{{- define "standalone.sidecar" -}}
{{- $sidecar := deepCopy (.Values.inferenceExtension.sidecar | default dict) -}}
{{- $proxyType := lower ($sidecar.proxyType | default "envoy") -}}
{{- $preset := deepCopy ((index ($sidecar.presets | default dict) $proxyType) | default dict) -}}
{{- toYaml (mergeOverwrite $preset (omit $sidecar "presets" "proxyType" "agentgateway")) -}}
{{- end -}}

{{/* "true" when pyepp's built-in Envoy sidecar runs (sidecar enabled, no custom container). */}}
{{- define "standalone.builtinEnvoy" -}}
{{- $sidecar := include "standalone.sidecar" . | fromYaml -}}
{{- if and $sidecar.enabled (not $sidecar.image) }}true{{ end -}}
{{- end -}}

{{- define "standalone.metricsAuth" -}}
{{- $p := .Values.inferenceExtension.monitoring.prometheus -}}
{{- if and $p.enabled $p.auth.enabled }}true{{ end -}}
{{- end -}}

{{/* Fails the render with a message naming the value and what it expects. */}}
{{- define "standalone.validate" -}}
{{- $ie := .Values.inferenceExtension -}}
{{- $pool := .Values.inferencePool -}}
{{- $es := $ie.endpointsServer | default dict -}}
{{- $sidecarValues := $ie.sidecar | default dict -}}
{{- $sidecar := include "standalone.sidecar" . | fromYaml -}}
{{- if and (or (include "standalone.poolMode" .) (not $es.endpointSelector)) (or (empty $pool.modelServers) (not $pool.modelServers.matchLabels)) -}}
{{- fail "inferencePool.modelServers.matchLabels is required (or, with endpointsServer.createInferencePool false, endpointsServer.endpointSelector): the labels of the model-server pods, e.g. --set inferencePool.modelServers.matchLabels.app=vllm-llama3-8b-instruct" -}}
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
{{- $_ := include "standalone.targetPorts" . -}}
{{- if not (has (include "standalone.modelServerType" .) (list "vllm" "sglang" "trtllm-serve" "triton-tensorrt-llm")) -}}
{{- fail (printf "inferencePool.modelServerType / inferenceExtension.endpointsServer.modelServerType: expected vllm, sglang, trtllm-serve or triton-tensorrt-llm, got %q" (include "standalone.modelServerType" .)) -}}
{{- end -}}
{{- if not (has $ie.failureMode (list "FailOpen" "FailClose")) -}}
{{- fail (printf "inferenceExtension.failureMode: expected FailOpen or FailClose, got %q" $ie.failureMode) -}}
{{- end -}}
{{- if and (include "standalone.builtinEnvoy" .) (eq $ie.failureMode "FailOpen") (not (regexMatch "^[A-Za-z0-9.-]+:[0-9]+$" .Values.envoy.fallbackService)) -}}
{{- fail (printf "envoy.fallbackService: FailOpen needs the host:port of a Service in front of the model servers, got %q" .Values.envoy.fallbackService) -}}
{{- end -}}
{{- if lt (int $ie.replicas) 1 -}}
{{- fail (printf "inferenceExtension.replicas: expected at least 1, got %v" $ie.replicas) -}}
{{- end -}}
{{- if and (not (hasKey ($ie.pluginsCustomConfig | default dict) $ie.pluginsConfigFile)) (ne $ie.pluginsConfigFile "default-plugins.yaml") -}}
{{- fail (printf "inferenceExtension.pluginsConfigFile: %q is neither default-plugins.yaml nor a key of inferenceExtension.pluginsCustomConfig" $ie.pluginsConfigFile) -}}
{{- end -}}
{{- if and $sidecarValues.enabled (eq (lower ($sidecarValues.proxyType | default "envoy")) "agentgateway") -}}
{{- fail "inferenceExtension.sidecar.proxyType: agentgateway is not supported by this chart (its inferenceRouting policy and generated agentgateway config are not rendered); use envoy" -}}
{{- end -}}
{{- if and $sidecar.enabled $sidecar.image (not $sidecar.name) -}}
{{- fail "inferenceExtension.sidecar: a sidecar with an image needs a name (sidecar.name or the preset's)" -}}
{{- end -}}
{{- if ($ie.latencyPredictor | default dict).enabled -}}
{{- fail "inferenceExtension.latencyPredictor.enabled: GIE's latency predictor (its training and prediction servers and predicted-latency plugins) is not available in pyepp" -}}
{{- end -}}
{{- if and (eq (lower .Values.provider.name) "gke") (include "standalone.metricsAuth" .) -}}
{{- fail "provider.name gke with inferenceExtension.monitoring.prometheus enabled and auth: GIE's Google Managed Prometheus objects are not rendered by this chart (the inferencepool chart renders them); disable monitoring.prometheus.auth or use provider none" -}}
{{- end -}}
{{- end -}}
