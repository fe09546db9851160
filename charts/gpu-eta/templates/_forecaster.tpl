{{/* The forecaster's pod spec, shared by the Deployment and the CronJob. */}}
{{- define "gpu-eta.forecasterPod" -}}
{{- $f := .Values.forecaster -}}
{{- $auth := $f.prometheusAuth -}}
{{- $access := include "gpu-eta.prometheusAccess" . | fromJson -}}
{{- $authDir := "/var/run/secrets/gpu-eta/prometheus" -}}
{{- if and $access.token (lt (int $auth.tokenExpirationSeconds) 600) -}}
{{- fail (printf "forecaster.prometheusAuth.tokenExpirationSeconds: %v is below 600, the least the API server issues" $auth.tokenExpirationSeconds) -}}
{{- end -}}
{{- if eq $f.mode "cronjob" }}
restartPolicy: Never
{{- end }}
serviceAccountName: gpu-eta-forecaster
automountServiceAccountToken: false
{{- include "gpu-eta.imagePullSecrets" . }}
{{- include "gpu-eta.podScheduling" $f }}
securityContext:
  runAsNonRoot: true
  {{- /* OpenShift's restricted-v2 SCC takes only ids of the namespace's range, and
  assigns them (and the volume's fsGroup) itself when the pod names none */}}
  {{- if not .Values.openshift.enabled }}
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  {{- end }}
  seccompProfile:
    type: RuntimeDefault
containers:
  - name: forecaster
    image: {{ include "gpu-eta.image" $f.image }}
    imagePullPolicy: {{ $f.image.pullPolicy }}
    command: ["gpu-eta-forecaster"]
    args:
      {{- if eq $f.mode "cronjob" }}
      - once
      - --prometheus.url=$(PROMETHEUS_URL)
      - --pushgateway.url=http://gpu-eta-pushgateway:9091
      - --pushgateway.job=gpu-eta-forecaster
      - --history.db=/var/lib/gpu-eta/history.sqlite
      {{- else }}
      - serve
      - --prometheus.url=$(PROMETHEUS_URL)
      - --web.listen-address=:9844
      - --history.db=/var/lib/gpu-eta/history.sqlite
      - --cycle.interval={{ $f.cycleInterval }}
      {{- end }}
      {{- if $access.token }}
      - --prometheus.bearer-token-file={{ $authDir }}/token
      {{- end }}
      {{- if $access.caConfigMap }}
      - --prometheus.ca-file={{ $authDir }}/ca.crt
      {{- end }}
      {{- range include "gpu-eta.gpuResourceNames" . | fromJsonArray }}
      - {{ printf "--pending.gpu-resource=%s" . | quote }}
      {{- end }}
      {{- range $f.extraArgs }}
      - {{ . | quote }}
      {{- end }}
    env:
      - name: PROMETHEUS_URL
        valueFrom:
          configMapKeyRef:
            name: gpu-eta-settings
            key: PROMETHEUS_URL
    {{- if eq $f.mode "deployment" }}
    ports:
      - name: metrics
        containerPort: 9844
        protocol: TCP
    # Ready once the first forecasts are published; alive while the cycle
    # loop runs and makes progress (docs/forecaster.md).
    readinessProbe:
      httpGet:
        path: /readyz
        port: metrics
      periodSeconds: 15
    livenessProbe:
      httpGet:
        path: /healthz
        port: metrics
      initialDelaySeconds: 60
      periodSeconds: 30
      failureThreshold: 4
    {{- end }}
    resources:
      {{- toYaml $f.resources | nindent 6 }}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: ["ALL"]
    volumeMounts:
      - name: history
        mountPath: /var/lib/gpu-eta
      - name: tmp
        mountPath: /tmp
      {{- if or $access.token $access.caConfigMap }}
      - name: prometheus-auth
        mountPath: {{ $authDir }}
        readOnly: true
      {{- end }}
volumes:
  - name: history
    persistentVolumeClaim:
      claimName: gpu-eta-forecaster-history
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
  {{- if or $access.token $access.caConfigMap }}
  # The pod's own token stays unmounted (automountServiceAccountToken: false): this
  # one is for Prometheus only, renewed by the kubelet before it expires and re-read
  # by the forecaster (docs/deploy.md, "Prometheus behind authentication").
  - name: prometheus-auth
    projected:
      sources:
        {{- if $access.token }}
        - serviceAccountToken:
            path: token
            expirationSeconds: {{ int $auth.tokenExpirationSeconds }}
            {{- with $auth.tokenAudience }}
            audience: {{ . | quote }}
            {{- end }}
        {{- end }}
        {{- if $access.caConfigMap }}
        - configMap:
            name: {{ $access.caConfigMap | quote }}
            items:
              - key: {{ $access.caConfigMapKey | quote }}
                path: ca.crt
        {{- end }}
  {{- end }}
{{- end -}}
