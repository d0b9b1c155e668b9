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

{{/* The proxy type of the sidecar: envoy (default) or agentgateway. */}}
{{- define "standalone.proxyType" -}}
{{- lower ((.Values.inferenceExtension.sidecar | default dict).proxyType | default "envoy") -}}
{{- end -}}

{{/* The proxy sidecar as GIE resolves it: the preset of proxyType merged with the sidecar.* overrides;
for agentgateway, the first port becomes {containerPort: <listener port>, name: http}. Without an image
(envoy) it is pyepp's own Envoy sidecar (envoy.*). Rendered as YAML; read with fromYaml. */}}
{{- define "standalone.sidecar" -}}
{{- $sidecar := deepCopy (.Values.inferenceExtension.sidecar | default dict) -}}
{{- $proxyType := include "standalone.proxyType" . -}}
{{- $preset := deepCopy ((index ($sidecar.presets | default dict) $proxyType) | default dict) -}}
{{- $resolved := mergeOverwrite $preset (omit $sidecar "presets" "proxyType" "agentgateway") -}}
{{- if and (eq $proxyType "agentgateway") $resolved.enabled -}}
{{- $ports := list (dict "containerPort" (include "standalone.proxyListenerPort" . | int) "name" "http") -}}
{{- range $index, $port := ($resolved.ports | default list) }}{{ if gt $index 0 }}{{ $ports = append $ports $port }}{{ end }}{{ end -}}
{{- $_ := set $resolved "ports" $ports -}}
{{- end -}}
{{- toYaml $resolved -}}
{{- end -}}

{{/* "true" when pyepp's built-in Envoy sidecar runs (sidecar enabled, envoy, no preset container). */}}
{{- define "standalone.builtinEnvoy" -}}
{{- $sidecar := .Values.inferenceExtension.sidecar | default dict -}}
{{- $preset := (index ($sidecar.presets | default dict) "envoy") | default dict -}}
{{- if and $sidecar.enabled (eq (include "standalone.proxyType" .) "envoy") (not $sidecar.image) (not $preset.image) }}true{{ end -}}
{{- end -}}

{{/* agentgateway: the proxy's listener port, the Service port named http of extraServicePorts (as GIE). */}}
{{- define "standalone.proxyListenerPort" -}}
{{- $found := list -}}
{{- range $index, $port := (.Values.inferenceExtension.extraServicePorts | default list) -}}
{{- if eq (toString (index $port "name")) "http" }}{{ $found = append $found (dict "index" $index "port" $port) }}{{ end -}}
{{- end -}}
{{- if ne (len $found) 1 -}}
{{- fail "inferenceExtension.extraServicePorts must contain exactly one port named \"http\" when sidecar.proxyType=agentgateway (the proxy's listener port)" -}}
{{- end -}}
{{- $entry := first $found -}}
{{- $text := trim (toString (index $entry.port "port" | default "")) -}}
{{- if or (not (regexMatch "^[0-9]+$" $text)) (lt (int $text) 1) (gt (int $text) 65535) -}}
{{- fail (printf "inferenceExtension.extraServicePorts[name=http].port must be a port 1-65535 when sidecar.proxyType=agentgateway, got %q" $text) -}}
{{- end -}}
{{- if hasKey $entry.port "targetPort" -}}
{{- $target := trim (toString $entry.port.targetPort) -}}
{{- if and (ne $target $text) (ne $target "http") -}}
{{- fail (printf "inferenceExtension.extraServicePorts[name=http].targetPort must be omitted, %q or \"http\" when sidecar.proxyType=agentgateway, got %q" $text $target) -}}
{{- end -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/* agentgateway: the logical backend, the app=... value of the endpoint selector, else the release. */}}
{{- define "standalone.agentgatewayBackend" -}}
{{- $app := "" -}}
{{- range $raw := splitList "," (include "standalone.endpointSelector" .) -}}
{{- $kv := splitList "=" (trim $raw) -}}
{{- if and (eq (len $kv) 2) (eq (trim (index $kv 0)) "app") }}{{ $app = trim (index $kv 1) }}{{ end -}}
{{- end -}}
{{- $app | default .Release.Name -}}
{{- end -}}

{{/* agentgateway's config.yaml, as GIE's chart generates it: one HTTP listener routing every path to the
logical backend through the picker (plaintext gRPC on 127.0.0.1:extProcPort, destination passthrough). */}}
{{- define "standalone.agentgatewayConfig" -}}
{{- $name := include "standalone.agentgatewayBackend" . -}}
{{- $ports := splitList "," (include "standalone.targetPorts" .) -}}
config:
  statsAddr: "0.0.0.0:15020"
  readinessAddr: "0.0.0.0:15021"
binds:
- port: {{ include "standalone.proxyListenerPort" . }}
  listeners:
  - name: default
    protocol: HTTP
    routes:
    - name: standalone-epp
      matches:
      - path:
          pathPrefix: /
      backends:
      - service:
          name: {{ printf "%s/%s" .Release.Namespace $name | quote }}
          port: {{ first $ports }}
        policies:
          inferenceRouting:
            endpointPicker:
              host: {{ printf "127.0.0.1:%v" .Values.inferenceExtension.extProcPort | quote }}
            destinationMode: passthrough
services:
- name: {{ $name | quote }}
  namespace: {{ .Release.Namespace | quote }}
  hostname: {{ $name | quote }}
  vips: []
  ports:
    {{- range $ports }}
    {{ . }}: {{ . }}
    {{- end }}
{{- end -}}

{{/* The Secret whose token the picker requires on /metrics (gke: the GMP reader's, as GIE). */}}
{{- define "standalone.metricsSecretName" -}}
{{- if eq (lower .Values.provider.name) "gke" -}}
{{- printf "%s-metrics-reader-secret" .Release.Name -}}
{{- else -}}
{{- .Values.inferenceExtension.monitoring.prometheus.auth.secretName -}}
{{- end -}}
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
{{- if and $sidecarValues.enabled (eq (include "standalone.proxyType" .) "agentgateway") -}}
{{- if include "standalone.poolMode" . -}}
{{- fail "inferenceExtension.endpointsServer.createInferencePool=false is required when sidecar.proxyType=agentgateway: agentgateway routes to the picker's endpoints by a logical service, not an InferencePool" -}}
{{- end -}}
{{- if hasKey $sidecarValues "agentgateway" -}}
{{- fail "inferenceExtension.sidecar.agentgateway is not read (as in GIE's chart): the agentgateway backend comes from the endpointsServer settings" -}}
{{- end -}}
{{- if not $sidecar.image -}}
{{- fail "inferenceExtension.sidecar.proxyType agentgateway needs a container: sidecar.presets.agentgateway (or sidecar.image and sidecar.name)" -}}
{{- end -}}
{{- $flags := $ie.flags | default dict -}}
{{- if and (hasKey $flags "secure-serving") (ne (toString (index $flags "secure-serving")) "false") -}}
{{- fail "inferenceExtension.flags.secure-serving must be false when sidecar.proxyType=agentgateway: agentgateway calls the picker in plaintext gRPC over localhost" -}}
{{- end -}}
{{- end -}}
{{- if and $sidecar.enabled $sidecar.image (not $sidecar.name) -}}
{{- fail "inferenceExtension.sidecar: a sidecar with an image needs a name (sidecar.name or the preset's)" -}}
{{- end -}}
{{- if include "standalone.latencyPredictor.enabled" . -}}
{{- include "standalone.latencyPredictor.validate" . -}}
{{- $taken := list 9002 9003 9090 -}}
{{- if include "standalone.builtinEnvoy" . }}{{ $taken = append $taken (int .Values.envoy.port) }}{{ end -}}
{{- range $port := splitList "," (include "standalone.latencyPredictor.ports" .) -}}
{{- if has (int $port) $taken -}}
{{- fail (printf "inferenceExtension.latencyPredictor: port %s is taken in the pod (the picker's 9002, 9003, 9090 or Envoy's envoy.port); move trainingServer.port or predictionServers.startPort" $port) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
