{{/*
Object names are fixed (gpu-eta-exporter, gpu-eta-forecaster, ...), not derived
from the release name: the alert rules and dashboards match the job labels
Prometheus derives from these Service names, and the kustomize manifests use the
same names (tests/ops compares the two renderings). One release per namespace.
*/}}

{{/* Labels on every object's metadata: the kustomize ones plus Helm's own. */}}
{{- define "gpu-eta.labels" -}}
app.kubernetes.io/part-of: gpu-eta
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpu-eta.image" -}}
{{ .repository }}:{{ .tag }}
{{- end -}}

{{- define "gpu-eta.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A pod's nodeSelector, affinity and tolerations from one part's values (the forecaster's,
the Pushgateway's), each only when set. */}}
{{- define "gpu-eta.podScheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* NetworkPolicy peers for the scraper's namespaces; on OpenShift also the platform
Prometheus' namespace, openshift-monitoring. */}}
{{/* Egress to the cluster's DNS (CoreDNS, labelled k8s-app: kube-dns in kube-system). */}}
{{- define "gpu-eta.dnsEgress" -}}
- ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
  to:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: kube-system
      podSelector:
        matchLabels:
          k8s-app: kube-dns
    - ipBlock:
        cidr: 169.254.20.10/32  # NodeLocal DNSCache, where kubelet's clusterDNS is it
{{- end -}}

{{/*
The forecaster's egress rule to the Prometheus its URL names, as JSON ({} when the
policy for port 9090 in the scraper's namespaces already allows it): the URL's port
(the scheme's when it names none; networkPolicy.egress.prometheusPorts where a
Service maps its port to another on its pods, since a policy sees the pod's port),
to the URL's namespace for a Service name (<name>.<namespace>.svc...), the release's
namespace for a bare name, the address for an IP, any address for any other name
(outside the cluster, or a short <name>.<namespace> the policy cannot tell apart).
*/}}
{{- define "gpu-eta.prometheusEgress" -}}
{{- $url := (include "gpu-eta.prometheusAccess" . | fromJson).url -}}
{{- $u := urlParse $url -}}
{{- $host := regexReplaceAll "%.*$" ($u.hostname | lower | trimSuffix ".") "" -}}
{{- $port := regexFind "[0-9]+$" (regexFind ":[0-9]+$" $u.host) -}}
{{- if not $port }}{{ $port = ternary "443" "80" (eq $u.scheme "https") }}{{ end -}}
{{- if or (lt (int $port) 1) (gt (int $port) 65535) -}}
{{- fail (printf "forecaster.prometheusUrl %q: port %s is not a port (1-65535)" $url $port) -}}
{{- end -}}
{{- $ports := list (int $port) -}}
{{- with .Values.networkPolicy.egress.prometheusPorts }}{{ $ports = . }}{{ end -}}
{{- $to := list -}}
{{- $ns := "" -}}
{{- if regexMatch "^[0-9]+([.][0-9]+){3}$" $host -}}
{{- $to = list (dict "ipBlock" (dict "cidr" (printf "%s/32" $host))) -}}
{{- else if contains ":" $host -}}
{{- $to = list (dict "ipBlock" (dict "cidr" (printf "%s/128" $host))) -}}
{{- else if regexMatch "^[^.]+[.][^.]+[.]svc([.]|$)" $host -}}
{{- $ns = index (splitList "." $host) 1 -}}
{{- else if not (contains "." $host) -}}
{{- $ns = .Release.Namespace -}}
{{- end -}}
{{- if $ns }}{{ $to = list (dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" $ns))) }}{{ end -}}
{{- $covered := false -}}
{{- if and $ns (eq (toJson $ports) "[9090]") -}}
{{- range .Values.networkPolicy.scraperNamespaceSelectors -}}
{{- if eq (toJson .) (toJson (dict "matchLabels" (dict "kubernetes.io/metadata.name" $ns))) }}{{ $covered = true }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $rule := dict "ports" (list) -}}
{{- range $ports }}{{ $_ := set $rule "ports" (append $rule.ports (dict "port" (int .) "protocol" "TCP")) }}{{ end -}}
{{- if $to }}{{ $_ := set $rule "to" $to }}{{ end -}}
{{- ternary (dict) $rule $covered | toJson -}}
{{- end -}}

{{- define "gpu-eta.scraperPeers" -}}
{{- range .Values.networkPolicy.scraperNamespaceSelectors }}
- namespaceSelector:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- if .Values.openshift.enabled }}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: openshift-monitoring
{{- end }}
{{- end -}}

{{/*
The kube-state-metrics regex of the GPU resources: the built-in one, as the rules and
dashboards write it (common/gpu_resources.py KSM_GPU_RESOURCES; tests/ops hold them
equal), with each of .Values.gpuResources sanitised as KSM sanitises a resource
(every character outside [a-zA-Z0-9_] becomes "_") added, as ksm_resource_regex does.
*/}}
{{- define "gpu-eta.builtinGpuResources" -}}
nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+
{{- end -}}
{{- define "gpu-eta.gpuResourceRegex" -}}
{{- $labels := list -}}
{{- $builtin := printf "^(%s)$" (include "gpu-eta.builtinGpuResources" .) -}}
{{- range include "gpu-eta.gpuResourceNames" . | fromJsonArray -}}
{{- $label := regexReplaceAll "[^a-zA-Z0-9_]" (toString .) "_" -}}
{{- /* a name the built-in regex matches (a MIG profile) is not written again, as
common.gpu_resources.ksm_resource_regex leaves it out */ -}}
{{- if not (regexMatch $builtin $label) -}}
{{- $labels = append $labels $label -}}
{{- end -}}
{{- end -}}
{{- prepend (uniq $labels) (include "gpu-eta.builtinGpuResources" .) | join "|" -}}
{{- end -}}

{{/*
A file of rules or a dashboard with the built-in GPU resource regex replaced by
gpu-eta.gpuResourceRegex (.path: the file under the chart, .root: the top context).
*/}}
{{- define "gpu-eta.withGpuResources" -}}
{{- .root.Files.Get .path | replace (include "gpu-eta.builtinGpuResources" .root) (include "gpu-eta.gpuResourceRegex" .root) -}}
{{- end -}}

{{- define "gpu-eta.validate" -}}
{{- if not (has .Values.forecaster.mode (list "deployment" "cronjob")) -}}
{{- fail (printf "forecaster.mode must be deployment or cronjob, not %q" .Values.forecaster.mode) -}}
{{- end -}}
{{- if not (has .Values.exporter.deviceListStrategy (list "envvar" "volume-mounts")) -}}
{{- fail (printf "exporter.deviceListStrategy must be envvar or volume-mounts, not %q" .Values.exporter.deviceListStrategy) -}}
{{- end -}}
{{- /* an empty peer list renders `from: null`: every source admitted to the port */ -}}
{{- if and .Values.networkPolicy.enabled (empty .Values.networkPolicy.scraperNamespaceSelectors) -}}
{{- fail "networkPolicy.scraperNamespaceSelectors is empty: the NetworkPolicy would admit every source to the metrics port; list the scrapers' namespaces, or set networkPolicy.enabled=false" -}}
{{- end -}}
{{- /* an empty port list opens every port */ -}}
{{- if .Values.networkPolicy.egress.enabled -}}
{{- if not (kindIs "slice" .Values.networkPolicy.egress.apiServerPorts) -}}
{{- fail (printf "networkPolicy.egress.apiServerPorts must be a list of ports, not %v (--set 'networkPolicy.egress.apiServerPorts={443,16443}')" .Values.networkPolicy.egress.apiServerPorts) -}}
{{- end -}}
{{- if empty .Values.networkPolicy.egress.apiServerPorts -}}
{{- fail "networkPolicy.egress.apiServerPorts is empty: the exporter's egress rule would open every port; list the API server's (kubectl get endpointslice -n default -l kubernetes.io/service-name=kubernetes)" -}}
{{- end -}}
{{- range .Values.networkPolicy.egress.apiServerPorts -}}
{{- /* no leading zero: Helm's int reads "0443" as octal (291) */ -}}
{{- if or (not (regexMatch "^[1-9][0-9]*$" (toString .))) (gt (int .) 65535) -}}
{{- fail (printf "networkPolicy.egress.apiServerPorts: %v is not a port (1-65535)" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* and `to: null` in the forecaster's egress: Prometheus' port at any address */ -}}
{{- if and .Values.networkPolicy.egress.enabled (empty .Values.networkPolicy.scraperNamespaceSelectors) -}}
{{- fail "networkPolicy.scraperNamespaceSelectors is empty: the forecaster's egress policy would let it reach port 9090 at any address; list the namespaces where Prometheus runs" -}}
{{- end -}}
{{- /* the exporter's --collection.interval and --collection.timeout as its parser
(exporter/config.py parse_duration, validate) takes them: one number and one unit of
ms, s, m, h (none: seconds), above 0, the interval at least 50ms; checked here, as the
GPU resources below, so that a value it refuses fails the install instead of
crash-looping every exporter ("1m30s", "1d": Prometheus durations it does not read) */ -}}
{{- $durations := dict -}}
{{- range $key, $min := dict "collectionInterval" 0.05 "collectionTimeout" 0.0 -}}
{{- $text := toString (index $.Values.exporter $key) -}}
{{- $seconds := 0.0 -}}
{{- if regexMatch "^\\s*[0-9]+([.][0-9]+)?\\s*(ms|s|m|h)?\\s*$" $text -}}
{{- $unit := regexFind "(ms|s|m|h)$" (trim $text) | default "s" -}}
{{- $seconds = mulf (regexFind "[0-9]+([.][0-9]+)?" $text | float64) (get (dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0) $unit) -}}
{{- end -}}
{{- if or (not (gt $seconds 0.0)) (lt $seconds $min) -}}
{{- fail (printf "exporter.%s: %q is no duration the exporter takes: a number and one unit of ms, s, m or h, like 15s or 500ms, %s" $key $text (ternary "at least 50ms" "above 0" (gt $min 0.0))) -}}
{{- end -}}
{{- $_ := set $durations $key $seconds -}}
{{- end -}}
{{- /* the alert thresholds are fixed numbers (docs/alerts.md, "Thresholds"), not
derived from these values: the rules are one file for every install (kustomize,
ConfigMap, PrometheusRule) and its promtool tests hold those numbers. So an interval
they cannot follow fails the install. A healthy loop's snapshot is at most an interval
and a round's timeout old: above snapshot_stale_seconds (300) together it would read
as wedged. */ -}}
{{- $age := addf $durations.collectionInterval $durations.collectionTimeout -}}
{{- if gt $age 300.0 -}}
{{- fail (printf "exporter.collectionInterval %q and exporter.collectionTimeout %q add up to %gs, above 300s: a healthy exporter would serve snapshots older than GpuEtaExporterSnapshotStale's snapshot_stale_seconds (300s, docs/alerts.md); keep the two at most 300s together" (toString .Values.exporter.collectionInterval) (toString .Values.exporter.collectionTimeout) $age) -}}
{{- end -}}
{{- include "gpu-eta.validateSchedule" . -}}
{{- /* serve's --cycle.interval: a float as Python reads one (forecaster/main.py,
type=float), finite, above 0 and at most ten years (forecaster/config.py
MAX_WINDOW_SECONDS); a CronJob's `once` takes none */ -}}
{{- if eq .Values.forecaster.mode "deployment" -}}
{{- $text := toString .Values.forecaster.cycleInterval | trim -}}
{{- $digits := "[0-9](_?[0-9])*" -}}
{{- $number := printf "^[+-]?(%s([.](%s)?)?|[.]%s)([eE][+-]?%s)?$" $digits $digits $digits $digits -}}
{{- $seconds := 0.0 -}}
{{- if regexMatch $number $text }}{{ $seconds = $text | replace "_" "" | float64 }}{{ end -}}
{{- if or (not (gt $seconds 0.0)) (gt $seconds 315360000.0) -}}
{{- fail (printf "forecaster.cycleInterval: %q is no --cycle.interval serve takes: a number of seconds above 0 and at most ten years, like 60 (no unit)" $text) -}}
{{- end -}}
{{- if gt $seconds 300.0 -}}
{{- fail (printf "forecaster.cycleInterval: %q seconds is above 300: forecasts that far apart, with a cycle's run and a scrape, grow older than the 900s after which GpuEtaForecasterStale fires and GpuEtaPodPendingNoStart reads a prediction as none (docs/alerts.md); at most 300" $text) -}}
{{- end -}}
{{- end -}}
{{- /* the rules of common/gpu_resources.py parse_gpu_resources (at most 32 distinct
names, each an extended resource name as common/k8s_names.is_extended_resource_name
and Kubernetes' IsExtendedResourceName have it), checked here so that a typo fails the
install instead of crash-looping the exporter and the forecaster */ -}}
{{- $names := include "gpu-eta.gpuResourceNames" . | fromJsonArray -}}
{{- if gt (len (uniq $names)) 32 -}}
{{- fail (printf "gpuResources: at most 32 resource names, got %d" (len (uniq $names))) -}}
{{- end -}}
{{- range $names -}}
{{- $parts := splitList "/" (printf "requests.%s" .) -}}
{{- $subdomain := "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" -}}
{{- if or (ne (len $parts) 2) (gt (len (first $parts)) 253) (not (regexMatch $subdomain (first $parts))) (not (regexMatch "^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$" (last $parts))) (contains "kubernetes.io/" .) (hasPrefix "requests." .) -}}
{{- fail (printf "gpuResources: %q is not a Kubernetes extended resource name (DOMAIN/NAME outside kubernetes.io, e.g. nvidia.com/a100-shared)" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
cronjob mode: forecaster.schedule runs `once` at most 5 minutes apart, whatever the
hour or day. The thresholds are fixed (gpu-eta.validate says why): a forecast older
than 900s is stale to GpuEtaForecasterStale (forecaster_stale_seconds) and none to
GpuEtaPodPendingNoStart (pending_prediction_past_seconds). Runs 5 minutes apart, each
stopped after 240s, plus a 2-minute scrape stay under it with room for one failed run;
an hourly schedule whose every run succeeded fired GpuEtaForecasterStale. Read: five
fields; the minute field's "*", "N", "A-B", each with an optional "/STEP", comma
separated (the largest gap between the minutes it names, around the hour, is the
period); every other field "*" (or "?"): any other hour, day or month field leaves
hours or days without a run. A macro (@hourly, @daily, ...) runs an hour apart or more.
*/}}
{{- define "gpu-eta.validateSchedule" -}}
{{- if eq .Values.forecaster.mode "cronjob" -}}
{{- $schedule := toString .Values.forecaster.schedule | trim -}}
{{- $why := "runs must be at most 5 minutes apart: a forecast older than 900s fires GpuEtaForecasterStale and GpuEtaPodPendingNoStart (docs/alerts.md)" -}}
{{- if hasPrefix "@" $schedule -}}
{{- fail (printf "forecaster.schedule: %q runs the forecaster an hour apart or more; %s" $schedule $why) -}}
{{- end -}}
{{- $fields := splitList " " (regexReplaceAll "\\s+" $schedule " ") -}}
{{- if ne (len $fields) 5 -}}
{{- fail (printf "forecaster.schedule: %q is no cron schedule of five fields (minute hour day-of-month month day-of-week) this chart can check; %s" $schedule $why) -}}
{{- end -}}
{{- range $i, $name := list "hour" "day of the month" "month" "day of the week" -}}
{{- $field := index $fields (add1 $i) -}}
{{- if not (has $field (list "*" "?")) -}}
{{- fail (printf "forecaster.schedule: %q restricts the %s (%q), leaving hours or days without a run; use *: %s" $schedule $name $field $why) -}}
{{- end -}}
{{- end -}}
{{- $minutes := dict -}}
{{- range $part := splitList "," (first $fields) -}}
{{- if not (regexMatch "^([*]|[0-9]+(-[0-9]+)?)(/[0-9]+)?$" $part) -}}
{{- fail (printf "forecaster.schedule: %q: the minute field's %q is none of *, N, A-B (each with an optional /STEP) this chart can check; %s" $schedule $part $why) -}}
{{- end -}}
{{- $span := regexReplaceAll "/.*$" $part "" -}}
{{- $step := 1 -}}
{{- if contains "/" $part }}{{ $step = regexReplaceAll "^.*/" $part "" | atoi }}{{ end -}}
{{- $lo := 0 -}}
{{- $hi := 59 -}}
{{- if ne $span "*" -}}
{{- $lo = regexReplaceAll "-.*$" $span "" | atoi -}}
{{- $hi = ternary (regexReplaceAll "^.*-" $span "" | atoi) (ternary 59 $lo (contains "/" $part)) (contains "-" $span) -}}
{{- end -}}
{{- if or (lt $step 1) (gt $hi 59) (gt $lo $hi) -}}
{{- fail (printf "forecaster.schedule: %q: the minute field's %q names no minutes of 0-59; %s" $schedule $part $why) -}}
{{- end -}}
{{- range $m := until 60 -}}
{{- if and (ge $m $lo) (le $m $hi) (eq 0 (mod (sub $m $lo) $step)) }}{{ $_ := set $minutes (toString $m) true }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $first := -1 -}}
{{- $last := -1 -}}
{{- $gap := 0 -}}
{{- range $m := until 60 -}}
{{- if hasKey $minutes (toString $m) -}}
{{- if ge $last 0 }}{{ $gap = max $gap (sub $m $last) }}{{ else }}{{ $first = $m }}{{ end -}}
{{- $last = $m -}}
{{- end -}}
{{- end -}}
{{- $gap = max $gap (sub (add $first 60) $last) -}}
{{- if gt $gap 5 -}}
{{- fail (printf "forecaster.schedule: %q runs the forecaster up to %d minutes apart; %s" $schedule $gap $why) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
.Values.gpuResources as a JSON list of names (fromJsonArray): a list as given, one
name as a list of it (`--set gpuResources=nvidia.com/a100-shared` makes a string, and
the programs take one name too), none for null or "".
*/}}
{{- define "gpu-eta.gpuResourceNames" -}}
{{- $v := .Values.gpuResources -}}
{{- if kindIs "string" $v -}}
{{- if $v -}}{{- list $v | toJson -}}{{- else -}}[]{{- end -}}
{{- else if or (kindIs "slice" $v) (kindIs "invalid" $v) -}}
{{- $out := list -}}
{{- range $v -}}{{- $out = append $out (toString .) -}}{{- end -}}
{{- $out | toJson -}}
{{- else -}}
{{- fail (printf "gpuResources must be a list of resource names (or one name), not %s" (kindOf $v)) -}}
{{- end -}}
{{- end -}}

{{/*
A ServiceMonitor's scrape interval: .set (serviceMonitor.*Interval) when given, else
.from, the interval of what it scrapes (exporter.collectionInterval,
forecaster.cycleInterval): scraping faster than that stores the same values again,
slower hides what changed between scrapes, so by default one value sets both. A bare
number is seconds, as the exporter's and forecaster's flags read it. Fails the render
on a value Prometheus does not take ("1.5s", "15 s"), naming the key to set.

The interval taken from .from is at most 2m: Prometheus answers a series only within
5 minutes (its lookback) of its last sample, so a forecaster cycling every 10 minutes
and scraped as often had every forecast absent half the time (GpuEtaDeadlineOverrun
and GpuEtaPredictedLongOccupancy never held for their `for:`, GpuEtaForecasterDown's
absent() true each cycle); at 2m a failed scrape still leaves no gap. Scraping the same
cached values again costs little. An interval set (.set) is taken as given.
*/}}
{{- define "gpu-eta.scrapeInterval" -}}
{{- $key := ternary .setKey .fromKey (not (empty .set)) -}}
{{- $value := .set | default .from | toString | trim -}}
{{- if regexMatch "^[0-9]+$" $value -}}
{{- $value = printf "%ss" $value -}}
{{- end -}}
{{- if and (empty .set) (regexMatch "^[0-9]+(s|m|h|d|w|y)$" $value) -}}
{{- $n := regexFind "^[0-9]+" $value | atoi -}}
{{- $unit := trimPrefix (toString $n) $value -}}
{{- $seconds := mul $n (get (dict "s" 1 "m" 60 "h" 3600 "d" 86400 "w" 604800 "y" 31536000) $unit) -}}
{{- if gt $seconds 120 }}{{ $value = "2m" }}{{ end -}}
{{- end -}}
{{- if not (regexMatch "^([0-9]+(ms|s|m|h|d|w|y))+$" $value) -}}
{{- $hint := ternary "" (printf "; set %s to one" .setKey) (not (empty .set)) -}}
{{- fail (printf "%s: %q is no Prometheus duration (whole units, like 15s or 1m) for a ServiceMonitor's interval%s" $key (toString (.set | default .from)) $hint) -}}
{{- end -}}
{{- $value -}}
{{- end -}}

{{/*
Where and how the forecaster reads Prometheus, as JSON: url, token (bool),
caConfigMap ("" for none), caConfigMapKey. A value left unset (null in values.yaml)
follows the platform: with openshift.enabled the cluster's thanos-querier, which
answers only a bearer token (the forecaster's ServiceAccount's, bound to
cluster-monitoring-view in openshift.yaml) over TLS signed by the service CA that
OpenShift publishes in every namespace (ConfigMap openshift-service-ca.crt, key
service-ca.crt); elsewhere kube-prometheus-stack's Prometheus, no token, no CA. The
token and the service CA default on for thanos-querier's host alone, however its URL
is written (gpu-eta.urlServiceHost): the token is bound to cluster-monitoring-view
(every metric of the cluster), and sent to another URL it went to whatever host that
names. A token with a URL not https:// fails the render: it would cross the network
in the clear (thanos-querier's http:// URL too, which it does not answer). A
value set, false and "" included, wins; null (a copy of values.yaml given back with
-f, or --set key=null) is unset. hasKey, not a plain lookup: Helm drops a null
default's key, and strict lint fails a template reading a missing one.
*/}}
{{/*
The host a URL names, as a comparison needs it: lowercase, without the user info
before an @ (the host is what follows the last one, as the forecaster's urllib and Go
read it), the port, a trailing dot, and with .svc.cluster.local written .svc; "" when
the text is no URL. The thanos-querier test below compares hosts, not URL text: with
a trailing slash (the forecaster strips it), the .svc.cluster.local name or HTTPS:// in
capitals the text differed, and the token and the CA were silently left out.
*/}}
{{- define "gpu-eta.urlServiceHost" -}}
{{- if regexMatch "^[A-Za-z][-A-Za-z0-9+.]*://" . -}}
{{- $authority := regexReplaceAll "^[A-Za-z][-A-Za-z0-9+.]*://([^/?#]*).*$" . "${1}" -}}
{{- $host := regexReplaceAll ":[0-9]*$" (regexReplaceAll "^.*@" $authority "") "" | lower | trimSuffix "." -}}
{{- regexReplaceAll "[.]svc[.]cluster[.]local$" $host ".svc" -}}
{{- end -}}
{{- end -}}

{{- define "gpu-eta.prometheusAccess" -}}
{{- $f := .Values.forecaster -}}
{{- $auth := $f.prometheusAuth -}}
{{- $openshift := .Values.openshift.enabled | default false -}}
{{- $url := ternary "https://thanos-querier.openshift-monitoring.svc:9091" "http://prometheus-operated.monitoring.svc:9090" $openshift -}}
{{- if and (hasKey $f "prometheusUrl") (not (kindIs "invalid" (index $f "prometheusUrl"))) }}{{ $url = index $f "prometheusUrl" }}{{ end -}}
{{- $querier := and $openshift (eq (include "gpu-eta.urlServiceHost" (toString $url)) "thanos-querier.openshift-monitoring.svc") -}}
{{- $token := $querier -}}
{{- if and (hasKey $auth "serviceAccountToken") (not (kindIs "invalid" (index $auth "serviceAccountToken"))) }}{{ $token = index $auth "serviceAccountToken" }}{{ end -}}
{{- if and $token (not (hasPrefix "https://" (lower (toString $url)))) -}}
{{- fail (printf "forecaster.prometheusUrl: %q is no https:// URL, and the forecaster would send it its ServiceAccount token (forecaster.prometheusAuth.serviceAccountToken) in the clear; use https, or set forecaster.prometheusAuth.serviceAccountToken=false" (toString $url)) -}}
{{- end -}}
{{- $ca := ternary "openshift-service-ca.crt" "" $querier -}}
{{- if and (hasKey $auth "caConfigMap") (not (kindIs "invalid" (index $auth "caConfigMap"))) }}{{ $ca = index $auth "caConfigMap" }}{{ end -}}
{{- $key := ternary "service-ca.crt" "ca.crt" (eq (toString $ca) "openshift-service-ca.crt") -}}
{{- if and (hasKey $auth "caConfigMapKey") (not (kindIs "invalid" (index $auth "caConfigMapKey"))) }}{{ $key = index $auth "caConfigMapKey" }}{{ end -}}
{{- dict "url" (toString $url) "token" (not (not $token)) "caConfigMap" (toString $ca) "caConfigMapKey" (toString $key) | toJson -}}
{{- end -}}
