{{- /*
GIE's latency predictor (inferenceExtension.latencyPredictor.enabled), rendered as GIE's chart renders it
(GIE commit 1748e829d1161147aaf35e76699ec86fd88406d2, the last with the EPP: config/charts/epplib,
templates _latency-predictor.tpl and _config.yaml): a training server and predictionServers.count
prediction servers as containers of the picker's pod, each with an emptyDir for its models and a
ConfigMap of its `config` values; the picker gets PREDICTION_SERVER_URL (the prediction servers on
localhost, comma-separated), TRAINING_SERVER_URL and the eppEnv values, which turn on
predicted-latency-producer's sidecar mode (docs/scheduler-plugins.md, "Predicted latency"); and the
default plugins configuration becomes GIE's predicted-latency one.
*/ -}}
{{- define "standalone.latencyPredictor.enabled" -}}
{{- if (.Values.inferenceExtension.latencyPredictor | default dict).enabled }}true{{ end -}}
{{- end -}}

{{- define "standalone.latencyPredictor.ports" -}}
{{- $lp := .Values.inferenceExtension.latencyPredictor -}}
{{- $ports := list (int $lp.trainingServer.port) -}}
{{- range $i := until (int $lp.predictionServers.count) }}{{ $ports = append $ports (add (int $lp.predictionServers.startPort) $i) }}{{ end -}}
{{- join "," $ports -}}
{{- end -}}

{{- define "standalone.latencyPredictor.validate" -}}
{{- $lp := .Values.inferenceExtension.latencyPredictor -}}
{{- range $server := list "trainingServer" "predictionServers" -}}
{{- $s := index $lp $server | default dict -}}
{{- $image := $s.image | default dict -}}
{{- if or (not $image.registry) (not $image.repository) (not (toString ($image.tag | default ""))) -}}
{{- fail (printf "inferenceExtension.latencyPredictor.%s.image: registry, repository and tag are required when latencyPredictor is enabled" $server) -}}
{{- end -}}
{{- end -}}
{{- if not $lp.trainingServer.port -}}
{{- fail "inferenceExtension.latencyPredictor.trainingServer.port is required when latencyPredictor is enabled" -}}
{{- end -}}
{{- if or (lt (int ($lp.predictionServers.count | default 0)) 1) (not $lp.predictionServers.startPort) -}}
{{- fail "inferenceExtension.latencyPredictor.predictionServers: count (at least 1) and startPort are required when latencyPredictor is enabled" -}}
{{- end -}}
{{- if gt (add (int $lp.predictionServers.startPort) (int $lp.predictionServers.count) -1) 65535 -}}
{{- fail (printf "inferenceExtension.latencyPredictor.predictionServers: startPort %v + count %v goes past port 65535" $lp.predictionServers.startPort $lp.predictionServers.count) -}}
{{- end -}}
{{- range $probe := list "livenessProbe" "readinessProbe" -}}
{{- if not ((index $lp.predictionServers $probe | default dict).httpGet | default dict).path -}}
{{- fail (printf "inferenceExtension.latencyPredictor.predictionServers.%s.httpGet.path is required when latencyPredictor is enabled (the port is each server's own)" $probe) -}}
{{- end -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $port := splitList "," (include "standalone.latencyPredictor.ports" .) -}}
{{- if hasKey $seen $port -}}
{{- fail (printf "inferenceExtension.latencyPredictor: port %s is used twice (trainingServer.port and the predictionServers' startPort..startPort+count-1 must differ)" $port) -}}
{{- end -}}
{{- $_ := set $seen $port true -}}
{{- end -}}
{{- end -}}

{{- define "standalone.latencyPredictor.env" -}}
{{- $lp := .Values.inferenceExtension.latencyPredictor -}}
{{- $urls := list -}}
{{- range $i := until (int $lp.predictionServers.count) }}{{ $urls = append $urls (printf "http://localhost:%d" (add (int $lp.predictionServers.startPort) $i)) }}{{ end }}
- name: PREDICTION_SERVER_URL
  value: {{ join "," $urls | quote }}
- name: TRAINING_SERVER_URL
  value: {{ printf "http://localhost:%d" (int $lp.trainingServer.port) | quote }}
{{- range $key, $value := $lp.eppEnv }}
- name: {{ $key }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{- define "standalone.latencyPredictor.containers" -}}
{{- $lp := .Values.inferenceExtension.latencyPredictor -}}
{{- $name := include "standalone.name" . -}}
{{- $t := $lp.trainingServer -}}
- name: training-server
  image: {{ printf "%s/%s:%s" $t.image.registry $t.image.repository (toString $t.image.tag) }}
  imagePullPolicy: {{ $t.image.pullPolicy | default "IfNotPresent" }}
  ports:
  - name: training-port
    containerPort: {{ $t.port }}
  {{- range $field := list "livenessProbe" "readinessProbe" "resources" }}
  {{- with index $t $field }}
  {{ $field }}:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- end }}
  envFrom:
  - configMapRef:
      name: {{ $name }}-latency-predictor-training
  env:
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: SERVER_TYPE
    value: training
  volumeMounts:
  - name: training-server-storage
    mountPath: /models
{{- $p := $lp.predictionServers }}
{{- range $i := until (int $p.count) }}
{{- $port := add (int $p.startPort) $i }}
- name: prediction-server-{{ add $i 1 }}
  image: {{ printf "%s/%s:%s" $p.image.registry $p.image.repository (toString $p.image.tag) }}
  imagePullPolicy: {{ $p.image.pullPolicy | default "IfNotPresent" }}
  command: [uvicorn]
  args: [prediction_server:app, --host, 0.0.0.0, --port, {{ $port | quote }}]
  ports:
  - name: predict-port-{{ add $i 1 }}
    containerPort: {{ $port }}
  {{- range $probe := list "livenessProbe" "readinessProbe" }}
  {{- $pr := index $p $probe }}
  {{ $probe }}:
    httpGet:
      path: {{ $pr.httpGet.path }}
      port: {{ $port }}
    {{- range $k := list "initialDelaySeconds" "periodSeconds" "timeoutSeconds" "failureThreshold" }}
    {{- with index $pr $k }}
    {{ $k }}: {{ . }}
    {{- end }}
    {{- end }}
  {{- end }}
  {{- with $p.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  envFrom:
  - configMapRef:
      name: {{ $name }}-latency-predictor-prediction
  env:
  - name: PREDICT_PORT
    value: {{ $port | quote }}
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: SERVER_TYPE
    value: prediction-{{ add $i 1 }}
  - name: TRAINING_SERVER_URL
    value: {{ printf "http://localhost:%d" (int $lp.trainingServer.port) | quote }}
  volumeMounts:
  - name: prediction-server-{{ add $i 1 }}-storage
    mountPath: /server_models
{{- end }}
{{- end -}}

{{- define "standalone.latencyPredictor.volumes" -}}
{{- $lp := .Values.inferenceExtension.latencyPredictor -}}
- name: training-server-storage
  emptyDir:
    sizeLimit: {{ $lp.trainingServer.volumeSize | default "20Gi" }}
{{- range $i := until (int $lp.predictionServers.count) }}
- name: prediction-server-{{ add $i 1 }}-storage
  emptyDir:
    sizeLimit: {{ $lp.predictionServers.volumeSize | default "10Gi" }}
{{- end }}
{{- end -}}

{{- define "standalone.latencyPredictor.configMaps" -}}
{{- $lp := .Values.inferenceExtension.latencyPredictor -}}
{{- $name := include "standalone.name" . -}}
{{- range $server := list (list "training" $lp.trainingServer) (list "prediction" $lp.predictionServers) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $name }}-latency-predictor-{{ index $server 0 }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "standalone.labels" $ | nindent 4 }}
data:
  {{- range $key, $value := (index $server 1).config | default dict }}
  {{ $key }}: {{ $value | toString | quote }}
  {{- end }}
{{- end }}
{{- end -}}

{{- /* GIE's default plugins with the latency predictor: the predicted-latency producer, a strict (0.99)
prefix affinity gate before the SLO tier filter and a loose (0.80) one after it, latency-scorer and
weighted-random-picker; latency-slo-admitter rejects sheddable requests no endpoint can serve in time. */ -}}
{{- define "standalone.latencyPredictor.plugins" -}}
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
- name: strict-affinity-filter
  type: prefix-cache-affinity-filter
  parameters:
    affinityThreshold: 0.99
- name: loose-affinity-filter
  type: prefix-cache-affinity-filter
  parameters:
    affinityThreshold: 0.80
- type: slo-headroom-tier-filter
- type: latency-scorer
- type: weighted-random-picker
- type: latency-slo-admitter
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: predicted-latency-producer
  - pluginRef: strict-affinity-filter
  - pluginRef: slo-headroom-tier-filter
  - pluginRef: loose-affinity-filter
  - pluginRef: latency-scorer
  - pluginRef: weighted-random-picker
{{- end -}}
