{{/* Names and labels. */}}
{{- define "capture-gate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "capture-gate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $full := printf "%s-%s" .Release.Name $name -}}
{{- if and .Values.nameOverride (gt (len $full) 63) -}}
{{- fail (printf "capture-gate: the full name %q (release-nameOverride) is %d characters, over Kubernetes' 63; shorten nameOverride or set fullnameOverride" $full (len $full)) -}}
{{- end -}}
{{- $full | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "capture-gate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "capture-gate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "capture-gate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "capture-gate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: gate
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of the pod template: no chart version (helm.sh/chart), so that a chart
release that changes nothing in the pods does not restart them. */}}
{{- define "capture-gate.podLabels" -}}
{{ include "capture-gate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: gate
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* capture-gate.probe: (list values path) -> a Probe: the values, with the chart's
handler (httpGet on path, port http) unless the values give one. */}}
{{- define "capture-gate.probe" -}}
{{- $p := index . 0 -}}
{{- $path := index . 1 -}}
{{- if not (or $p.httpGet $p.exec $p.tcpSocket $p.grpc) }}
httpGet:
  path: {{ $path }}
  port: http
{{- end }}
{{ toYaml $p }}
{{- end -}}

{{/* capture-gate.checkKeys: (list . VALUE KEYS) fails unless each of KEYS (those of
routing.forceOverflow or limit.overrides, named VALUE) is a key as routing.keyFrom builds
them, as the gate checks at start: at most routing.maxKeyBytes bytes and, for json:A+B, its
values joined with ':', none empty, each '%' written %25 or %3A (a value's ':'). */}}
{{- define "capture-gate.checkKeys" -}}
{{- $v := (index . 0).Values -}}
{{- $what := index . 1 -}}
{{- $fields := 1 -}}
{{- if hasPrefix "json:" $v.routing.keyFrom }}{{ $fields = len (splitList "+" (trimPrefix "json:" $v.routing.keyFrom)) }}{{ end -}}
{{- range $k := index . 2 -}}
{{- $k = toString $k -}}
{{- if not $k -}}
{{- fail (printf "capture-gate: %s holds an empty key" $what) -}}
{{- end -}}
{{- if gt (len $k) ($v.routing.maxKeyBytes | int) -}}
{{- fail (printf "capture-gate: %s key %q is longer than routing.maxKeyBytes (%d): records with it are dead-lettered, never counted under it (the gate refuses it at start)" $what $k ($v.routing.maxKeyBytes | int64)) -}}
{{- end -}}
{{- if gt $fields 1 -}}
{{- $parts := splitList ":" $k -}}
{{- if or (ne (len $parts) $fields) (has "" $parts) -}}
{{- fail (printf "capture-gate: %s key %q is not %d values joined with ':', as routing.keyFrom (%s) builds its keys (each value's ':' written %%3A and '%%' %%25); the gate refuses it at start" $what $k $fields $v.routing.keyFrom) -}}
{{- end -}}
{{- if regexMatch "%($|[^23]|2($|[^5])|3($|[^A]))" $k -}}
{{- fail (printf "capture-gate: %s key %q holds a '%%' not written %%25 (a value's ':' is %%3A), as routing.keyFrom (%s) builds its keys; the gate refuses it at start" $what $k $v.routing.keyFrom) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* capture-gate.extraEnvSets: (list . NAME) -> "true" when extraEnv sets NAME. */}}
{{- define "capture-gate.extraEnvSets" -}}
{{- $name := index . 1 -}}
{{- range (index . 0).Values.extraEnv }}{{ if eq .name $name }}true{{ end }}{{ end -}}
{{- end -}}

{{- define "capture-gate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "capture-gate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The pod's and the container's securityContext: the values, without the fixed user,
group and fsGroup when fixedUIDs is false (OpenShift's restricted SCC assigns them). */}}
{{- define "capture-gate.podSecurityContext" -}}
{{- $sc := .Values.podSecurityContext | default dict -}}
{{- if not .Values.fixedUIDs }}{{ $sc = omit $sc "runAsUser" "runAsGroup" "fsGroup" }}{{ end -}}
{{- with $sc }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{- define "capture-gate.securityContext" -}}
{{- $sc := .Values.securityContext | default dict -}}
{{- if not .Values.fixedUIDs }}{{ $sc = omit $sc "runAsUser" "runAsGroup" }}{{ end -}}
{{- with $sc }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* The NetworkPolicy's egress ports, as a JSON list: networkPolicy.kafka.ports, or the
ports of kafka.brokers. */}}
{{- define "capture-gate.kafkaPorts" -}}
{{- $ports := list -}}
{{- range .Values.networkPolicy.kafka.ports }}{{ $ports = append $ports (int64 .) }}{{ end -}}
{{- if not $ports -}}
{{- range .Values.kafka.brokers }}{{ $ports = append $ports (include "capture-gate.port" (regexFind "[0-9]+$" .) | int64) }}{{ end -}}
{{- end -}}
{{- toJson (uniq $ports) -}}
{{- end -}}

{{/* A port as the gate dials it: decimal, leading zeros and all (int64 would read "0100"
as octal, 64, and "09092" as 0). */}}
{{- define "capture-gate.port" -}}
{{- regexReplaceAll "^0+" . "" | default "0" -}}
{{- end -}}

{{/* networkPolicy.redis.ports, or the ports of redis.urls (6379 when a URL names none) and,
in sentinel mode, of redis.sentinel.addrs. */}}
{{- define "capture-gate.redisPorts" -}}
{{- $ports := list -}}
{{- range .Values.networkPolicy.redis.ports }}{{ $ports = append $ports (int64 .) }}{{ end -}}
{{- if not $ports -}}
{{- if .Values.redis.urlsSecret.name -}}
{{- fail "capture-gate: networkPolicy.redis.ports is required with redis.urlsSecret: the chart cannot read the ports of URLs kept in a Secret" -}}
{{- end -}}
{{- /* First the passwords (capture-gate.redisURLs refuses them, showing none): this
template renders before the Deployment's checks, and urlParse's error would show the whole
of a URL that fails to parse, a password holding '/' or '?' with it. */ -}}
{{- $_ := include "capture-gate.redisURLs" . -}}
{{- range .Values.redis.urls -}}
{{- $port := regexFind ":[0-9]+$" (urlParse .).host | trimPrefix ":" -}}
{{- $ports = append $ports (include "capture-gate.port" (default "6379" $port) | int64) -}}
{{- end -}}
{{- if eq .Values.redis.mode "sentinel" -}}
{{- range .Values.redis.sentinel.addrs }}{{ $ports = append $ports (include "capture-gate.port" (regexFind "[0-9]+$" .) | int64) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- toJson (uniq $ports) -}}
{{- end -}}

{{- define "capture-gate.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
capture-gate.seconds: a Go duration ("20s", "1m30s", "500ms", ".5s") as whole seconds, rounded up.
The schema has already checked the format.
*/}}
{{- define "capture-gate.seconds" -}}
{{- include "capture-gate.exactSeconds" . | float64 | ceil | int64 -}}
{{- end -}}

{{- define "capture-gate.exactSeconds" -}}
{{- $total := 0.0 -}}
{{- range $part := regexFindAll "([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|ms|s|m|h)" (toString .) -1 -}}
{{- $num := regexFind "^([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" $part -}}
{{- $unit := trimPrefix $num $part -}}
{{- $scale := get (dict "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 "us" 0.000001 "µs" 0.000001 "ns" 0.000000001) $unit -}}
{{- $total = addf $total (mulf (float64 $num) $scale) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
capture-gate.nanoseconds: a Go duration ("1h30m", "500ms", "1.5s", ".5s", "0"; "" is 0) as
a whole number of nanoseconds, as time.ParseDuration reads it (a fraction of a unit cut to
whole nanoseconds), for comparing durations exactly. The schema has already checked the
format; one past Go's longest duration (about 2562047h), which the gate cannot read, fails.
*/}}
{{- define "capture-gate.nanoseconds" -}}
{{- $d := toString . -}}
{{- if gt (include "capture-gate.exactSeconds" $d | float64) 9223372036.0 -}}
{{- fail (printf "capture-gate: the duration %q is longer than the gate can read (a Go duration is at most about 2562047h)" $d) -}}
{{- end -}}
{{- $total := int64 0 -}}
{{- range $part := regexFindAll "([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|ms|s|m|h)" $d -1 -}}
{{- $num := regexFind "^[0-9.]+" $part -}}
{{- $unit := get (dict "h" 3600000000000 "m" 60000000000 "s" 1000000000 "ms" 1000000 "us" 1000 "µs" 1000 "ns" 1) (trimPrefix $num $part) | int64 -}}
{{- /* The whole part without leading zeros (int64 would read "010" as octal). */ -}}
{{- $whole := regexReplaceAll "^0+" (regexFind "^[0-9]*" $num) "" | default "0" -}}
{{- $total = add $total (mul (int64 $whole) $unit) -}}
{{- $frac := trimPrefix "." (regexFind "\\.[0-9]*$" $num) | trunc 18 -}}
{{- if $frac -}}
{{- $total = add $total (divf (mulf (float64 $frac) $unit) (float64 (printf "1%s" (repeat (len $frac) "0"))) | floor | int64) -}}
{{- end -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* Whether an autoscaler owns the replica count. */}}
{{- define "capture-gate.autoscaled" -}}
{{- if or .Values.autoscaling.keda.enabled .Values.autoscaling.hpa.enabled }}true{{ end -}}
{{- end -}}

{{- define "capture-gate.partitions" -}}
{{- required "capture-gate: scaling.inputPartitions is required: the partition count of topics.input, from which the replica count is derived" .Values.scaling.inputPartitions | int64 -}}
{{- end -}}

{{/*
capture-gate.replicas: replicaCount when set, else ceil(inputPartitions / partitionsPerPod).
Fails when that exceeds the partition count, unless scaling.allowIdlePods.
*/}}
{{- define "capture-gate.replicas" -}}
{{- $partitions := include "capture-gate.partitions" . | int64 -}}
{{- $perPod := .Values.scaling.partitionsPerPod | int64 -}}
{{- $replicas := div (sub (add $partitions $perPod) 1) $perPod -}}
{{- if not (kindIs "invalid" .Values.replicaCount) -}}
{{- $replicas = .Values.replicaCount | int64 -}}
{{- end -}}
{{- if and (gt $replicas $partitions) (not .Values.scaling.allowIdlePods) -}}
{{- fail (printf "capture-gate: %d replicas for the %d partitions of topic %q would leave %d pod(s) idle (a partition is consumed by one pod at a time); lower replicaCount, or set scaling.allowIdlePods=true to keep idle standbys" $replicas $partitions .Values.topics.input (sub $replicas $partitions)) -}}
{{- end -}}
{{- $replicas -}}
{{- end -}}

{{/* The HPA's behavior: autoscaling.behavior, with autoscaling.hpa.behavior laid over it
for the HPA the chart renders (not for the one KEDA makes). */}}
{{- define "capture-gate.hpaBehavior" -}}
{{- $b := deepCopy (.Values.autoscaling.behavior | default dict) -}}
{{- if .Values.autoscaling.hpa.enabled }}{{ $b = mergeOverwrite $b (deepCopy (.Values.autoscaling.hpa.behavior | default dict)) }}{{ end -}}
{{- with $b }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* KEDA's fallback replicas: autoscaling.keda.fallback.replicas, or the fixed count
ceil(inputPartitions / partitionsPerPod) within minReplicas..maxReplicas. */}}
{{- define "capture-gate.fallbackReplicas" -}}
{{- $f := .Values.autoscaling.keda.fallback -}}
{{- if not (kindIs "invalid" $f.replicas) -}}
{{- $f.replicas | int64 -}}
{{- else -}}
{{- $partitions := include "capture-gate.partitions" . | int64 -}}
{{- $perPod := .Values.scaling.partitionsPerPod | int64 -}}
{{- $n := div (sub (add $partitions $perPod) 1) $perPod -}}
{{- $n = min $n (include "capture-gate.maxReplicas" . | int64) -}}
{{- max $n (.Values.autoscaling.minReplicas | int64) -}}
{{- end -}}
{{- end -}}

{{- define "capture-gate.maxReplicas" -}}
{{- $partitions := include "capture-gate.partitions" . | int64 -}}
{{- if kindIs "invalid" .Values.autoscaling.maxReplicas -}}
{{- $partitions -}}
{{- else -}}
{{- .Values.autoscaling.maxReplicas | int64 -}}
{{- end -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: derived from the gate's worst-case shutdown, or checked
against it: the drain (kafka.shutdownTimeout), the final commit and leaving the group
(kafka.revokeTimeout each), the final Redis flush (5s) and the HTTP server's close (5s). */}}
{{- define "capture-gate.terminationGracePeriodSeconds" -}}
{{- $shutdown := include "capture-gate.seconds" .Values.kafka.shutdownTimeout | int64 -}}
{{- $revoke := include "capture-gate.seconds" .Values.kafka.revokeTimeout | int64 -}}
{{- $worst := add $shutdown (mul 2 $revoke) 10 -}}
{{- /* A liveness or startup probe's own grace period replaces the pod's when that probe
restarts the gate: held to the same worst case. */ -}}
{{- range $name := list "livenessProbe" "startupProbe" -}}
{{- $p := index $.Values $name -}}
{{- if and (hasKey $p "terminationGracePeriodSeconds") (or (ne $name "startupProbe") $p.enabled) -}}
{{- if lt ($p.terminationGracePeriodSeconds | int64) $worst -}}
{{- fail (printf "capture-gate: %s.terminationGracePeriodSeconds (%d) must be at least kafka.shutdownTimeout (%s) + 2 × kafka.revokeTimeout (%s) + 10s: it replaces the pod's grace period when the probe restarts the gate, which drains, commits, leaves the group and flushes its counts to Redis first" $name ($p.terminationGracePeriodSeconds | int64) $.Values.kafka.shutdownTimeout $.Values.kafka.revokeTimeout) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add $worst 5 -}}
{{- else -}}
{{- $grace := .Values.terminationGracePeriodSeconds | int64 -}}
{{- if lt $grace $worst -}}
{{- fail (printf "capture-gate: terminationGracePeriodSeconds (%d) must be at least kafka.shutdownTimeout (%s) + 2 × kafka.revokeTimeout (%s) + 10s: the gate drains in-flight records for up to the shutdown timeout, commits and leaves the group (up to the revoke timeout each), then flushes its counts to Redis (up to 5s) and closes its HTTP server (up to 5s); Kubernetes kills it at the end of the grace period" $grace .Values.kafka.shutdownTimeout .Values.kafka.revokeTimeout) -}}
{{- end -}}
{{- $grace -}}
{{- end -}}
{{- end -}}

{{/* The Kafka TLS Secret's mount point. */}}
{{- define "capture-gate.kafkaTLSDir" -}}/etc/capture-gate/kafka-tls{{- end -}}
{{- define "capture-gate.redisTLSDir" -}}/etc/capture-gate/redis-tls{{- end -}}

{{/* GATE_REDIS_URLS as a plain value: redis.urls, none of which may hold a password (the
password is GATE_REDIS_PASSWORD, from redis.passwordSecret). */}}
{{- define "capture-gate.redisURLs" -}}
{{- range $u := .Values.redis.urls -}}
{{- /* A ':' before an '@': a password, even one holding '/', ':' or '@' unescaped, or
after a user name holding '@' (svc@corp:PW@host: Go reads the user info up to the last
'@'); shown with everything up to the last '@' as xxxxx (a user name alone is taken
with its password from a Secret). */ -}}
{{- if or (regexMatch "^rediss?://[^@]*:[^@]*@" $u) (regexMatch "^rediss?://[^/]*:[^/]*@" $u) -}}
{{- $shown := regexReplaceAll "^(rediss?://[^:@/]*):.*@" $u "${1}:xxxxx@" -}}
{{- if eq $shown $u -}}
{{- /* No user name before the ':' the first form keeps: all of it hidden. */ -}}
{{- $shown = regexReplaceAll "^(rediss?://).*@" $u "${1}xxxxx@" -}}
{{- end -}}
{{- fail (printf "capture-gate: redis.urls entry %q holds a password; put it in a Secret (redis.passwordSecret or redis.urlsSecret), never in values" $shown) -}}
{{- end -}}
{{- /* A user name and no password: go-redis logs in as that user only with a password,
so the gate refuses it at start unless GATE_REDIS_PASSWORD (redis.passwordSecret) gives
one; the name is not shown, as it may be a password written without its ':'. */ -}}
{{- /* A path other than a database number, which the gate refuses at start. Here, not in
the schema: the schema's error would show the URL whole, a password with it. */ -}}
{{- if not (regexMatch "^rediss?://[^/?#]*(/[0-9]*)?([?#].*)?$" $u) -}}
{{- fail (printf "capture-gate: redis.urls entry %q has a path other than a database number (redis://host:port/N), which the gate refuses at start" (regexReplaceAll "^(rediss?://)[^@/]+@" $u "${1}xxxxx@")) -}}
{{- end -}}
{{- /* An option the gate's clients set themselves, which the gate refuses rather than
ignore: its value is redis.*'s. */ -}}
{{- $own := regexFind "[?&](dial_timeout|read_timeout|write_timeout|pool_size|max_retries)=" $u -}}
{{- if $own -}}
{{- $opt := trimSuffix "=" (substr 1 (len $own) $own) -}}
{{- $instead := get (dict "dial_timeout" "set redis.dialTimeout instead" "read_timeout" "set redis.readTimeout instead" "write_timeout" "set redis.writeTimeout instead" "pool_size" "the gate sets its own pool size" "max_retries" "the gate retries at its next tick, never within one") $opt -}}
{{- fail (printf "capture-gate: redis.urls entry %q sets %s, which the gate refuses at start: %s" (regexReplaceAll "^(rediss?://)[^@/]+@" $u "${1}xxxxx@") $opt $instead) -}}
{{- end -}}
{{- if and (regexMatch "^rediss?://[^@/]+@" $u) (not $.Values.redis.passwordSecret.name) -}}
{{- fail (printf "capture-gate: redis.urls entry %q has a user name and no password, and redis.passwordSecret.name is empty: set redis.passwordSecret.name to the Secret of the user's password (the gate refuses a user name alone, which would log in as Redis's default user)" (regexReplaceAll "^(rediss?://)[^@/]+@" $u "${1}xxxxx@")) -}}
{{- end -}}
{{- end -}}
{{- join "," .Values.redis.urls -}}
{{- end -}}

{{/*
capture-gate.env: the container's environment, one GATE_ variable per gate setting, as a
YAML list. Empty optional settings are left out (the gate's default is then empty too).
*/}}
{{- define "capture-gate.env" -}}
{{- $v := .Values -}}
{{- if not $v.kafka.brokers }}
{{- fail "capture-gate: kafka.brokers is required: the seed brokers as host:port" }}
{{- end }}
- name: GATE_KAFKA_BROKERS
  value: {{ join "," $v.kafka.brokers | quote }}
- name: GATE_GROUP_ID
  value: {{ include "capture-gate.groupId" . | quote }}
- name: GATE_KAFKA_START_OFFSET
  value: {{ $v.kafka.startOffset | quote }}
- name: GATE_KAFKA_GROUP_PROTOCOL
  value: {{ $v.kafka.groupProtocol | quote }}
- name: GATE_ON_UNDELIVERABLE
  value: {{ $v.kafka.onUndeliverable | quote }}
- name: GATE_ON_DATA_LOSS
  value: {{ $v.kafka.onDataLoss | quote }}
{{- if gt (len $v.kafka.clientId) 247 }}
{{- fail (printf "capture-gate: kafka.clientId is %d bytes, over the 247 the gate takes (its outcomes client adds -outcomes, and the client refuses an id over 256); the gate refuses it at start" (len $v.kafka.clientId)) }}
{{- end }}
- name: GATE_KAFKA_CLIENT_ID
  value: {{ default (include "capture-gate.fullname" .) $v.kafka.clientId | quote }}
- name: GATE_MAX_POLL_RECORDS
  value: {{ $v.kafka.maxPollRecords | int64 | quote }}
- name: GATE_COMMIT_INTERVAL
  value: {{ $v.kafka.commitInterval | quote }}
- name: GATE_PRODUCE_RETRIES
  value: {{ $v.kafka.produceRetries | int64 | quote }}
- name: GATE_MAX_BUFFERED_RECORDS
  value: {{ $v.kafka.maxBufferedRecords | int64 | quote }}
- name: GATE_MAX_BUFFERED_BYTES
  value: {{ $v.kafka.maxBufferedBytes | int64 | quote }}
- name: GATE_KAFKA_MAX_MESSAGE_BYTES
  value: {{ $v.kafka.maxMessageBytes | int64 | quote }}
- name: GATE_REVOKE_TIMEOUT
  value: {{ $v.kafka.revokeTimeout | quote }}
- name: GATE_SHUTDOWN_TIMEOUT
  value: {{ $v.kafka.shutdownTimeout | quote }}
- name: GATE_STALL_NOT_READY
  value: {{ $v.kafka.stallNotReady | quote }}
- name: GATE_STALL_RESTART
  value: {{ $v.kafka.stallRestart | quote }}
- name: GATE_DELIVERY
  value: {{ $v.kafka.delivery | quote }}
- name: GATE_TRANSACTION_TIMEOUT
  value: {{ $v.kafka.transactionTimeout | quote }}
- name: GATE_TRANSACTION_INTERVAL
  value: {{ $v.kafka.transactionInterval | quote }}
- name: GATE_TRANSACTION_MAX_RECORDS
  value: {{ $v.kafka.transactionMaxRecords | int64 | quote }}
{{- if eq $v.kafka.delivery "exactly-once" }}
{{- /* One transactional id per pod: pods sharing one would fence each other. */}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: GATE_TRANSACTIONAL_ID
  value: {{ printf "%s-$(POD_NAME)" (default (include "capture-gate.groupId" .) $v.kafka.transactionalIdPrefix) | quote }}
{{- end }}
- name: GATE_KAFKA_SESSION_TIMEOUT
  value: {{ $v.kafka.sessionTimeout | quote }}
- name: GATE_KAFKA_REBALANCE_TIMEOUT
  value: {{ $v.kafka.rebalanceTimeout | quote }}
- name: GATE_KAFKA_FETCH_MAX_WAIT
  value: {{ $v.kafka.fetchMaxWait | quote }}
- name: GATE_KAFKA_FETCH_MAX_BYTES
  value: {{ $v.kafka.fetchMaxBytes | int64 | quote }}
- name: GATE_KAFKA_TLS
  value: {{ $v.kafka.tls.enabled | toString | quote }}
{{- with $v.kafka.tls.serverName }}
- name: GATE_KAFKA_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- if $v.kafka.tls.secretName }}
{{- $dir := include "capture-gate.kafkaTLSDir" . }}
{{- with $v.kafka.tls.caKey }}
- name: GATE_KAFKA_TLS_CA_FILE
  value: {{ printf "%s/%s" $dir . | quote }}
{{- end }}
{{- with $v.kafka.tls.certKey }}
- name: GATE_KAFKA_TLS_CERT_FILE
  value: {{ printf "%s/%s" $dir . | quote }}
{{- end }}
{{- with $v.kafka.tls.keyKey }}
- name: GATE_KAFKA_TLS_KEY_FILE
  value: {{ printf "%s/%s" $dir . | quote }}
{{- end }}
{{- end }}
- name: GATE_KAFKA_SASL_MECHANISM
  value: {{ $v.kafka.sasl.mechanism | quote }}
{{- if ne $v.kafka.sasl.mechanism "none" }}
{{- if $v.kafka.sasl.usernameKey }}
- name: GATE_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $v.kafka.sasl.existingSecret | quote }}
      key: {{ $v.kafka.sasl.usernameKey | quote }}
{{- else }}
- name: GATE_KAFKA_SASL_USERNAME
  value: {{ $v.kafka.sasl.username | quote }}
{{- end }}
- name: GATE_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $v.kafka.sasl.existingSecret | quote }}
      key: {{ $v.kafka.sasl.passwordKey | quote }}
{{- end }}
- name: GATE_INPUT_TOPIC
  value: {{ $v.topics.input | quote }}
- name: GATE_ACCEPTED_TOPIC
  value: {{ $v.topics.accepted | quote }}
- name: GATE_OVERFLOW_TOPIC
  value: {{ $v.topics.overflow | quote }}
- name: GATE_DEAD_LETTER_TOPIC
  value: {{ $v.topics.deadLetter | quote }}
{{- if $v.outcomes.topic }}
- name: GATE_OUTCOMES_TOPIC
  value: {{ $v.outcomes.topic | quote }}
- name: GATE_OUTCOMES_INTERVAL
  value: {{ $v.outcomes.interval | quote }}
- name: GATE_OUTCOMES_MAX_ROWS
  value: {{ $v.outcomes.maxRows | int64 | quote }}
- name: GATE_OUTCOMES_FLUSH_INTERVAL
  value: {{ $v.outcomes.flushInterval | quote }}
{{- else }}
{{- range $v.rules }}
{{- if and (eq (toString .action) "drop") (not .shadow) }}
{{- fail (printf "capture-gate: rule %q has action drop, which needs outcomes.topic: a dropped record is counted only in the outcomes (a shadow rule, which drops nothing, does not)" .name) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $v.rules }}
{{- /* Rules: each says its own key, cost, mode, limits, threshold mode and forced keys;
       the gate refuses the variables that say them for the gate without rules. */}}
{{- if or $v.routing.forceOverflow $v.limit.overrides $v.limit.extra }}
{{- fail "capture-gate: with rules, routing.forceOverflow, limit.overrides and limit.extra must be empty (each rule has its own force list, overrides hash and limits)" }}
{{- end }}
- name: GATE_RULES_FILE
  value: {{ include "capture-gate.rulesFile" . | quote }}
{{- else }}
- name: GATE_KEY_FROM
  value: {{ $v.routing.keyFrom | quote }}
- name: GATE_COST
  value: {{ $v.routing.cost | quote }}
{{- include "capture-gate.checkKeys" (list $ "routing.forceOverflow" $v.routing.forceOverflow) }}
{{- include "capture-gate.checkKeys" (list $ "limit.overrides" (keys ($v.limit.overrides | default dict) | sortAlpha)) }}
{{- with $v.routing.forceOverflow }}
- name: GATE_FORCE_OVERFLOW
  value: {{ join "," . | quote }}
{{- end }}
{{- end }}
- name: GATE_VALIDATE_JSON
  value: {{ $v.routing.validateJson | toString | quote }}
- name: GATE_MAX_KEY_BYTES
  value: {{ $v.routing.maxKeyBytes | int64 | quote }}
- name: GATE_DRY_RUN
  value: {{ $v.routing.dryRun | toString | quote }}
- name: GATE_OVERFLOW_KEEP_KEY
  value: {{ $v.routing.overflowKeepKey | toString | quote }}
{{- if not $v.rules }}
- name: GATE_LIMIT_MODE
  value: {{ $v.limit.mode | quote }}
{{- end }}
{{- with $v.limit.divertHold }}
{{- /* Any zero duration (0, 0s, 0ms, 0m0s, ...) is no hold, as the gate reads it. */}}
{{- if and (eq $v.limit.clock "event") (not (regexMatch "^(0|((0+(\\.0*)?|\\.0+)(ns|us|µs|ms|s|m|h))+)$" (toString .))) }}
{{- fail (printf "capture-gate: limit.divertHold (%s) must be \"\" or \"0\" with limit.clock event (holds are not kept under the event clock)" .) }}
{{- end }}
- name: GATE_DIVERT_HOLD
  value: {{ . | quote }}
{{- end }}
- name: GATE_DIVERT_RELEASE
  value: {{ $v.limit.divertRelease | toString | quote }}
{{- if and (eq $v.limit.thresholdMode "adaptive") (eq $v.limit.clock "event") }}
{{- fail "capture-gate: limit.thresholdMode adaptive needs limit.clock wall (learned thresholds are kept under the wall clock only)" }}
{{- end }}
{{- if not $v.rules }}
- name: GATE_THRESHOLD_MODE
  value: {{ $v.limit.thresholdMode | quote }}
{{- end }}
- name: GATE_ADAPTIVE_FACTOR
  value: {{ $v.limit.adaptive.factor | toString | quote }}
- name: GATE_ADAPTIVE_FLOOR
  value: {{ $v.limit.adaptive.floor | int64 | quote }}
- name: GATE_ADAPTIVE_CEILING
  value: {{ $v.limit.adaptive.ceiling | int64 | quote }}
- name: GATE_ADAPTIVE_HALF_LIFE
  value: {{ $v.limit.adaptive.halfLife | quote }}
- name: GATE_ADAPTIVE_MAX_SPIKE
  value: {{ $v.limit.adaptive.maxSpike | quote }}
- name: GATE_ADAPTIVE_MIN_HISTORY
  value: {{ $v.limit.adaptive.minHistory | quote }}
- name: GATE_CLOCK
  value: {{ $v.limit.clock | quote }}
{{- if eq $v.limit.clock "event" }}
- name: GATE_EVENT_TIME_FROM
  value: {{ $v.limit.eventTimeFrom | quote }}
- name: GATE_MAX_EVENT_AGE
  value: {{ $v.limit.maxEventAge | quote }}
{{- else if ne $v.limit.eventTimeFrom "timestamp" }}
{{- fail (printf "capture-gate: limit.eventTimeFrom (%s) is only read with limit.clock event" $v.limit.eventTimeFrom) }}
{{- else if ne (include "capture-gate.nanoseconds" $v.limit.maxEventAge) (include "capture-gate.nanoseconds" "15m") }}
{{- fail (printf "capture-gate: limit.maxEventAge (%s) is only read with limit.clock event: leave it at 15m on the wall clock, which judges every record when the gate reads it" $v.limit.maxEventAge) }}
{{- end }}
{{- if $v.rules }}
{{- else if $v.limit.extra }}
{{- /* Several limits: GATE_LIMITS holds them all, limit.window:limit.threshold first (the
       gate refuses GATE_WINDOW and GATE_THRESHOLD beside it). */}}
{{- $pairs := list (printf "%s:%d" $v.limit.window ($v.limit.threshold | int64)) }}
{{- range $v.limit.extra }}
{{- $pairs = append $pairs (printf "%s:%d" .window (.threshold | int64)) }}
{{- end }}
- name: GATE_LIMITS
  value: {{ join "," $pairs | quote }}
{{- else }}
- name: GATE_WINDOW
  value: {{ $v.limit.window | quote }}
- name: GATE_THRESHOLD
  value: {{ $v.limit.threshold | int64 | quote }}
{{- end }}
{{- with $v.limit.overrides }}
{{- $pairs := list }}
{{- range $team := keys . | sortAlpha }}
{{- $pairs = append $pairs (printf "%s=%d" $team (get $v.limit.overrides $team | int64)) }}
{{- end }}
- name: GATE_OVERRIDES
  value: {{ join "," $pairs | quote }}
{{- end }}
- name: GATE_OVERRIDES_REFRESH
  value: {{ $v.limit.overridesRefresh | quote }}
- name: GATE_OVERRIDES_MAX_ENTRIES
  value: {{ $v.limit.overridesMaxEntries | int64 | quote }}
- name: GATE_CACHE_CAPACITY
  value: {{ $v.limit.cacheCapacity | int64 | quote }}
- name: GATE_CACHE_TTL
  value: {{ $v.limit.cacheTTL | quote }}
- name: GATE_CACHE_IDLE_TIMEOUT
  value: {{ $v.limit.cacheIdleTimeout | quote }}
- name: GATE_TICK_INTERVAL
  value: {{ $v.sync.tickInterval | quote }}
- name: GATE_SYNC_INTERVAL
  value: {{ $v.sync.interval | quote }}
- name: GATE_HOT_EVERY_TICK
  value: {{ $v.sync.hotEveryTick | toString | quote }}
- name: GATE_PENDING_READ_SHARE
  value: {{ $v.sync.pendingReadShare | toString | quote }}
- name: GATE_SYNC_FLOOR
  value: {{ $v.sync.floor | toString | quote }}
{{- with $v.sync.coldWriteInterval }}
- name: GATE_COLD_WRITE_INTERVAL
  value: {{ . | quote }}
{{- end }}
- name: GATE_KEYS_PER_COMMAND
  value: {{ $v.sync.keysPerCommand | int64 | quote }}
- name: GATE_KEYS_PER_TICK
  value: {{ $v.sync.keysPerTick | int64 | quote }}
- name: GATE_MAX_PENDING_WRITES
  value: {{ $v.sync.maxPendingWrites | int64 | quote }}
- name: GATE_MAX_READS_PER_TICK
  value: {{ $v.sync.maxReadsPerTick | int64 | quote }}
- name: GATE_REDIS_MODE
  value: {{ $v.redis.mode | quote }}
{{- if eq $v.redis.mode "sentinel" }}
{{- if not (and $v.redis.sentinel.master $v.redis.sentinel.addrs) }}
{{- fail "capture-gate: redis.mode sentinel needs redis.sentinel.master and redis.sentinel.addrs" }}
{{- end }}
- name: GATE_REDIS_SENTINEL_MASTER
  value: {{ $v.redis.sentinel.master | quote }}
- name: GATE_REDIS_SENTINEL_ADDRS
  value: {{ join "," $v.redis.sentinel.addrs | quote }}
{{- if and $v.redis.sentinel.username (not $v.redis.sentinel.passwordSecret.name) }}
{{- fail "capture-gate: redis.sentinel.username needs redis.sentinel.passwordSecret.name, the Secret of its password" }}
{{- end }}
{{- with $v.redis.sentinel.username }}
- name: GATE_REDIS_SENTINEL_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- with $v.redis.sentinel.passwordSecret.name }}
- name: GATE_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $v.redis.sentinel.passwordSecret.key | quote }}
{{- end }}
{{- else if or $v.redis.sentinel.master $v.redis.sentinel.addrs $v.redis.sentinel.username $v.redis.sentinel.passwordSecret.name }}
{{- fail "capture-gate: redis.sentinel is only read with redis.mode sentinel" }}
{{- end }}
{{- /* The client logs in as a user only with its password: the gate refuses a user name
alone at start. The password may come from envFrom or extraEnv, which the chart cannot read. */}}
{{- if and $v.redis.username (not $v.redis.passwordSecret.name) (not (include "capture-gate.extraEnvSets" (list . "GATE_REDIS_PASSWORD"))) (not $v.envFrom) (not $v.extraEnvFrom) }}
{{- fail "capture-gate: redis.username needs redis.passwordSecret.name, the Secret of its password (the gate refuses a user name alone at start)" }}
{{- end }}
{{- with $v.redis.username }}
- name: GATE_REDIS_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- with $v.redis.passwordSecret.name }}
- name: GATE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $v.redis.passwordSecret.key | quote }}
{{- end }}
{{- if $v.redis.urlsSecret.name }}
{{- if $v.redis.urls }}
{{- fail "capture-gate: redis.urlsSecret replaces redis.urls; set one of them" }}
{{- end }}
- name: GATE_REDIS_URLS
  valueFrom:
    secretKeyRef:
      name: {{ $v.redis.urlsSecret.name | quote }}
      key: {{ $v.redis.urlsSecret.key | quote }}
{{- else }}
{{- if not $v.redis.urls }}
{{- fail "capture-gate: redis.urls (or redis.urlsSecret) is required: the Redis instances as redis:// or rediss:// URLs, the same list in the same order for the whole fleet" }}
{{- end }}
- name: GATE_REDIS_URLS
  value: {{ include "capture-gate.redisURLs" . | quote }}
{{- end }}
{{- if $v.redis.tls.secretName }}
{{- $dir := include "capture-gate.redisTLSDir" . }}
{{- with $v.redis.tls.caKey }}
- name: GATE_REDIS_TLS_CA_FILE
  value: {{ printf "%s/%s" $dir . | quote }}
{{- end }}
{{- with $v.redis.tls.certKey }}
- name: GATE_REDIS_TLS_CERT_FILE
  value: {{ printf "%s/%s" $dir . | quote }}
{{- end }}
{{- with $v.redis.tls.keyKey }}
- name: GATE_REDIS_TLS_KEY_FILE
  value: {{ printf "%s/%s" $dir . | quote }}
{{- end }}
{{- end }}
- name: GATE_REDIS_PREFIX
  value: {{ default (include "capture-gate.fullname" .) $v.redis.prefix | quote }}
{{- /* The gate adds a margin to the expiry, so it takes at most a year, the longest window. */}}
{{- if gt (include "capture-gate.nanoseconds" $v.redis.keyTTL | int64) (mul 8784 3600 1000000000) }}
{{- fail (printf "capture-gate: redis.keyTTL (%s) must be at most 8784h (366 days)" $v.redis.keyTTL) }}
{{- end }}
- name: GATE_REDIS_KEY_TTL
  value: {{ $v.redis.keyTTL | quote }}
- name: GATE_REDIS_READ_TIMEOUT
  value: {{ $v.redis.readTimeout | quote }}
- name: GATE_REDIS_WRITE_TIMEOUT
  value: {{ $v.redis.writeTimeout | quote }}
- name: GATE_REDIS_DIAL_TIMEOUT
  value: {{ $v.redis.dialTimeout | quote }}
- name: GATE_HTTP_ADDR
  value: {{ printf ":%d" ($v.http.port | int64) | quote }}
- name: GATE_TEAM_API
  value: {{ $v.http.teamApi | toString | quote }}
- name: GATE_LOG_LEVEL
  value: {{ $v.log.level | quote }}
- name: GATE_LOG_FORMAT
  value: {{ $v.log.format | quote }}
{{- end -}}

{{/* Whether the PodMonitor / ServiceMonitor / PrometheusRule are rendered: whenever
enabled; capture-gate.validate fails the render when the cluster lacks the API and neither
force nor capabilityChecks=false says to render it anyway. */}}
{{- define "capture-gate.podMonitor" -}}
{{- if .Values.metrics.podMonitor.enabled }}true{{ end -}}
{{- end -}}

{{- define "capture-gate.serviceMonitor" -}}
{{- if .Values.metrics.serviceMonitor.enabled }}true{{ end -}}
{{- end -}}

{{- define "capture-gate.prometheusRule" -}}
{{- if .Values.prometheusRule.enabled }}true{{ end -}}
{{- end -}}

{{/*
capture-gate.hasAPI: (list . "group/version" "Kind") -> "true" when the cluster serves Kind.
A cluster Helm talks to lists every group/version and group/version/Kind; helm template
lists what --api-versions gives, often the group/version alone. So the Kind must be listed,
or the group/version when no Kind of it is (a bare --api-versions group/version).
*/}}
{{- define "capture-gate.hasAPI" -}}
{{- $caps := (index . 0).Capabilities.APIVersions -}}
{{- $gv := index . 1 -}}
{{- if $caps.Has (printf "%s/%s" $gv (index . 2)) -}}
true
{{- else if $caps.Has $gv -}}
{{- $kinds := false -}}
{{- range $caps }}{{ if hasPrefix (printf "%s/" $gv) . }}{{ $kinds = true }}{{ end }}{{ end -}}
{{- if not $kinds }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* capture-gate.needAPI: (dict "top" . "value" "a.b.enabled" "force" bool "forceValue" "a.b.force"
"gv" "group/version" "kind" "Kind" "provider" "what installs it") fails the render, in one
line, when the custom resource is enabled but the cluster does not serve it and no value says
to render it unchecked. */}}
{{- define "capture-gate.needAPI" -}}
{{- if and .top.Values.capabilityChecks (not .force) (not (include "capture-gate.hasAPI" (list .top .gv .kind))) -}}
{{- $optOut := "capabilityChecks=false" -}}
{{- if .forceValue }}{{ $optOut = printf "%s=true or capabilityChecks=false" .forceValue }}{{ end -}}
{{- fail (printf "capture-gate: %s is true but the cluster serves no %s %s (%s): install it, pass --api-versions %s/%s to helm template, or set %s to render it unchecked" .value .gv .kind .provider .gv .kind $optOut) -}}
{{- end -}}
{{- end -}}

{{/* The PromQL label matchers that pick this release's gates out of every gate metric:
prometheusRule.selector, or the release's namespace and pod names (the labels the
Prometheus Operator puts on every target of a PodMonitor or ServiceMonitor). */}}
{{- define "capture-gate.ruleSelector" -}}
{{- default (include "capture-gate.podRuleSelector" .) .Values.prometheusRule.selector -}}
{{- end -}}

{{/* The release's pods by namespace and name, for kube-state-metrics' series. A pod is
named <fullname>-<pod-template-hash, up to 10 characters>-<5 random characters>, but the
API server cuts what comes before the random part to 58 characters: past a full name of
46 characters the hash is cut (with the dash after it); from 57, all that is left before
the random part is "<fullname>-" cut to 58. The random part is exactly 5 characters, so
that the helm test pod, <fullname>-test-readyz (left Failed when a test fails), is no
gate. */}}
{{- define "capture-gate.podRuleSelector" -}}
{{- $full := include "capture-gate.fullname" . -}}
{{- $pods := printf "%s-[a-z0-9]+-[a-z0-9]{5}" $full -}}
{{- if ge (len $full) 57 -}}
{{- $pods = printf "%s[a-z0-9]+" (trunc 58 (printf "%s-" $full)) -}}
{{- else if gt (len $full) 46 -}}
{{- $pods = printf "%s-[a-z0-9]+(-[a-z0-9]{5})?" $full -}}
{{- end -}}
{{- printf "namespace=%q, pod=~%q" .Release.Namespace $pods -}}
{{- end -}}

{{/*
capture-gate.validate: the rules across values that the schema cannot state. Renders
nothing; fails with a message naming the values to change.
*/}}
{{- define "capture-gate.validate" -}}
{{- include "capture-gate.validateRules" . -}}
{{- $v := .Values -}}
{{- /* Validation checks the value the key is read from: the gate refuses it with a header
       or the record key, which read none. */ -}}
{{- if and $v.routing.validateJson (not $v.rules) (not (hasPrefix "json:" $v.routing.keyFrom)) -}}
{{- fail (printf "capture-gate: routing.validateJson is true with routing.keyFrom %s, which reads no JSON value: none would be validated (the gate refuses it at start)" $v.routing.keyFrom) -}}
{{- end -}}
{{- /* routing.keyFrom's fields as the gate reads them (route.ParseKeyFrom), where the
       schema's pattern cannot say it: a later field naming a source of its own
       (json:a+header:b), or a field or header name in quotes (json:"team_id"), names
       nothing a record holds, and the gate refuses it at start. */ -}}
{{- if not $v.rules -}}
{{- $src := trim $v.routing.keyFrom -}}
{{- $names := list -}}
{{- if hasPrefix "json:" $src -}}
{{- $names = splitList "+" (trimPrefix "json:" $src) -}}
{{- range $i, $n := rest $names -}}
{{- if regexMatch "^(json|header):" $n -}}
{{- fail (printf "capture-gate: routing.keyFrom %s: field %q names a source of its own: a composite key joins fields of one JSON value (json:A+B), never a header or another source (the gate refuses it at start)" $src $n) -}}
{{- end -}}
{{- end -}}
{{- else if hasPrefix "header:" $src -}}
{{- $names = list (trimPrefix "header:" $src) -}}
{{- end -}}
{{- range $names -}}
{{- if or (regexMatch "^\"(?s:.*)\"$" .) (regexMatch "^'(?s:.*)'$" .) -}}
{{- if ge (len .) 2 -}}
{{- fail (printf "capture-gate: routing.keyFrom %s: %q is in quotes, which would be part of the name: write it without them (the gate refuses it at start)" $src .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* The producer's buffer holds the largest record a batch takes, as the gate checks
       at start: rendered less, every pod refused to start. */ -}}
{{- if lt ($v.kafka.maxBufferedBytes | int64) (sub ($v.kafka.maxMessageBytes | int64) 61) -}}
{{- fail (printf "capture-gate: kafka.maxBufferedBytes (%d) must be at least kafka.maxMessageBytes (%d) less a record batch's 61-byte header: the producer's buffer must hold the largest record a batch takes" ($v.kafka.maxBufferedBytes | int64) ($v.kafka.maxMessageBytes | int64)) -}}
{{- end -}}
{{- $partitions := include "capture-gate.partitions" . | int64 -}}
{{- $a := $v.autoscaling -}}
{{- if and $a.keda.enabled $a.hpa.enabled -}}
{{- fail "capture-gate: autoscaling.keda.enabled and autoscaling.hpa.enabled are both true; enable one autoscaler at most" -}}
{{- end -}}
{{- if include "capture-gate.autoscaled" . -}}
{{- $max := include "capture-gate.maxReplicas" . | int64 -}}
{{- $min := $a.minReplicas | int64 -}}
{{- if gt $max $partitions -}}
{{- fail (printf "capture-gate: autoscaling.maxReplicas (%d) exceeds the %d partitions of topic %q: pods past the partition count sit idle" $max $partitions $v.topics.input) -}}
{{- end -}}
{{- if gt $min $max -}}
{{- fail (printf "capture-gate: autoscaling.minReplicas (%d) exceeds autoscaling.maxReplicas (%d)" $min $max) -}}
{{- end -}}
{{- if and $a.hpa.enabled (kindIs "invalid" $a.hpa.targetCPUUtilizationPercentage) (kindIs "invalid" $a.hpa.targetMemoryUtilizationPercentage) -}}
{{- fail "capture-gate: autoscaling.hpa needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage; an HPA without a target would scale on 80% CPU" -}}
{{- end -}}
{{- if and $a.keda.enabled $a.keda.fallback.enabled (not (kindIs "invalid" $a.keda.fallback.replicas)) -}}
{{- if or (gt ($a.keda.fallback.replicas | int64) $max) (lt ($a.keda.fallback.replicas | int64) $min) -}}
{{- fail (printf "capture-gate: autoscaling.keda.fallback.replicas (%d) is outside autoscaling.minReplicas..maxReplicas (%d..%d)" ($a.keda.fallback.replicas | int64) $min $max) -}}
{{- end -}}
{{- end -}}
{{- if and $a.hpa.enabled (lt $min 1) -}}
{{- fail "capture-gate: autoscaling.minReplicas must be at least 1 with the HPA (only KEDA scales to zero)" -}}
{{- end -}}
{{- if and $a.keda.enabled (hasKey $a.keda.extraMetadata "offsetResetPolicy") -}}
{{- fail "capture-gate: autoscaling.keda.extraMetadata sets offsetResetPolicy, which the chart sets from kafka.startOffset (where the gate starts a partition without a committed offset); set kafka.startOffset instead" -}}
{{- end -}}
{{- /* The trigger's other keys the chart sets: rendered twice, the last copy would win
unsaid at install, and KEDA scale on another cluster, topic or group than the gate's. */ -}}
{{- if $a.keda.enabled -}}
{{- range $key, $from := dict "bootstrapServers" "kafka.brokers" "consumerGroup" "kafka.groupId" "topic" "topics.input" "lagThreshold" "autoscaling.keda.lagThreshold" "activationLagThreshold" "autoscaling.keda.activationLagThreshold" "allowIdleConsumers" "autoscaling.maxReplicas" -}}
{{- if hasKey $a.keda.extraMetadata $key -}}
{{- fail (printf "capture-gate: autoscaling.keda.extraMetadata sets %s, which the chart sets from %s so that KEDA scales on what the gate reads; set %s instead" $key $from $from) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $a.keda.enabled (or $v.kafka.tls.enabled (ne $v.kafka.sasl.mechanism "none")) (not $a.keda.authenticationRef) -}}
{{- fail "capture-gate: autoscaling.keda.authenticationRef is required with kafka.tls or kafka.sasl: KEDA reads the group's lag from the brokers itself and needs a TriggerAuthentication for them" -}}
{{- end -}}
{{- else -}}
{{- $_ := include "capture-gate.replicas" . -}}
{{- end -}}
{{- /* The gate checks the transaction settings' own bounds in either delivery mode (the
chart sets them in both), their relation to the group's timeouts with exactly-once only. */ -}}
{{- $sec := int64 1000000000 -}}
{{- $txnNs := include "capture-gate.nanoseconds" $v.kafka.transactionTimeout | int64 -}}
{{- if or (lt $txnNs $sec) (gt $txnNs (mul 900 $sec)) -}}
{{- fail (printf "capture-gate: kafka.transactionTimeout (%s) must be from 1s to 15m, within the brokers' transaction.max.timeout.ms: the gate refuses it at start otherwise, whatever kafka.delivery" $v.kafka.transactionTimeout) -}}
{{- end -}}
{{- if eq $v.kafka.delivery "exactly-once" -}}
{{- $txn := include "capture-gate.exactSeconds" $v.kafka.transactionTimeout | float64 -}}
{{- if or (le $txn (include "capture-gate.exactSeconds" $v.kafka.rebalanceTimeout | float64)) (le $txn (include "capture-gate.exactSeconds" $v.kafka.sessionTimeout | float64)) -}}
{{- fail (printf "capture-gate: kafka.transactionTimeout (%s) must be longer than kafka.rebalanceTimeout (%s) and kafka.sessionTimeout (%s): a transaction's end waits out a rebalance, which waits out a dead member's session" $v.kafka.transactionTimeout $v.kafka.rebalanceTimeout $v.kafka.sessionTimeout) -}}
{{- end -}}
{{- /* GATE_TRANSACTIONAL_ID is the prefix, "-" and the pod's name (at most 63), in the
characters the gate takes in it (at most 200): the prefix's schema holds it to them, the
group id it falls back to is any Kafka group id (a ':' or '/' in it, say). */ -}}
{{- $gid := include "capture-gate.groupId" . -}}
{{- if and (not $v.kafka.transactionalIdPrefix) (not (regexMatch "^[a-zA-Z0-9._-]{1,120}$" $gid)) -}}
{{- fail (printf "capture-gate: kafka.groupId (%q) is no transactional id prefix: with kafka.delivery exactly-once, GATE_TRANSACTIONAL_ID is kafka.transactionalIdPrefix (\"\": kafka.groupId), \"-\" and the pod's name, of a-z, A-Z, 0-9, '.', '_' and '-' only (the gate refuses it at start otherwise); set kafka.transactionalIdPrefix" $gid) -}}
{{- end -}}
{{- end -}}
{{- $intervalNs := include "capture-gate.nanoseconds" $v.kafka.transactionInterval | int64 -}}
{{- if or (gt $intervalNs (mul 10 $sec)) (ge $intervalNs (div $txnNs 2)) -}}
{{- fail (printf "capture-gate: kafka.transactionInterval (%s) must be at most 10s and below half kafka.transactionTimeout (%s): a transaction stays open that long before it ends (the gate refuses it at start otherwise, whatever kafka.delivery)" $v.kafka.transactionInterval $v.kafka.transactionTimeout) -}}
{{- end -}}
{{- include "capture-gate.validateLimit" . -}}
{{- /* The Kafka client sends the group's timeouts and the fetch wait in milliseconds as
32-bit numbers (at most 596h), and waits at least 1s for a session, 100ms for a rebalance
and 10ms for a fetch: the gate refuses them at start outside these bounds. */ -}}
{{- range $t := list (list "sessionTimeout" $v.kafka.sessionTimeout $sec "1s" "45s, within the brokers' group.min/max.session.timeout.ms") (list "rebalanceTimeout" $v.kafka.rebalanceTimeout (mul 100 1000000) "100ms" "60s") (list "fetchMaxWait" $v.kafka.fetchMaxWait (mul 10 1000000) "10ms" "500ms") -}}
{{- $ns := include "capture-gate.nanoseconds" (index $t 1) | int64 -}}
{{- if or (lt $ns (index $t 2)) (gt $ns (mul 596 3600 $sec)) -}}
{{- fail (printf "capture-gate: kafka.%s (%s) must be from %s to 596h such as %s (the gate refuses it at start otherwise)" (index $t 0) (index $t 1) (index $t 3) (index $t 4)) -}}
{{- end -}}
{{- end -}}
{{- /* GATE_OUTCOMES_INTERVAL's bounds, as the gate checks them at start; checked whatever
outcomes.topic, as the schema's list of intervals was. */ -}}
{{- $outcomesNs := include "capture-gate.nanoseconds" $v.outcomes.interval | int64 -}}
{{- if or (lt $outcomesNs $sec) (gt $outcomesNs (mul 3600 $sec)) (ne (mod (mul 3600 $sec) $outcomesNs) 0) -}}
{{- fail (printf "capture-gate: outcomes.interval (%s) must be from 1s to 1h and divide an hour, such as 1m, 8s or 90s (the gate refuses it at start otherwise)" $v.outcomes.interval) -}}
{{- end -}}
{{- /* GATE_OUTCOMES_FLUSH_INTERVAL's, likewise. */ -}}
{{- $flushNs := include "capture-gate.nanoseconds" $v.outcomes.flushInterval | int64 -}}
{{- if or (lt $flushNs (div $sec 10)) (gt $flushNs (mul 600 $sec)) -}}
{{- fail (printf "capture-gate: outcomes.flushInterval (%s) must be from 100ms to 10m such as 10s (the gate refuses it at start otherwise)" $v.outcomes.flushInterval) -}}
{{- end -}}
{{- if le (include "capture-gate.exactSeconds" $v.kafka.rebalanceTimeout | float64) (include "capture-gate.exactSeconds" $v.kafka.revokeTimeout | float64) -}}
{{- fail (printf "capture-gate: kafka.rebalanceTimeout (%s) must be longer than kafka.revokeTimeout (%s): a rebalance waits for the revoked partitions' drain" $v.kafka.rebalanceTimeout $v.kafka.revokeTimeout) -}}
{{- end -}}
{{- /* The stall bounds, as the gate checks them at start ("0" turns either off). */ -}}
{{- $notReadyNs := include "capture-gate.nanoseconds" $v.kafka.stallNotReady | int64 -}}
{{- $rebalanceNs := include "capture-gate.nanoseconds" $v.kafka.rebalanceTimeout | int64 -}}
{{- if and (gt $notReadyNs 0) (le $notReadyNs $rebalanceNs) -}}
{{- fail (printf "capture-gate: kafka.stallNotReady (%s) must be 0 (off) or longer than kafka.rebalanceTimeout (%s): a healthy gate waits behind a rebalance that long, and is not stalled" $v.kafka.stallNotReady $v.kafka.rebalanceTimeout) -}}
{{- end -}}
{{- /* Exactly once only a committed transaction is progress: commits come
transactionInterval apart, and a transaction's end waits out a rebalance. */ -}}
{{- if and (eq $v.kafka.delivery "exactly-once") (gt $notReadyNs 0) (le $notReadyNs (add $rebalanceNs $intervalNs)) -}}
{{- fail (printf "capture-gate: kafka.stallNotReady (%s) must be 0 (off) or, with exactly-once, longer than kafka.rebalanceTimeout (%s) plus kafka.transactionInterval (%s): only a committed transaction is progress, commits come transactionInterval apart, and a transaction's end waits out a rebalance" $v.kafka.stallNotReady $v.kafka.rebalanceTimeout $v.kafka.transactionInterval) -}}
{{- end -}}
{{- $restartNs := include "capture-gate.nanoseconds" $v.kafka.stallRestart | int64 -}}
{{- if and (gt $restartNs 0) (le $restartNs $notReadyNs) -}}
{{- fail (printf "capture-gate: kafka.stallRestart (%s) must be 0 (off) or longer than kafka.stallNotReady (%s): a stalled pod is taken out of service before it is restarted" $v.kafka.stallRestart $v.kafka.stallNotReady) -}}
{{- end -}}
{{- /* With stallNotReady off, stallRestart is the only bound, held to the same. */ -}}
{{- if and (eq $notReadyNs 0) (gt $restartNs 0) (le $restartNs $rebalanceNs) -}}
{{- fail (printf "capture-gate: kafka.stallRestart (%s) must be 0 (off) or, with kafka.stallNotReady 0, longer than kafka.rebalanceTimeout (%s): a healthy gate waits behind a rebalance that long, and is not stalled" $v.kafka.stallRestart $v.kafka.rebalanceTimeout) -}}
{{- end -}}
{{- if and (eq $notReadyNs 0) (eq $v.kafka.delivery "exactly-once") (gt $restartNs 0) (le $restartNs (add $rebalanceNs $intervalNs)) -}}
{{- fail (printf "capture-gate: kafka.stallRestart (%s) must be 0 (off) or, with kafka.stallNotReady 0 and exactly-once, longer than kafka.rebalanceTimeout (%s) plus kafka.transactionInterval (%s): only a committed transaction is progress" $v.kafka.stallRestart $v.kafka.rebalanceTimeout $v.kafka.transactionInterval) -}}
{{- end -}}
{{- if and $v.kafka.tls.secretName (not $v.kafka.tls.enabled) -}}
{{- fail "capture-gate: kafka.tls.secretName is set but kafka.tls.enabled is false; enable TLS or drop the Secret" -}}
{{- end -}}
{{- /* The gate takes GATE_KAFKA_TLS_SERVER_NAME as TLS on, whatever GATE_KAFKA_TLS says. */ -}}
{{- if and $v.kafka.tls.serverName (not $v.kafka.tls.enabled) -}}
{{- fail "capture-gate: kafka.tls.serverName is set but kafka.tls.enabled is false: the gate would connect over TLS all the same (any GATE_KAFKA_TLS_* variable turns it on); enable TLS or drop the server name" -}}
{{- end -}}
{{- if ne (empty $v.kafka.tls.certKey) (empty $v.kafka.tls.keyKey) -}}
{{- fail "capture-gate: kafka.tls.certKey and kafka.tls.keyKey go together (mutual TLS), or neither" -}}
{{- end -}}
{{- if and $v.kafka.tls.certKey (not $v.kafka.tls.secretName) -}}
{{- fail "capture-gate: kafka.tls.certKey needs kafka.tls.secretName, the Secret holding the client certificate" -}}
{{- end -}}
{{- if ne (empty $v.redis.tls.certKey) (empty $v.redis.tls.keyKey) -}}
{{- fail "capture-gate: redis.tls.certKey and redis.tls.keyKey go together (mutual TLS), or neither" -}}
{{- end -}}
{{- if and $v.redis.tls.certKey (not $v.redis.tls.secretName) -}}
{{- fail "capture-gate: redis.tls.certKey needs redis.tls.secretName, the Secret holding the client certificate" -}}
{{- end -}}
{{- /* The gate uses the TLS files on rediss:// URLs only, and refuses them at start
without one (it would talk to Redis in plain text). URLs in a Secret cannot be read. */ -}}
{{- if and $v.redis.tls.secretName (or $v.redis.tls.caKey $v.redis.tls.certKey) $v.redis.urls (not $v.redis.urlsSecret.name) -}}
{{- $tls := false -}}
{{- range $v.redis.urls }}{{ if hasPrefix "rediss://" . }}{{ $tls = true }}{{ end }}{{ end -}}
{{- if not $tls -}}
{{- fail "capture-gate: redis.tls.secretName is set but no redis.urls entry is rediss:// (TLS): the gate uses the TLS files on rediss:// URLs only and refuses them at start otherwise; write the URLs as rediss://, or drop redis.tls.secretName" -}}
{{- end -}}
{{- end -}}
{{- /* skip_verify=true (or 1, as go-redis reads it) on a rediss:// URL turns the servers'
certificate check off, and the CA file with it: the gate refuses the two together. */ -}}
{{- if and $v.redis.tls.secretName $v.redis.tls.caKey (not $v.redis.urlsSecret.name) -}}
{{- range $i, $u := $v.redis.urls -}}
{{- if and (hasPrefix "rediss://" $u) (regexMatch "[?&]skip_verify=(true|1)(&|#|$)" $u) -}}
{{- fail (printf "capture-gate: redis.urls entry %d turns the certificate check off (skip_verify), and redis.tls.caKey with it (the gate refuses the two together at start): drop skip_verify to check the servers against the CA, or set redis.tls.caKey to \"\"" $i) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* The input and the outputs all differ, as the gate checks at start: a record routed
to the topic it was read from would be read again, forever. */ -}}
{{- $topicOf := dict -}}
{{- range $t := list (list "topics.input" $v.topics.input) (list "topics.accepted" $v.topics.accepted) (list "topics.overflow" $v.topics.overflow) (list "topics.deadLetter" $v.topics.deadLetter) (list "outcomes.topic" $v.outcomes.topic) -}}
{{- $name := index $t 1 | toString -}}
{{- if $name -}}
{{- if hasKey $topicOf $name -}}
{{- fail (printf "capture-gate: %s (%s) is %s's too: the input and the outputs must all differ (the gate refuses them at start)" (index $t 0) $name (get $topicOf $name)) -}}
{{- end -}}
{{- $_ := set $topicOf $name (index $t 0) -}}
{{- end -}}
{{- end -}}
{{- /* redis.urls as the gate reads them in each mode (it refuses them at start otherwise).
First the passwords (capture-gate.redisURLs refuses them, showing none): the checks below
parse each URL, and a parse error would show the whole of one that fails to parse. */ -}}
{{- $_ := include "capture-gate.redisURLs" . -}}
{{- if and (eq $v.redis.mode "sentinel") (gt (len $v.redis.urls) 1) -}}
{{- fail (printf "capture-gate: redis.mode sentinel takes one redis.urls entry, not %d: its password, database and TLS apply to the primary the sentinels name, and its host is only the name TLS certificates are checked against" (len $v.redis.urls)) -}}
{{- end -}}
{{- if eq $v.redis.mode "cluster" -}}
{{- $schemes := dict -}}
{{- range $i, $u := $v.redis.urls -}}
{{- $p := urlParse $u -}}
{{- $_ := set $schemes $p.scheme true -}}
{{- /* The database is the path's, or the db query parameter's, as go-redis reads it. */ -}}
{{- range $db := list (trimPrefix "/" $p.path) (regexFind "(^|&)db=[^&]*" $p.query | regexFind "[^=]*$") -}}
{{- if and $db (ne $db (regexReplaceAll "[^0]" $db "")) -}}
{{- fail (printf "capture-gate: redis.mode cluster needs redis.urls of database 0 (Redis Cluster has no other); entry %d names database %s" $i $db) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if gt (len $schemes) 1 -}}
{{- fail "capture-gate: redis.mode cluster needs redis.urls all redis:// or all rediss://: the first URL's TLS applies to every node" -}}
{{- end -}}
{{- /* The gate's keys carry their own hash tags in cluster mode: a brace in the prefix
would change them (the gate refuses it at start). */ -}}
{{- if regexMatch "[{}]" (default "" $v.redis.prefix) -}}
{{- fail (printf "capture-gate: redis.prefix (%q) may hold no brace with redis.mode cluster: the gate's keys carry their own hash tags, which a brace would change (the gate refuses it at start)" $v.redis.prefix) -}}
{{- end -}}
{{- end -}}
{{- /* Each entry a distinct instance, as the gate checks at start (a team's counts on two
keys, neither seeing the sum): host:port (6379 when none) and database, as go-redis reads
them (the path's, or the db query parameter's; 0 when none). */ -}}
{{- $instances := dict -}}
{{- range $i, $u := $v.redis.urls -}}
{{- $p := urlParse $u -}}
{{- $addr := trimSuffix ":" $p.host -}}
{{- if not (regexMatch ":[0-9]+$" (regexReplaceAll "^\\[[^]]*\\]" $addr "")) }}{{ $addr = printf "%s:6379" $addr }}{{ end -}}
{{- $db := trimPrefix "/" $p.path -}}
{{- with regexFind "(^|&)db=[^&]*" $p.query | regexFind "[^=]*$" }}{{ $db = . }}{{ end -}}
{{- $id := printf "%s/%d" $addr (atoi (default "0" $db)) -}}
{{- if hasKey $instances $id -}}
{{- fail (printf "capture-gate: redis.urls entries %v and %d are the same instance (%s): each must be a Redis of its own, or a team's counts are kept on two keys, neither seeing the sum (the gate refuses them at start)" (get $instances $id) $i $id) -}}
{{- end -}}
{{- $_ := set $instances $id $i -}}
{{- end -}}
{{- if ne $v.kafka.sasl.mechanism "none" -}}
{{- if not $v.kafka.sasl.existingSecret -}}
{{- fail (printf "capture-gate: kafka.sasl.existingSecret is required with SASL mechanism %s: the password comes from a Secret, never from values" $v.kafka.sasl.mechanism) -}}
{{- end -}}
{{- if and (not $v.kafka.sasl.username) (not $v.kafka.sasl.usernameKey) -}}
{{- fail "capture-gate: kafka.sasl.username or kafka.sasl.usernameKey is required with a SASL mechanism" -}}
{{- end -}}
{{- end -}}
{{- if and $v.metrics.podMonitor.enabled $v.metrics.serviceMonitor.enabled -}}
{{- fail "capture-gate: metrics.podMonitor and metrics.serviceMonitor are both enabled; each would scrape every pod, so enable one" -}}
{{- end -}}
{{- $chartEnv := dict -}}
{{- range $e := include "capture-gate.env" . | fromYamlArray -}}
{{- $_ := set $chartEnv $e.name true -}}
{{- end -}}
{{- range $e := $v.extraEnv -}}
{{- if hasKey $chartEnv $e.name -}}
{{- fail (printf "capture-gate: extraEnv sets %s, which the chart sets from its values; set that value instead (see the chart's README)" $e.name) -}}
{{- end -}}
{{- if and (has $e.name (list "GATE_KAFKA_SASL_PASSWORD" "GATE_REDIS_PASSWORD" "GATE_REDIS_SENTINEL_PASSWORD" "GATE_REDIS_URLS")) (hasKey $e "value") -}}
{{- fail (printf "capture-gate: extraEnv gives %s a plain value; it holds a secret, so take it from a Secret (valueFrom.secretKeyRef or envFrom)" $e.name) -}}
{{- end -}}
{{- end -}}
{{- if le ($v.progressDeadlineSeconds | int64) ($v.minReadySeconds | int64) -}}
{{- fail (printf "capture-gate: progressDeadlineSeconds (%d) must be greater than minReadySeconds (%d)" ($v.progressDeadlineSeconds | int64) ($v.minReadySeconds | int64)) -}}
{{- end -}}
{{- if $v.networkPolicy.enabled -}}
{{- $_ := include "capture-gate.redisPorts" . -}}
{{- end -}}
{{- /* Last: a custom resource whose API the cluster lacks (after the errors in values). */ -}}
{{- $m := $v.metrics -}}
{{- if $m.podMonitor.enabled -}}
{{- include "capture-gate.needAPI" (dict "top" . "value" "metrics.podMonitor.enabled" "force" $m.podMonitor.force "forceValue" "metrics.podMonitor.force" "gv" "monitoring.coreos.com/v1" "kind" "PodMonitor" "provider" "the Prometheus Operator's CRDs") -}}
{{- end -}}
{{- if $m.serviceMonitor.enabled -}}
{{- include "capture-gate.needAPI" (dict "top" . "value" "metrics.serviceMonitor.enabled" "force" $m.serviceMonitor.force "forceValue" "metrics.serviceMonitor.force" "gv" "monitoring.coreos.com/v1" "kind" "ServiceMonitor" "provider" "the Prometheus Operator's CRDs") -}}
{{- end -}}
{{- if $v.prometheusRule.enabled -}}
{{- include "capture-gate.needAPI" (dict "top" . "value" "prometheusRule.enabled" "force" $v.prometheusRule.force "forceValue" "prometheusRule.force" "gv" "monitoring.coreos.com/v1" "kind" "PrometheusRule" "provider" "the Prometheus Operator's CRDs") -}}
{{- end -}}
{{- if $a.keda.enabled -}}
{{- include "capture-gate.needAPI" (dict "top" . "value" "autoscaling.keda.enabled" "force" false "forceValue" "" "gv" "keda.sh/v1alpha1" "kind" "ScaledObject" "provider" "KEDA") -}}
{{- end -}}
{{- end -}}

{{/*
capture-gate.validateLimit: the gate's bounds on the window and the durations measured
against it (internal/config's Limiter.validate, validateAdaptive and Config.validate).
Under rules GATE_WINDOW and GATE_THRESHOLD_MODE are unset: the gate measures the adaptive
durations against each adaptive rule's first window, the tick against each rule's windows,
and limit.maxEventAge against its default window (60s) and each rule's windows.
*/}}
{{- define "capture-gate.validateLimit" -}}
{{- $v := .Values -}}
{{- $ms := int64 1000000 -}}
{{- $sec := int64 1000000000 -}}
{{- $hour := mul 3600 $sec -}}
{{- $window := $v.limit.window -}}
{{- $windowName := printf "limit.window (%s)" $v.limit.window -}}
{{- $mode := $v.limit.thresholdMode -}}
{{- if $v.rules -}}
{{- $window = "60s" -}}
{{- $windowName = "the gate's window under rules (60s: GATE_WINDOW is unset)" -}}
{{- $mode = "static" -}}
{{- end -}}
{{- $w := include "capture-gate.nanoseconds" $window | int64 -}}
{{- if not $v.rules -}}
{{- if lt $w (mul 2 $ms) -}}
{{- fail (printf "capture-gate: limit.window (%s) must be at least 2ms (longer than a tick, itself 1ms at least)" $v.limit.window) -}}
{{- end -}}
{{- if gt $w (mul 8784 $hour) -}}
{{- fail (printf "capture-gate: limit.window (%s) must be at most 8784h (366 days)" $v.limit.window) -}}
{{- end -}}
{{- if and (eq $mode "adaptive") (or (gt $w $hour) (ne (mod $hour $w) 0)) -}}
{{- fail (printf "capture-gate: limit.thresholdMode adaptive needs a limit.window (%s) that divides an hour, such as 60s: adaptive learns per hour of the day" $v.limit.window) -}}
{{- end -}}
{{- end -}}
{{- if lt (include "capture-gate.nanoseconds" $v.kafka.commitInterval | int64) (mul 10 $ms) -}}
{{- fail (printf "capture-gate: kafka.commitInterval (%s) must be at least 10ms: shorter, the commit loop spins" $v.kafka.commitInterval) -}}
{{- end -}}
{{- if lt (include "capture-gate.nanoseconds" $v.limit.cacheIdleTimeout | int64) $sec -}}
{{- fail (printf "capture-gate: limit.cacheIdleTimeout (%s) must be at least 1s: the gate keeps when a team was last seen in whole seconds" $v.limit.cacheIdleTimeout) -}}
{{- end -}}
{{- $a := $v.limit.adaptive -}}
{{- if and (ne ($a.ceiling | int64) 0) (lt ($a.ceiling | int64) ($a.floor | int64)) -}}
{{- fail (printf "capture-gate: limit.adaptive.ceiling (%d) must be 0 (none) or at least limit.adaptive.floor (%d)" ($a.ceiling | int64) ($a.floor | int64)) -}}
{{- end -}}
{{- $spike := include "capture-gate.nanoseconds" $a.maxSpike | int64 -}}
{{- if $v.rules -}}
{{- /* Under rules GATE_WINDOW is unset, its default no window of the gate's: the gate
       checks these against each adaptive rule's first window as it reads the file
       (refusing the file at start), and only maxSpike's hour to 168h otherwise. */ -}}
{{- if or (lt $spike $hour) (gt $spike (mul 168 $hour)) -}}
{{- fail (printf "capture-gate: limit.adaptive.maxSpike (%s) must be from 1h to 168h (how long a team may stay over its learned threshold before it is re-learned)" $a.maxSpike) -}}
{{- end -}}
{{- range $r := $v.rules -}}
{{- if and (eq (toString $r.threshold_mode) "adaptive") $r.limits -}}
{{- $first := regexFind "^[^:]+" (toString (index $r.limits 0)) -}}
{{- $rw := include "capture-gate.nanoseconds" $first | int64 -}}
{{- $rn := printf "rule %q's first window (%s)" (toString $r.name) $first -}}
{{- if lt (include "capture-gate.nanoseconds" $a.halfLife | int64) $rw -}}
{{- fail (printf "capture-gate: limit.adaptive.halfLife (%s) must be at least %s, which it learns over (the gate refuses the rules file at start otherwise)" $a.halfLife $rn) -}}
{{- end -}}
{{- if lt (include "capture-gate.nanoseconds" $a.minHistory | int64) $rw -}}
{{- fail (printf "capture-gate: limit.adaptive.minHistory (%s) must be at least %s, which it learns over (the gate refuses the rules file at start otherwise)" $a.minHistory $rn) -}}
{{- end -}}
{{- if lt $spike (add $hour (mul 2 $rw)) -}}
{{- fail (printf "capture-gate: limit.adaptive.maxSpike (%s) must be at least 1h plus twice %s (the gate refuses the rules file at start otherwise)" $a.maxSpike $rn) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- /* The learned level and history are measured in windows; in static mode only adaptive
       rules learn, whose windows divide an hour, so a longer window counts as an hour. */ -}}
{{- $learn := $w -}}
{{- $learnName := $windowName -}}
{{- if and (ne $mode "adaptive") (gt $w $hour) -}}
{{- $learn = $hour -}}
{{- $learnName = printf "1h (limit.window, %s, counts as an hour with limit.thresholdMode static)" $window -}}
{{- end -}}
{{- if lt (include "capture-gate.nanoseconds" $a.halfLife | int64) $learn -}}
{{- fail (printf "capture-gate: limit.adaptive.halfLife (%s) must be at least %s" $a.halfLife $learnName) -}}
{{- end -}}
{{- if lt (include "capture-gate.nanoseconds" $a.minHistory | int64) $learn -}}
{{- fail (printf "capture-gate: limit.adaptive.minHistory (%s) must be at least %s" $a.minHistory $learnName) -}}
{{- end -}}
{{- if or (lt $spike (add $hour (mul 2 $learn))) (gt $spike (mul 168 $hour)) -}}
{{- fail (printf "capture-gate: limit.adaptive.maxSpike (%s) must be from 1h plus twice %s to 168h (how long a team may stay over its learned threshold before it is re-learned)" $a.maxSpike $learnName) -}}
{{- end -}}
{{- end -}}
{{- $tick := include "capture-gate.nanoseconds" $v.sync.tickInterval | int64 -}}
{{- if lt $tick $ms -}}
{{- fail (printf "capture-gate: sync.tickInterval (%s) must be at least 1ms: a tick makes its Redis round trips within three quarters of it" $v.sync.tickInterval) -}}
{{- end -}}
{{- if $v.rules -}}
{{- /* Under rules the windows are the rules': the gate checks the tick against each of
       them (and caps the cold-write interval at each rule's window), not against the
       default window. */ -}}
{{- range $r := $v.rules -}}
{{- range $l := $r.limits -}}
{{- $win := regexFind "^[^:]+" (toString $l) -}}
{{- if le (include "capture-gate.nanoseconds" $win | int64) $tick -}}
{{- fail (printf "capture-gate: rule %q's window %s must be longer than sync.tickInterval (%s): a tick as long as the window would let a whole window pass between two writes" (toString $r.name) $win $v.sync.tickInterval) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- else if ge $tick $w -}}
{{- fail (printf "capture-gate: sync.tickInterval (%s) must be shorter than %s: a tick as long as the window would let a whole window pass between two writes" $v.sync.tickInterval $windowName) -}}
{{- end -}}
{{- /* limit.extra: GATE_LIMITS takes each window, limit.window's too, as a rule's limit
       (a whole number of seconds, at most 8784h), each once, and each further one longer
       than a tick, as the gate checks them at start. */ -}}
{{- if and (not $v.rules) $v.limit.extra -}}
{{- $seen := dict -}}
{{- range $i, $l := prepend $v.limit.extra (dict "window" $v.limit.window) -}}
{{- $name := printf "limit.extra window %s" (toString $l.window) -}}
{{- if eq $i 0 }}{{ $name = printf "limit.window (%s), with limit.extra," $v.limit.window }}{{ end -}}
{{- $ns := include "capture-gate.nanoseconds" $l.window | int64 -}}
{{- if or (lt $ns $sec) (ne (mod $ns $sec) 0) -}}
{{- fail (printf "capture-gate: %s must be a whole number of seconds such as 1h (GATE_LIMITS takes no fraction of a second)" $name) -}}
{{- end -}}
{{- if gt $ns (mul 8784 $hour) -}}
{{- fail (printf "capture-gate: %s must be at most 8784h (366 days)" $name) -}}
{{- end -}}
{{- if hasKey $seen (toString $ns) -}}
{{- fail (printf "capture-gate: %s is limit.window's (%s) or another entry's: each limit needs a window of its own" $name $v.limit.window) -}}
{{- end -}}
{{- $_ := set $seen (toString $ns) true -}}
{{- if and (gt $i 0) (le $ns $tick) -}}
{{- fail (printf "capture-gate: %s must be longer than sync.tickInterval (%s): a tick as long as the window would let a whole window pass between two writes" $name $v.sync.tickInterval) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if lt (include "capture-gate.nanoseconds" $v.sync.interval | int64) $tick -}}
{{- fail (printf "capture-gate: sync.interval (%s) must be at least sync.tickInterval (%s): reads are made on ticks" $v.sync.interval $v.sync.tickInterval) -}}
{{- end -}}
{{- if gt (include "capture-gate.nanoseconds" $v.sync.interval | int64) (mul 8784 $hour) -}}
{{- fail (printf "capture-gate: sync.interval (%s) must be at most 8784h (366 days)" $v.sync.interval) -}}
{{- end -}}
{{- if and (not $v.rules) (gt (include "capture-gate.nanoseconds" $v.sync.coldWriteInterval | int64) $w) -}}
{{- fail (printf "capture-gate: sync.coldWriteInterval (%s) must be at most %s (\"\" = once a window)" $v.sync.coldWriteInterval $windowName) -}}
{{- end -}}
{{- /* The event clock keeps a window of state per window back to limit.maxEventAge, at
       most 1048576 of the shortest window (limit.window's, limit.extra's; under rules the
       gate's 60s and every rule's limits', which it checks as it reads the file) and at
       most 8784h, as the gate checks them at start. */ -}}
{{- if eq $v.limit.clock "event" -}}
{{- $age := include "capture-gate.nanoseconds" $v.limit.maxEventAge | int64 -}}
{{- $shortest := $w -}}
{{- $shortestName := $window -}}
{{- if not $v.rules -}}
{{- range $l := $v.limit.extra -}}
{{- $ns := include "capture-gate.nanoseconds" $l.window | int64 -}}
{{- if lt $ns $shortest }}{{ $shortest = $ns }}{{ $shortestName = toString $l.window }}{{ end -}}
{{- end -}}
{{- else -}}
{{- range $r := $v.rules -}}
{{- range $l := $r.limits -}}
{{- $win := regexFind "^[^:]+" (toString $l) -}}
{{- $ns := include "capture-gate.nanoseconds" $win | int64 -}}
{{- if lt $ns $shortest }}{{ $shortest = $ns }}{{ $shortestName = printf "rule %q's window %s" (toString $r.name) $win }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if gt (div $age $shortest) 1048576 -}}
{{- fail (printf "capture-gate: limit.maxEventAge (%s) must be at most 1048576 of the shortest window (%s) with limit.clock event: the gate keeps a window of state per window back to it" $v.limit.maxEventAge $shortestName) -}}
{{- end -}}
{{- if gt $age (mul 8784 $hour) -}}
{{- fail (printf "capture-gate: limit.maxEventAge (%s) must be at most 8784h (366 days) with limit.clock event: each window's counts are kept this much longer in Redis" $v.limit.maxEventAge) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Whether the Service is rendered: service.enabled, a ServiceMonitor, or the helm test
that reaches the gates through it. */}}
{{- define "capture-gate.service" -}}
{{- if or .Values.service.enabled .Values.tests.enabled (include "capture-gate.serviceMonitor" .) }}true{{ end -}}
{{- end -}}

{{/* The consumer group: kafka.groupId, or the release's full name, so that two releases
     on one Kafka never join one group by accident. */}}
{{- define "capture-gate.groupId" -}}
{{- default (include "capture-gate.fullname" .) .Values.kafka.groupId -}}
{{- end }}

{{/*
capture-gate.ruleBreaks: fails when .s holds a character YAML reads as a line break and
editors do not (U+0085, U+2028, U+2029), which the gate refuses anywhere in the rules file
but as an escape in double quotes. Helm reads an escape in values as the character, and
toYaml writes it into the file: the ConfigMap's own YAML broke, or the value came back a
space. .path names the field as the gate's messages do.
*/}}
{{- define "capture-gate.ruleBreaks" -}}
{{- $s := toString .s -}}
{{- $c := regexFind `[\x{85}\x{2028}\x{2029}]` $s -}}
{{- if $c -}}
{{- $cp := include "capture-gate.codePoint" $c -}}
{{- fail (printf "capture-gate: %s: %q holds a %s (%s), which YAML reads as a line break and editors do not: the gate refuses it in the rules file, where the chart writes it as it is (Helm reads an escape in values as the character); remove it" .path $s (get (dict "U+0085" "NEXT LINE" "U+2028" "LINE SEPARATOR" "U+2029" "PARAGRAPH SEPARATOR") $cp) $cp) -}}
{{- end -}}
{{- end -}}

{{/*
capture-gate.ruleValue: fails, as the gate refuses it, when the match value or force entry
.s (for a composite key, .composite: any part of it, parts joined by ':') starts or ends
with a non-ASCII space (unicode.IsSpace's) or an invisible character (category Cf),
copied with a team id from a page: a value no record holds. The gate takes one written as
an escape in double quotes, which the chart cannot tell from the character (Helm reads
values so), and writes as it is.
*/}}
{{- define "capture-gate.ruleValue" -}}
{{- include "capture-gate.ruleBreaks" . -}}
{{- $s := toString .s -}}
{{- $odd := `[\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\p{Cf}]` -}}
{{- $re := printf "^%s|%s$" $odd $odd -}}
{{- if .composite -}}{{- $re = printf "(?:^|:)%s|%s(?::|$)" $odd $odd -}}{{- end -}}
{{- $m := regexFind $re $s -}}
{{- if $m -}}
{{- $c := trimAll ":" $m -}}
{{- $cp := include "capture-gate.codePoint" $c -}}
{{- $what := ternary "an invisible character" "a non-ASCII space" (regexMatch `^\p{Cf}$` $c) -}}
{{- $where := ternary ": a part starts or ends with" " starts or ends with" (contains ":" $m) -}}
{{- fail (printf "capture-gate: %s: %q%s %s (%s), which editors do not show: taken as written, it is a value no one sends; remove it (the gate takes one only as an escape in double quotes, which Helm reads in values as the character, and the chart writes as it is)" .path $s $where $what $cp) -}}
{{- end -}}
{{- end -}}

{{/*
capture-gate.ruleName: fails, as the gate's key sources refuse it (internal/route), when
the key source .s (a rule's key, a match field) names a header, a field or a path part that
starts or ends with a space (ASCII's too) or an invisible character (category Cf): a name
no record has, every record missing its key. json:'s fields are joined by '+', a field's
path parts by '.'.
*/}}
{{- define "capture-gate.ruleName" -}}
{{- include "capture-gate.ruleBreaks" . -}}
{{- $s := toString .s -}}
{{- $edge := `^[\s\v\x{85}\p{Z}\p{Cf}]|[\s\v\x{85}\p{Z}\p{Cf}]$` -}}
{{- $path := .path -}}
{{- if hasPrefix "header:" $s -}}
{{- $n := trimPrefix "header:" $s -}}
{{- $m := regexFind $edge $n -}}
{{- if $m -}}
{{- fail (printf "capture-gate: %s: %q: header name %q starts or ends with %s" $path $s $n (include "capture-gate.nameEdge" $m)) -}}
{{- end -}}
{{- else if hasPrefix "json:" $s -}}
{{- range $f := splitList "+" (trimPrefix "json:" $s) -}}
{{- range $p := splitList "." $f -}}
{{- $m := regexFind $edge $p -}}
{{- if and $m (ne $p $f) -}}
{{- fail (printf "capture-gate: %s: %q: field %q: path part %q starts or ends with %s (parts are joined with . alone)" $path $s $f $p (include "capture-gate.nameEdge" $m)) -}}
{{- else if $m -}}
{{- fail (printf "capture-gate: %s: %q: field %q starts or ends with %s (fields are joined with + alone: json:team_id+distinct_id)" $path $s $f (include "capture-gate.nameEdge" $m)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* capture-gate.nameEdge: the words for the character at a name's edge, as the gate's:
"a space" (with its code point when not ASCII's), or "an invisible character (U+200B)". */}}
{{- define "capture-gate.nameEdge" -}}
{{- if regexMatch `^\p{Cf}$` . -}}
an invisible character ({{ include "capture-gate.codePoint" . }})
{{- else if regexMatch `^[ -~\t\n\v\f\r]$` . -}}
a space
{{- else -}}
a space ({{ include "capture-gate.codePoint" . }})
{{- end -}}
{{- end -}}

{{/* capture-gate.codePoint: the code point of the one character ., as U+00A0 (Go's %U):
sprig has no function for it, but printf's %+q writes it \u00a0 or \U000e0001. */}}
{{- define "capture-gate.codePoint" -}}
U+{{ regexReplaceAll `^"\\[uU]0*([0-9a-fA-F]{4,})"$` (printf "%+q" .) "${1}" | upper }}
{{- end -}}

{{/* Where the rules ConfigMap is mounted, and the file GATE_RULES_FILE names. */}}
{{- define "capture-gate.rulesDir" -}}
/etc/capture-gate/rules
{{- end }}
{{- define "capture-gate.rulesFile" -}}
{{ include "capture-gate.rulesDir" . }}/rules.yaml
{{- end }}

{{/*
capture-gate.validateRules: what the gate's rules parser refuses in rules that the schema
cannot state (internal/rules: a name once, a force key once, each limit's window a whole number of seconds
up to 8784h and once a rule, a threshold from 1, a topic of the rule's own, the
cardinality fields only where a rule counts a team's keys, an adaptive rule's window
dividing an hour, a value or name without an odd character at its edges: ruleValue,
ruleName, ruleBreaks). The rules ConfigMap does not roll the pods: a file the gate refuses
would install, and crash-loop the next pod to start. TestRulesRenderOnlyAsTheGateTakesThem
gives each case to the gate too.
*/}}
{{- define "capture-gate.validateRules" -}}
{{- $v := .Values -}}
{{- /* rulesTeam is the rules file's team: (one field, in the key language): without rules
       there is no file and it would be left out unsaid; a composite key or a typo the
       gates would refuse, at start or at a reload (which keeps the old rules). */ -}}
{{- if $v.rulesTeam -}}
{{- if not $v.rules -}}
{{- fail (printf "capture-gate: rulesTeam (%s) is set without rules: it is the rules file's team:, and with no rules there is no file" $v.rulesTeam) -}}
{{- end -}}
{{- include "capture-gate.ruleBreaks" (dict "path" "rulesTeam" "s" $v.rulesTeam) -}}
{{- /* A name's edges as the gate's (internal/route): no space, ASCII's or another, and no
       invisible character (category Cf: a zero-width space, a word joiner). */ -}}
{{- if not (regexMatch `^(?:json:[^.+\s\v\x{85}\p{Z}\p{Cf}](?:[^.+]*[^.+\s\v\x{85}\p{Z}\p{Cf}])?(?:\.[^.+\s\v\x{85}\p{Z}\p{Cf}](?:[^.+]*[^.+\s\v\x{85}\p{Z}\p{Cf}])?)*|header:[^\s\v\x{85}\p{Z}\p{Cf}](?s:.*[^\s\v\x{85}\p{Z}\p{Cf}])?|key)$` (toString $v.rulesTeam)) -}}
{{- fail (printf "capture-gate: rulesTeam %q: want a key of one field, json:FIELD, header:NAME or key (the team: of docs/rules.md)" (toString $v.rulesTeam)) -}}
{{- end -}}
{{- /* The rules file's team: is newer than the gate of appVersion 0.8.0, which refuses the
file with it (unknown field): its pods would crash-loop, the running ones refuse the reload
(a rolling-update review). Lifted with the release that ships it. An image.tag of a version
(0.8.0, v0.7.1) is held to the same; another tag, or a digest, is taken to have it. */ -}}
{{- if not $v.image.digest -}}
{{- if not $v.image.tag -}}
{{- if semverCompare "<=0.8.0" .Chart.AppVersion -}}
{{- fail (printf "capture-gate: rulesTeam writes the rules file's team:, which the gate of the chart's appVersion (%s) does not know: it would refuse the file; set image.tag to a gate that has it, or leave rulesTeam unset" .Chart.AppVersion) -}}
{{- end -}}
{{- else if and (regexMatch "^v?[0-9]+\\.[0-9]+\\.[0-9]+$" (toString $v.image.tag)) (semverCompare "<=0.8.0" (trimPrefix "v" (toString $v.image.tag))) -}}
{{- fail (printf "capture-gate: rulesTeam writes the rules file's team:, which the gate of image.tag %s does not know (the gates of 0.8.0 and before refuse the file with it); set image.tag to a gate that has it, or leave rulesTeam unset" (toString $v.image.tag)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $sec := 1000000000 | int64 -}}
{{- $hour := mul 3600 $sec -}}
{{- $names := dict -}}
{{- /* The gate's own topics, by how Kafka tells topics apart ('.' and '_' as one). */ -}}
{{- $own := dict -}}
{{- range $t := list (list $v.topics.input "topics.input") (list $v.topics.accepted "topics.accepted") (list $v.topics.overflow "topics.overflow") (list $v.topics.deadLetter "topics.deadLetter") (list $v.outcomes.topic "outcomes.topic") -}}
{{- if index $t 0 -}}
{{- $_ := set $own (replace "." "_" (toString (index $t 0))) (list (toString (index $t 0)) (index $t 1)) -}}
{{- end -}}
{{- end -}}
{{- $ruleTopics := dict -}}
{{- range $i, $r := $v.rules -}}
{{- $name := toString $r.name -}}
{{- if hasKey $names $name -}}
{{- fail (printf "capture-gate: rule name %q is used twice (rules[%d] and rules[%d]): names must differ" $name (index $names $name) $i) -}}
{{- end -}}
{{- $_ := set $names $name $i -}}
{{- $at := printf "rules[%d] %q" $i $name -}}
{{- $composite := and (hasPrefix "json:" (toString $r.key)) (contains "+" (toString $r.key)) -}}
{{- include "capture-gate.ruleName" (dict "path" (printf "%s.key" $at) "s" $r.key) -}}
{{- range $j, $m := $r.match -}}
{{- $mp := printf "%s.match[%d]" $at $j -}}
{{- include "capture-gate.ruleName" (dict "path" (printf "%s.field" $mp) "s" $m.field) -}}
{{- $mc := and (hasPrefix "json:" (toString $m.field)) (contains "+" (toString $m.field)) -}}
{{- range $list := list "in" "not_in" -}}
{{- range $k, $x := index $m $list -}}
{{- include "capture-gate.ruleValue" (dict "path" (printf "%s.%s[%d]" $mp $list $k) "s" $x "composite" $mc) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $j, $k := $r.force -}}
{{- include "capture-gate.ruleValue" (dict "path" (printf "%s.force[%d]" $at $j) "s" $k "composite" $composite) -}}
{{- end -}}
{{- $windows := dict -}}
{{- range $j, $l := $r.limits -}}
{{- $win := regexFind "^[^:]+" (toString $l) -}}
{{- $ns := include "capture-gate.nanoseconds" $win | int64 -}}
{{- if or (lt $ns $sec) (ne (mod $ns $sec) 0) -}}
{{- fail (printf "capture-gate: rule %q's limit %q: its window must be a whole number of seconds such as 1h (a further limit's Redis keys are named by it)" $name (toString $l)) -}}
{{- end -}}
{{- if gt $ns (mul 8784 $hour) -}}
{{- fail (printf "capture-gate: rule %q's limit %q: its window must be at most 8784h (366 days)" $name (toString $l)) -}}
{{- end -}}
{{- if hasKey $windows (toString $ns) -}}
{{- fail (printf "capture-gate: rule %q's limit %q: its window appears twice in the rule (with %q): each limit needs a window of its own" $name (toString $l) (index $windows (toString $ns))) -}}
{{- end -}}
{{- $_ := set $windows (toString $ns) (toString $l) -}}
{{- /* The threshold without leading zeros (int64 would read "010" as octal). */ -}}
{{- $thr := regexReplaceAll "^0+" (regexFind "[0-9]+$" (toString $l)) "" | default "0" -}}
{{- if or (gt (len $thr) 13) (lt (int64 $thr) 1) (gt (int64 $thr) 8796093022207) -}}
{{- fail (printf "capture-gate: rule %q's limit %q: its threshold must be a whole number from 1 to 8796093022207" $name (toString $l)) -}}
{{- end -}}
{{- end -}}
{{- $forced := dict -}}
{{- range $j, $k := $r.force -}}
{{- if hasKey $forced (toString $k) -}}
{{- fail (printf "capture-gate: rule %q's force[%d]: %q appears twice (force[%d]): list each key once" $name $j (toString $k) (index $forced (toString $k))) -}}
{{- end -}}
{{- $_ := set $forced (toString $k) $j -}}
{{- end -}}
{{- $action := toString ($r.action | default "overflow") -}}
{{- if hasPrefix "topic:" $action -}}
{{- $t := trimPrefix "topic:" $action -}}
{{- $u := replace "." "_" $t -}}
{{- if hasKey $own $u -}}
{{- $o := index $own $u -}}
{{- if eq (index $o 0) $t -}}
{{- fail (printf "capture-gate: rule %q's action %q: %s is %s, and a rule's topic must be one of its own (for the overflow topic, action: overflow)" $name $action $t (index $o 1)) -}}
{{- end -}}
{{- fail (printf "capture-gate: rule %q's action %q: %s and %s (%s) differ only in '.' and '_', which Kafka takes for one" $name $action $t (index $o 0) (index $o 1)) -}}
{{- end -}}
{{- if and (hasKey $ruleTopics $u) (ne (index (index $ruleTopics $u) 0) $t) -}}
{{- $o := index $ruleTopics $u -}}
{{- fail (printf "capture-gate: rule %q's action %q: %s and %s (rule %q's topic) differ only in '.' and '_', which Kafka takes for one" $name $action $t (index $o 0) (index $o 1)) -}}
{{- end -}}
{{- $_ := set $ruleTopics $u (list $t $name) -}}
{{- end -}}
{{- /* A team's keys are counted (max_keys, on_cardinality) only for a key of several
       fields, among those kept under their floor: in a sketch, on the wall clock under
       static thresholds. */ -}}
{{- $adaptive := eq (toString $r.threshold_mode) "adaptive" -}}
{{- $aboveFloor := or $composite (not (empty $r.match)) -}}
{{- if hasKey $r "track" -}}{{- $aboveFloor = eq (toString $r.track) "above_floor" -}}{{- end -}}
{{- if and (eq $v.limit.clock "event") (hasKey $r "track") (eq (toString $r.track) "above_floor") -}}
{{- fail (printf "capture-gate: rule %q's track must be all with limit.clock event: keys under their floor are counted in a sketch on the wall clock only" $name) -}}
{{- end -}}
{{- range $f := list "max_keys" "on_cardinality" -}}
{{- if hasKey $r $f -}}
{{- if not $composite -}}
{{- fail (printf "capture-gate: rule %q's %s is only for a key of several fields (json:team_id+distinct_id): its first field is the team whose keys are counted" $name $f) -}}
{{- else if or (not $aboveFloor) (eq $v.limit.clock "event") $adaptive -}}
{{- fail (printf "capture-gate: rule %q's %s needs track: above_floor (the default for a key of several fields), static thresholds and limit.clock wall: a team's keys are counted among those under their floor, in a sketch" $name $f) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $adaptive $r.limits -}}
{{- $first := include "capture-gate.nanoseconds" (regexFind "^[^:]+" (toString (index $r.limits 0))) | int64 -}}
{{- if or (gt $first $hour) (ne (mod $hour $first) 0) -}}
{{- fail (printf "capture-gate: rule %q's threshold_mode must be static unless its first limit's window divides an hour, such as 1m (adaptive learns per hour of the day)" $name) -}}
{{- end -}}
{{- if eq $v.limit.clock "event" -}}
{{- fail (printf "capture-gate: rule %q's threshold_mode must be static with limit.clock event (learned thresholds are kept under the wall clock only)" $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
