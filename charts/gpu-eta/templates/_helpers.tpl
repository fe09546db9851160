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

{{/*
The pods' imagePullSecrets: each item a secret's name (--set imagePullSecrets[0]=regcred
gives one) written as {name: ...}, or already {name: ...}; a pod spec's items are
LocalObjectReferences, and a bare name copied as it was made a pod spec Kubernetes
refuses. One name alone (--set imagePullSecrets=regcred) is a list of it. Anything else
fails the render.
*/}}
{{- define "gpu-eta.imagePullSecrets" -}}
{{- $items := .Values.imagePullSecrets -}}
{{- if kindIs "string" $items }}{{ $items = list $items }}{{ end -}}
{{- if not (or (kindIs "slice" $items) (kindIs "invalid" $items)) -}}
{{- fail (printf "imagePullSecrets must be a list of secret names or {name: <secret>}, not %s" (toJson $items)) -}}
{{- end -}}
{{- $refs := list -}}
{{- range $items -}}
{{- if and (kindIs "string" .) . -}}
{{- $refs = append $refs (dict "name" .) -}}
{{- else if and (kindIs "map" .) (kindIs "string" (get . "name")) (get . "name") -}}
{{- $refs = append $refs . -}}
{{- else -}}
{{- fail (printf "imagePullSecrets: %s is neither a secret name nor {name: <secret>}; list names (--set imagePullSecrets[0]=regcred) or {name: regcred}" (toJson .)) -}}
{{- end -}}
{{- end -}}
{{- with $refs }}
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
{{- $text := .root.Files.Get .path -}}
{{- if not $text }}{{ include "gpu-eta.failLinkedFiles" .path }}{{ end -}}
{{- $text | replace (include "gpu-eta.builtinGpuResources" .root) (include "gpu-eta.gpuResourceRegex" .root) -}}
{{- end -}}

{{/*
Fails the render naming a file of the chart's linked directories (the argument) that
is missing or empty. dashboards/ and rules/ are symlinks to the repository's grafana/
and rules/, and Helm reads a file it lacks as "": a chart without them (a Flux
GitRepository artifact, which drops symlinks; a copy not following links) installed
with no dashboards and a PrometheusRule of no groups, alerting on nothing.
*/}}
{{- define "gpu-eta.failLinkedFiles" -}}
{{- fail (printf "the chart has no %s: charts/gpu-eta/dashboards and charts/gpu-eta/rules are symlinks to the repository's grafana/ and rules/, and this copy of the chart does not hold their files (Flux's GitRepository artifacts drop symlinks, as does a copy that does not follow them); install a packaged chart (helm package charts/gpu-eta follows the links; docs/deploy.md, \"GitOps\") or from a git checkout with its symlinks" .) -}}
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
an hourly schedule whose every run succeeded fired GpuEtaForecasterStale.

Read as Kubernetes' CronJob reads it (robfig/cron v3 ParseStandard, plus the API
server's refusal of TZ): five fields, each comma separated "*", "?", "N", "A-B", each
with an optional "/STEP" (N with a step runs to the field's end), months and days of
the week also by name (jan, mon: any case); or a macro: @hourly and the longer ones,
@every <Go duration>. Taken when the minutes leave no gap above 5 (around the hour)
and every hour, month and day has runs; a field covering its whole range in any way
(0-23, 1-31, 0-6, jan-dec, a star with step 1) is as good as "*". Days: when either
day field is a star ("*", "?", each with no step above 1) a day runs if both fields name it, else if either does, as
robfig/cron's dayMatches has it. Every refusal names what is wrong: a value Kubernetes
refuses, the gap between runs, or the hours, days or months left without a run.
*/}}
{{- define "gpu-eta.validateSchedule" -}}
{{- if eq .Values.forecaster.mode "cronjob" -}}
{{- $raw := .Values.forecaster.schedule -}}
{{- $raw = ternary "" (toString $raw) (kindIs "invalid" $raw) -}}
{{- $schedule := trim $raw -}}
{{- $name := printf "forecaster.schedule: %q" $raw -}}
{{- $why := "runs must be at most 5 minutes apart: a forecast older than 900s fires GpuEtaForecasterStale and GpuEtaPodPendingNoStart (docs/alerts.md)" -}}
{{- if not $schedule -}}
{{- fail (printf "%s is empty; a CronJob needs a schedule, like */5 * * * *" $name) -}}
{{- end -}}
{{- if contains "TZ" $raw -}}
{{- fail (printf "%s: Kubernetes refuses TZ= or CRON_TZ= in a CronJob's schedule (runs every 5 minutes need no time zone); drop it" $name) -}}
{{- end -}}
{{- if hasPrefix "@" $schedule -}}
{{- include "gpu-eta.validateMacro" (dict "raw" $raw "name" $name "why" $why) -}}
{{- else -}}
{{- $fields := splitList " " (regexReplaceAll "\\s+" $schedule " ") -}}
{{- if ne (len $fields) 5 -}}
{{- fail (printf "%s has %d %s; a CronJob's schedule has five (minute hour day-of-month month day-of-week), or is a macro like @every 5m" $name (len $fields) (ternary "field" "fields" (eq (len $fields) 1))) -}}
{{- end -}}
{{- $months := dict "jan" 1 "feb" 2 "mar" 3 "apr" 4 "may" 5 "jun" 6 "jul" 7 "aug" 8 "sep" 9 "oct" 10 "nov" 11 "dec" 12 -}}
{{- $weekdays := dict "sun" 0 "mon" 1 "tue" 2 "wed" 3 "thu" 4 "fri" 5 "sat" 6 -}}
{{- $read := list -}}
{{- range $i, $f := list (dict "field" "minute" "lo" 0 "hi" 59 "names" dict) (dict "field" "hour" "lo" 0 "hi" 23 "names" dict) (dict "field" "day of the month" "lo" 1 "hi" 31 "names" dict) (dict "field" "month" "lo" 1 "hi" 12 "names" $months) (dict "field" "day of the week" "lo" 0 "hi" 6 "names" $weekdays) -}}
{{- $read = append $read (include "gpu-eta.cronField" (merge (dict "text" (index $fields $i) "name" $name) $f) | fromJson) -}}
{{- end -}}
{{- $minute := index $read 0 -}}
{{- $first := -1 -}}
{{- $last := -1 -}}
{{- $gap := 0 -}}
{{- range $minute.values -}}
{{- if ge $last 0 }}{{ $gap = max $gap (sub (int .) $last) }}{{ else }}{{ $first = int . }}{{ end -}}
{{- $last = int . -}}
{{- end -}}
{{- $gap = max $gap (sub (add $first 60) $last) -}}
{{- if gt $gap 5 -}}
{{- fail (printf "%s runs the forecaster up to %d minutes apart; %s" $name $gap $why) -}}
{{- end -}}
{{- range $i, $what := dict "1" (list "hours" "in hours") "3" (list "months" "in months") -}}
{{- $f := index $read (atoi $i) -}}
{{- if $f.missing -}}
{{- fail (printf "%s runs only %s %s: %s %s get no run; %s" $name (index $what 1) $f.spans (index $what 0) $f.missing $why) -}}
{{- end -}}
{{- end -}}
{{- $dom := index $read 2 -}}
{{- $dow := index $read 4 -}}
{{- $days := printf "on days %s of the month" $dom.spans -}}
{{- $weekly := printf "on days of the week %s (0 is Sunday)" $dow.spans -}}
{{- if or $dom.star $dow.star -}}
{{- if $dom.missing -}}
{{- fail (printf "%s runs only %s: days %s get no run; %s" $name $days $dom.missing $why) -}}
{{- else if $dow.missing -}}
{{- fail (printf "%s runs only %s: %s get no run; %s" $name $weekly $dow.missing $why) -}}
{{- end -}}
{{- else if and $dom.missing $dow.missing -}}
{{- fail (printf "%s runs only %s or %s (neither field a *, Kubernetes runs on a day either names): other days get no run; %s" $name $days $weekly $why) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A macro schedule (.raw, .name and .why from gpu-eta.validateSchedule), as robfig/cron's
parseDescriptor takes it: the text exactly, no space around it; @every and one space
before a Go duration (time.ParseDuration: signed, each number with a unit of ns, us,
µs, ms, s, m, h; "0" alone). Taken at most 5 minutes in whole seconds (robfig/cron's
Every drops the fraction), above 0 (robfig/cron would run a duration of 0 or below
every second: a typo, not a schedule).
*/}}
{{- define "gpu-eta.validateMacro" -}}
{{- $macros := list "@yearly" "@annually" "@monthly" "@weekly" "@daily" "@midnight" "@hourly" -}}
{{- if ne .raw (trim .raw) -}}
{{- fail (printf "%s: Kubernetes takes a @ schedule only without spaces around it" .name) -}}
{{- else if has .raw $macros -}}
{{- fail (printf "%s runs the forecaster an hour apart or more; %s" .name .why) -}}
{{- else if not (hasPrefix "@every " .raw) -}}
{{- fail (printf "%s is none of the @ schedules Kubernetes takes (%s, @every <duration>)" .name (join ", " $macros)) -}}
{{- end -}}
{{- $text := trimPrefix "@every " .raw -}}
{{- $unit := "(ns|us|µs|μs|ms|s|m|h)" -}}
{{- $term := printf "([0-9]+([.][0-9]*)?|[.][0-9]+)%s" $unit -}}
{{- $seconds := 0.0 -}}
{{- if regexMatch (printf "^[-+]?(%s)+$" $term) $text -}}
{{- $scale := dict "ns" 1e-9 "us" 1e-6 "µs" 1e-6 "μs" 1e-6 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- range regexFindAll $term $text -1 -}}
{{- $u := regexFind (printf "%s$" $unit) . -}}
{{- $seconds = addf $seconds (mulf (trimSuffix $u . | float64) (get $scale $u)) -}}
{{- end -}}
{{- if hasPrefix "-" $text }}{{ $seconds = mulf $seconds -1.0 }}{{ end -}}
{{- else if not (regexMatch "^[-+]?0$" $text) -}}
{{- fail (printf "%s: %q is no duration Kubernetes takes: numbers each with a unit of ns, us, ms, s, m or h, no spaces, like @every 5m or @every 4m30s" .name $text) -}}
{{- end -}}
{{- /* Go's durations end at 2^63 ns, about 292 years */ -}}
{{- if gt $seconds 9223372036.0 -}}
{{- fail (printf "%s: %q is no duration Kubernetes takes: above 2562047h, the longest a Go duration holds" .name $text) -}}
{{- else if not (gt $seconds 0.0) -}}
{{- fail (printf "%s: @every takes a duration above 0, like @every 5m (robfig/cron runs %q every second)" .name $text) -}}
{{- else if gt (floor $seconds) 300.0 -}}
{{- /* robfig/cron's Every drops the fraction of a second */ -}}
{{- fail (printf "%s runs the forecaster every %ss, more than 5 minutes apart; %s" .name (toString (floor $seconds)) .why) -}}
{{- end -}}
{{- end -}}

{{/*
One field of a five-field schedule as robfig/cron's getField reads it, as JSON:
"values" (the ones it names, ascending), "star" (a "*" or "?" part with no step above
1), "spans" (the values as "A-B" runs) and "missing" (the field's values it leaves out,
the same way; "" for none). .text, .field (its name in messages), .lo, .hi, .names
(lowercase name to value), .name (the schedule, for messages). Fails on what
Kubernetes refuses, naming the part and why; empty parts between commas are skipped,
as getField's strings.FieldsFunc does.
*/}}
{{- define "gpu-eta.cronField" -}}
{{- $c := . -}}
{{- $on := dict -}}
{{- $star := false -}}
{{- range $part := splitList "," $c.text -}}
{{- if $part -}}
{{- if not (regexMatch "^([*?]|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?$" $part) -}}
{{- fail (printf "%s: the %s field's %q is none of *, ?, N, A-B, each with an optional /STEP, the forms this chart reads" $c.name $c.field $part) -}}
{{- end -}}
{{- $span := regexReplaceAll "/.*$" $part "" -}}
{{- $step := 1 -}}
{{- if contains "/" $part -}}
{{- /* more than 3 digits: any step past the field's 60 values names its start alone */ -}}
{{- $digits := regexReplaceAll "^0+([0-9])" (regexReplaceAll "^.*/" $part "") "${1}" -}}
{{- if gt (len $digits) 18 -}}
{{- fail (printf "%s: the %s field's %q: the step %s is more than Kubernetes reads (a 64-bit number)" $c.name $c.field $part $digits) -}}
{{- end -}}
{{- $step = ternary 999 (atoi $digits) (gt (len $digits) 3) -}}
{{- end -}}
{{- $lo := int $c.lo -}}
{{- $hi := int $c.hi -}}
{{- if has $span (list "*" "?") -}}
{{- $star = or $star (le $step 1) -}}
{{- else -}}
{{- $ends := list -}}
{{- range $token := splitList "-" $span -}}
{{- $value := 0 -}}
{{- if hasKey $c.names (lower $token) -}}
{{- $value = int (get $c.names (lower $token)) -}}
{{- else if regexMatch "^[0-9]+$" $token -}}
{{- $digits := regexReplaceAll "^0+([0-9])" $token "${1}" -}}
{{- if gt (len $digits) 3 -}}
{{- fail (printf "%s: the %s field's %q: %s is above %d, the last %s" $c.name $c.field $part $digits (int $c.hi) $c.field) -}}
{{- end -}}
{{- $value = atoi $digits -}}
{{- else -}}
{{- fail (printf "%s: the %s field's %q: %q is no number%s" $c.name $c.field $part $token (ternary "" (printf " nor a name (%s)" (keys $c.names | sortAlpha | join ", ")) (empty $c.names))) -}}
{{- end -}}
{{- $ends = append $ends $value -}}
{{- end -}}
{{- $lo = first $ends -}}
{{- $hi = ternary (last $ends) (ternary (int $c.hi) $lo (contains "/" $part)) (eq (len $ends) 2) -}}
{{- if lt $lo (int $c.lo) -}}
{{- fail (printf "%s: the %s field's %q: %d is below %d, the first %s" $c.name $c.field $part $lo (int $c.lo) $c.field) -}}
{{- end -}}
{{- range $end := $ends -}}
{{- if gt $end (int $c.hi) -}}
{{- fail (printf "%s: the %s field's %q: %d is above %d, the last %s" $c.name $c.field $part $end (int $c.hi) $c.field) -}}
{{- end -}}
{{- end -}}
{{- if gt $lo $hi -}}
{{- fail (printf "%s: the %s field's %q: %d is after %d; Kubernetes takes a range A-B with A at most B" $c.name $c.field $part $lo $hi) -}}
{{- end -}}
{{- end -}}
{{- if lt $step 1 -}}
{{- fail (printf "%s: the %s field's %q: a step of 0; Kubernetes takes steps of 1 or more" $c.name $c.field $part) -}}
{{- end -}}
{{- range $v := untilStep $lo (int (add1 $hi)) $step }}{{ $_ := set $on (toString $v) true }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $values := list -}}
{{- $left := list -}}
{{- range $v := untilStep (int $c.lo) (int (add1 $c.hi)) 1 -}}
{{- if hasKey $on (toString $v) }}{{ $values = append $values $v }}{{ else }}{{ $left = append $left $v }}{{ end -}}
{{- end -}}
{{- if not $values -}}
{{- fail (printf "%s: the %s field %q names no %s" $c.name $c.field $c.text $c.field) -}}
{{- end -}}
{{- dict "values" $values "star" $star "spans" (include "gpu-eta.cronSpans" $values) "missing" (include "gpu-eta.cronSpans" $left) | toJson -}}
{{- end -}}

{{/* Ascending numbers (a list) written as runs: 0-8,18-23; "" for none. */}}
{{- define "gpu-eta.cronSpans" -}}
{{- $runs := list -}}
{{- $start := -2 -}}
{{- $prev := -2 -}}
{{- range $v := . -}}
{{- if ne (int $v) (add1 $prev) -}}
{{- if ge $start 0 }}{{ $runs = append $runs (ternary (toString $start) (printf "%d-%d" $start $prev) (eq $start $prev)) }}{{ end -}}
{{- $start = int $v -}}
{{- end -}}
{{- $prev = int $v -}}
{{- end -}}
{{- if ge $start 0 }}{{ $runs = append $runs (ternary (toString $start) (printf "%d-%d" $start $prev) (eq $start $prev)) }}{{ end -}}
{{- join "," $runs -}}
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

At most 2m: Prometheus answers a series only within 5 minutes (its lookback) of its
last sample, so a forecaster cycling every 10 minutes and scraped as often had every
forecast absent half the time (GpuEtaDeadlineOverrun and GpuEtaPredictedLongOccupancy
never held for their `for:`, GpuEtaForecasterDown's absent() true each cycle); and the
alerts' windows are sized for 2m: a 5m rate() window holds two samples, and past a
failed scrape GpuEtaExporterRefusingProgress and GpuEtaExporterSkippingLogRuns fall back
on 10m, which still does (promtool, tests/rules/gaps.test.yaml). An interval taken from .from is
capped at 2m (scraping the same cached values again costs little); one set (.set)
above it fails the render, naming the key, the value and why.
*/}}
{{- define "gpu-eta.scrapeInterval" -}}
{{- $key := ternary .setKey .fromKey (not (empty .set)) -}}
{{- $value := .set | default .from | toString | trim -}}
{{- if regexMatch "^[0-9]+$" $value -}}
{{- $value = printf "%ss" $value -}}
{{- end -}}
{{- if not (regexMatch "^([0-9]+(ms|s|m|h|d|w|y))+$" $value) -}}
{{- $hint := ternary "" (printf "; set %s to one" .setKey) (not (empty .set)) -}}
{{- fail (printf "%s: %q is no Prometheus duration (whole units, like 15s or 1m) for a ServiceMonitor's interval%s" $key (toString (.set | default .from)) $hint) -}}
{{- end -}}
{{- $scale := dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 "d" 86400.0 "w" 604800.0 "y" 31536000.0 -}}
{{- $seconds := 0.0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" $value -1 -}}
{{- $n := regexFind "^[0-9]+" . -}}
{{- $seconds = addf $seconds (mulf ($n | float64) (get $scale (trimPrefix $n .))) -}}
{{- end -}}
{{- if gt $seconds 120.0 -}}
{{- if not (empty .set) -}}
{{- fail (printf "%s: %q is more than 2m between scrapes, which the alert rules are not sized for: their 5m rate() windows hold two samples at 2m (GpuEtaExporterRefusingProgress and GpuEtaExporterSkippingLogRuns fall back on 10m past one failed scrape), and Prometheus answers a series only within 5 minutes of its last sample; set at most 2m, like 1m or 120s (docs/scrape-tuning.md)" $key (toString .set)) -}}
{{- end -}}
{{- $value = "2m" -}}
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
