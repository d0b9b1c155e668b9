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
{{- if include "inferencepool.standalone" . -}}
epp: {{ include "inferencepool.eppName" . }}
{{- else -}}
inferencepool: {{ include "inferencepool.eppName" . }}
{{- end -}}
{{- end -}}

{{/* GIE's mode label of the picker's objects. */}}
{{- define "inferencepool.modeLabels" -}}
inference.networking.k8s.io/igw-mode: {{ if include "inferencepool.standalone" . }}standalone{{ else }}inferencepool{{ end }}
{{- end -}}

{{/* "true" in GIE's standalone mode: endpointsServer set and createInferencePool false. */}}
{{- define "inferencepool.standalone" -}}
{{- $es := .Values.inferenceExtension.endpointsServer -}}
{{- if and $es (not $es.createInferencePool) }}true{{ end -}}
{{- end -}}

{{/* The model-server type: endpointsServer's in standalone mode, else the pool's. */}}
{{- define "inferencepool.modelServerType" -}}
{{- if include "inferencepool.standalone" . -}}
{{- .Values.inferenceExtension.endpointsServer.modelServerType | default "vllm" -}}
{{- else -}}
{{- .Values.inferencePool.modelServerType | default "vllm" -}}
{{- end -}}
{{- end -}}

{{/* The model-server protocol: endpointsServer's in standalone mode, else the pool's. */}}
{{- define "inferencepool.modelServerProtocol" -}}
{{- if include "inferencepool.standalone" . -}}
{{- .Values.inferenceExtension.endpointsServer.modelServerProtocol | default "http" -}}
{{- else -}}
{{- .Values.inferencePool.modelServerProtocol | default "http" -}}
{{- end -}}
{{- end -}}

{{/* The pool's target port numbers, one per line: targetPortNumber (older GIE charts) when given. */}}
{{- define "inferencepool.targetPortNumbers" -}}
{{- if hasKey .Values.inferencePool "targetPortNumber" -}}
{{- int .Values.inferencePool.targetPortNumber -}}
{{- else -}}
{{- range .Values.inferencePool.targetPorts }}
{{ int .number }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* endpointsServer.targetPorts (a list, a number or "8000,8001") as "8000,8001"; fails when invalid. */}}
{{- define "inferencepool.standaloneTargetPorts" -}}
{{- $value := .Values.inferenceExtension.endpointsServer.targetPorts -}}
{{- if empty $value -}}
{{- fail "inferenceExtension.endpointsServer.targetPorts is required in standalone mode" -}}
{{- end -}}
{{- $raw := list -}}
{{- if kindIs "slice" $value }}{{ $raw = $value }}{{ else }}{{ $raw = splitList "," (toString $value) }}{{ end -}}
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

{{/* The parser of the default configuration: inferencePool.parser, or none (automatic). */}}
{{- define "inferencepool.parser" -}}
{{- .Values.inferencePool.parser | default "" -}}
{{- end -}}

{{- define "inferencepool.image" -}}
{{- $img := .Values.inferenceExtension.image -}}
{{- printf "%s/%s:%s" $img.registry $img.repository ($img.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* "true" when more than one replica runs active-passive: leader election, Lease RBAC, leader-only
readiness. With inferenceExtension.activeActive (pyepp) every replica serves (no leader election). */}}
{{- define "inferencepool.leaderElection" -}}
{{- if and (gt (int .Values.inferenceExtension.replicas) 1) (not .Values.inferenceExtension.activeActive) }}true{{ end -}}
{{- end -}}

{{/* (pyepp) "true" when the active-active replicas share prefix ownership and load (replica sync). */}}
{{- define "inferencepool.replicaSync" -}}
{{- $ie := .Values.inferenceExtension -}}
{{- if and $ie.activeActive ($ie.replicaSync | default dict).enabled }}true{{ end -}}
{{- end -}}

{{/* (pyepp) The Secret holding the replica-sync key (under `key`). */}}
{{- define "inferencepool.replicaSyncSecretName" -}}
{{- .Values.inferenceExtension.replicaSync.keySecretName | default (printf "%s-replica-sync" (include "inferencepool.eppName" .)) -}}
{{- end -}}

{{/* The API group of the InferencePool (for --pool-group and RBAC). */}}
{{- define "inferencepool.group" -}}
{{- (split "/" .Values.inferencePool.apiVersion)._0 -}}
{{- end -}}

{{/* The Secret whose token the picker requires on /metrics (gke: the GMP reader's, as GIE). */}}
{{- define "inferencepool.metricsSecretName" -}}
{{- if eq (lower .Values.provider.name) "gke" -}}
{{- printf "%s-metrics-reader-secret" .Release.Name -}}
{{- else -}}
{{- .Values.inferenceExtension.monitoring.prometheus.auth.secretName -}}
{{- end -}}
{{- end -}}

{{- define "inferencepool.metricsAuth" -}}
{{- $p := .Values.inferenceExtension.monitoring.prometheus -}}
{{- if and $p.enabled $p.auth.enabled }}true{{ end -}}
{{- end -}}

{{/* Fails the render with a message naming the value and what it expects. */}}
{{- define "inferencepool.validate" -}}
{{- $ie := .Values.inferenceExtension -}}
{{- $pool := .Values.inferencePool -}}
{{- if or (empty $pool.modelServers) (not $pool.modelServers.matchLabels) -}}
{{- fail "inferencePool.modelServers.matchLabels is required: the labels of the model-server pods, e.g. --set inferencePool.modelServers.matchLabels.app=vllm-llama3-8b-instruct" -}}
{{- end -}}
{{- if and (hasKey $pool "targetPortNumber") (or (lt (int $pool.targetPortNumber) 1) (gt (int $pool.targetPortNumber) 65535)) -}}
{{- fail (printf "inferencePool.targetPortNumber: expected a port 1-65535, got %v" $pool.targetPortNumber) -}}
{{- end -}}
{{- if ne (include "inferencepool.modelServerProtocol" .) "http" -}}
{{- fail (printf "inferencePool.modelServerProtocol: %q needs GIE's vllmgrpc-parser, which pyepp does not have; use http" (include "inferencepool.modelServerProtocol" .)) -}}
{{- end -}}
{{- if not (has (include "inferencepool.parser" .) (list "" "openai-parser" "passthrough-parser")) -}}
{{- fail (printf "inferencePool.parser: expected openai-parser, passthrough-parser or empty, got %q (pyepp has no other parser)" (include "inferencepool.parser" .)) -}}
{{- end -}}
{{- if include "inferencepool.latencyPredictor.enabled" . -}}
{{- include "inferencepool.latencyPredictor.validate" . -}}
{{- $taken := list (int $ie.extProcPort) 9003 9090 -}}
{{- if include "inferencepool.replicaSync" . }}{{ $taken = append $taken (int $ie.replicaSync.port) }}{{ end -}}
{{- range $port := splitList "," (include "inferencepool.latencyPredictor.ports" .) -}}
{{- if has (int $port) $taken -}}
{{- fail (printf "inferenceExtension.latencyPredictor: port %s is the picker's own (ext_proc, health 9003, metrics 9090, replica sync); move trainingServer.port or predictionServers.startPort" $port) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (include "inferencepool.standalone" .) (not $ie.endpointsServer.endpointSelector) -}}
{{- fail "inferenceExtension.endpointsServer.endpointSelector is required in standalone mode (createInferencePool false)" -}}
{{- end -}}
{{- if and ($ie.sidecar | default dict).enabled (or (not $ie.sidecar.name) (not $ie.sidecar.image)) -}}
{{- fail "inferenceExtension.sidecar: name and image are required when enabled" -}}
{{- end -}}
{{- if or (hasKey $ie.image "hub") (hasKey $ie.image "name") -}}
{{- fail "inferenceExtension.image.hub/name (older GIE charts) are not read: use inferenceExtension.image.registry and .repository" -}}
{{- end -}}
{{- $ports := $pool.targetPorts | default list -}}
{{- if hasKey $pool "targetPortNumber" }}{{ $ports = list (dict "number" $pool.targetPortNumber) }}{{ end -}}
{{- if or (lt (len $ports) 1) (gt (len $ports) 8) -}}
{{- fail (printf "inferencePool.targetPorts: expected 1 to 8 entries of {number: PORT}, got %d" (len $ports)) -}}
{{- end -}}
{{- range $ports -}}
{{- if or (not (kindIs "map" .)) (lt (int (.number | default 0)) 1) (gt (int (.number | default 0)) 65535) -}}
{{- fail (printf "inferencePool.targetPorts: expected entries {number: 1-65535}, got %v" .) -}}
{{- end -}}
{{- end -}}
{{- if not (has (include "inferencepool.modelServerType" .) (list "vllm" "sglang" "trtllm-serve" "triton-tensorrt-llm")) -}}
{{- fail (printf "inferencePool.modelServerType: expected vllm, sglang, trtllm-serve or triton-tensorrt-llm, got %q" (include "inferencepool.modelServerType" .)) -}}
{{- end -}}
{{- if not (has $ie.failureMode (list "FailOpen" "FailClose")) -}}
{{- fail (printf "inferenceExtension.failureMode: expected FailOpen or FailClose, got %q" $ie.failureMode) -}}
{{- end -}}
{{- if lt (int $ie.replicas) 1 -}}
{{- fail (printf "inferenceExtension.replicas: expected at least 1, got %v" $ie.replicas) -}}
{{- end -}}
{{- if and $ie.activeActive (include "inferencepool.replicaSync" .) -}}
{{- $text := index ($ie.pluginsCustomConfig | default dict) $ie.pluginsConfigFile | default "" -}}
{{- if not (or (contains "precise-prefix-cache-" (toString $text)) (contains "prefix-affinity-scorer" (toString $text))) -}}
{{- fail (printf "inferenceExtension.activeActive: the selected EndpointPickerConfig (%s) has neither a prefix-affinity-scorer (whose ownership and load replica sync shares) nor a precise-prefix-cache-scorer or -producer (exact, event-fed prefix state); the replicas' prefix decisions would diverge (docs/deploy.md, \"Active-active replicas\")" $ie.pluginsConfigFile) -}}
{{- end -}}
{{- else if $ie.activeActive -}}
{{- $text := index ($ie.pluginsCustomConfig | default dict) $ie.pluginsConfigFile | default "" -}}
{{- if not (contains "precise-prefix-cache-" (toString $text)) -}}
{{- fail (printf "inferenceExtension.activeActive: the selected EndpointPickerConfig (%s) has no precise-prefix-cache-scorer or -producer; without exact, event-fed prefix state the replicas' decisions diverge (use active-passive: activeActive false, or replicaSync with a prefix-affinity-scorer)" $ie.pluginsConfigFile) -}}
{{- end -}}
{{- if and (contains "prefix-affinity-scorer" (toString $text)) (not (regexMatch "newPrefixPlacement[\"']?[ \t]*:[ \t]*[\"']?hash\\b" (toString $text))) -}}
{{- fail (printf "inferenceExtension.activeActive: the selected EndpointPickerConfig (%s) uses prefix-affinity-scorer without newPrefixPlacement: hash while replicaSync is off; with load placement each replica gives a new prefix its own owner and the hit rate drops (turn inferenceExtension.replicaSync.enabled on, or see docs/deploy.md, \"Active-active replicas\")" $ie.pluginsConfigFile) -}}
{{- end -}}
{{- end -}}
{{- if not (has (lower .Values.provider.name) (list "none" "istio" "gke")) -}}
{{- fail (printf "provider.name: expected none, istio or gke, got %q" .Values.provider.name) -}}
{{- end -}}
{{- if and (not (hasKey ($ie.pluginsCustomConfig | default dict) $ie.pluginsConfigFile)) (ne $ie.pluginsConfigFile "default-plugins.yaml") -}}
{{- fail (printf "inferenceExtension.pluginsConfigFile: %q is neither default-plugins.yaml nor a key of inferenceExtension.pluginsCustomConfig" $ie.pluginsConfigFile) -}}
{{- end -}}
{{- end -}}
