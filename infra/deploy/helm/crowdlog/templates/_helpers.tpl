{{/*
crowdlog.components: the long-running roles of .Values.operator, a YAML
list of {name, args, nats (NATS role or ""), kafka, clickhouse, keys
(files of keys.secret), public (files of public.configMap), state (size of
the PersistentVolumeClaim NAME-state it creates, mounted at
/var/lib/crowdlog), stateOf (mount the claim of that component instead,
read-only with stateReadOnly), scratch (an in-memory emptyDir at
/var/lib/crowdlog instead of a claim, with the files of keys mounted into
it one by one, subPath, instead of at /etc/crowdlog/keys: a Prio3 token
issuer's keys directory, which it writes), enrollment (the attester's list at
/var/lib/crowdlog/issuer.enrolled), resources, replicas, natsSecret,
kafkaUser, kafkaSecret and keysSecret (this component's own credential
instead of the operator's), verifyKey (the Prio3 verify key Secret
prio3.verifyKeySecret at /etc/crowdlog/prio3-verify/prio3-verify.key)}. Each issuer shares the
volume of the verifier of its tokens: the aggregator reads the report-token
and ARC keys its operator's issuer writes there, the randomness service the
randomness-token keys.
*/}}
{{- define "crowdlog.components" -}}
{{- $v := .Values -}}
{{- if eq $v.operator "relay-a" }}
- name: relay-a
  args: [relay, --name, a, --key, /etc/crowdlog/keys/relay-a.key]
  nats: relay-a
  keys: [relay-a.key]
{{- else if eq $v.operator "relay-b" }}
- name: relay-b
  args: [relay, --name, b, --key, /etc/crowdlog/keys/relay-b.key]
  nats: relay-b
  kafka: true
  keys: [relay-b.key]
{{- else if eq $v.operator "randomness" }}
- name: randomness
  args: [randomness, --keys, /var/lib/crowdlog, --epoch-length, {{ $v.epochLength | quote }}, --require-tokens]
  nats: randomness
  state: {{ $v.randomness.storage | quote }}
- name: issuer
  args: [issuer, --role, randomness, --keys, /var/lib/crowdlog, --randomness-tokens, {{ $v.issuer.randomnessTokens | quote }}, --epoch-length, {{ $v.epochLength | quote }}]
  nats: randomness
  stateOf: randomness
  enrollment: true
{{- else if eq $v.operator "aggregator" }}
- name: aggregate
  args: [aggregate, --key, /etc/crowdlog/keys/aggregator.key, --keys, /var/lib/crowdlog, --control-pub, /etc/crowdlog/public/control-sign.key.pub, --group, {{ $v.aggregator.group | quote }}, --spill-dir, /tmp{{ range $v.aggregator.pipelines }}, --pipeline, {{ printf "/etc/crowdlog/public/%s" . | quote }}{{ end }}]
  nats: aggregator
  natsSecret: {{ required "aggregator.natsSecret: the Secret of the aggregate role's own NATS credential (ca.crt, tls.crt, tls.key, nkey of role aggregator; create it before installing: docs/operations.md, \"Upgrade notes\")" $v.aggregator.natsSecret | quote }}
  kafka: true
  keys: [aggregator.key]
  public: [control-sign.key.pub{{ range $v.aggregator.pipelines }}, {{ . | quote }}{{ end }}]
  stateOf: issuer
  stateReadOnly: true
  gomaxprocs: true
  resources: {requests: {cpu: {{ $v.aggregator.cpu | quote }}, memory: {{ $v.aggregator.memory | quote }}}}
- name: issuer
  args: [issuer, --role, aggregator, --keys, /var/lib/crowdlog, --report-tokens, {{ $v.issuer.reportTokens | quote }}, --epoch-length, {{ $v.epochLength | quote }}]
  nats: issuer
  state: {{ $v.issuer.storage | quote }}
  enrollment: true
{{- if $v.prio3.leader.enabled }}
- name: prio3-leader
  args: [aggregate-prio3, --role, leader, {{ include "crowdlog.prio3Args" . }}, --sign-key, /etc/crowdlog/keys/prio3-leader-sign.key{{ if $v.prio3.leader.deleteAppliedUploads }}, --delete-applied-uploads{{ end }}]
  nats: prio3-leader
  natsSecret: {{ required "prio3.leader.natsSecret: the Secret of the Prio3 leader's own NATS credential (nkey of role prio3-leader)" $v.prio3.leader.natsSecret | quote }}
  kafka: true
  kafkaUser: {{ $v.prio3.leader.kafkaUser | quote }}
  kafkaSecret: {{ required "prio3.leader.kafkaSecret: the Secret of the Prio3 leader's own Kafka password (SASL user prio3.leader.kafkaUser)" $v.prio3.leader.kafkaSecret | quote }}
  keys: [prio3-leader.key, prio3-leader-sign.key, prio3-leader-token.key{{ range $i := until (int $v.prio3.rotatedKeys) }}, prio3-leader.{{ add1 $i }}.key{{ end }}]
  keysSecret: {{ required "prio3.leader.keysSecret: the Secret of the leader's key (crowdlog keys generate --role prio3-leader)" $v.prio3.leader.keysSecret | quote }}
  public: [prio3-collector.key.pub{{ if $v.prio3.keywordsFile }}, {{ $v.prio3.keywordsFile | quote }}{{ end }}]
  verifyKey: true
  state: {{ $v.prio3.storage | quote }}
  replicas: 1
- name: prio3-leader-issuer
  args: [issuer, --role, prio3-leader, --keys, /var/lib/crowdlog]
  nats: prio3-leader
  natsSecret: {{ $v.prio3.leader.natsSecret | quote }}
  keys: [prio3-leader-token.key]
  keysSecret: {{ $v.prio3.leader.keysSecret | quote }}
  scratch: true
  enrollment: true
{{- end }}
{{- else if eq $v.operator "prio3-helper" }}
- name: prio3-helper
  args: [aggregate-prio3, --role, helper, {{ include "crowdlog.prio3Args" . }}, --leader-pub, /etc/crowdlog/public/prio3-leader-sign.key.pub]
  nats: prio3-helper
  keys: [prio3-helper.key, prio3-helper-token.key{{ range $i := until (int $v.prio3.rotatedKeys) }}, prio3-helper.{{ add1 $i }}.key{{ end }}]
  public: [prio3-collector.key.pub, prio3-leader-sign.key.pub{{ if $v.prio3.keywordsFile }}, {{ $v.prio3.keywordsFile | quote }}{{ end }}]
  verifyKey: true
  state: {{ $v.prio3.storage | quote }}
  replicas: 1
- name: prio3-helper-issuer
  args: [issuer, --role, prio3-helper, --keys, /var/lib/crowdlog]
  nats: prio3-helper
  keys: [prio3-helper-token.key]
  scratch: true
  enrollment: true
{{- else if eq $v.operator "release" }}
- name: release
  args: [release, --policy, {{ $v.release.policy | quote }}, --k, {{ $v.release.k | quote }}]
  kafka: true
  clickhouse: true
  replicas: 1
{{- else if eq $v.operator "pipeline-operator" }}
{{- else }}
{{- fail (printf "operator %q: want relay-a, relay-b, randomness, aggregator, prio3-helper, release or pipeline-operator (the issuers run at the aggregator and randomness operators; the Prio3 leader at the aggregator operator)" $v.operator) }}
{{- end }}
{{- end }}

{{/*
crowdlog.prio3Args: the campaign flags both Prio3 aggregators take, the
same at the leader and the helper (flow sequence items, comma-separated):
the measurement, the batch rule (min batch size, grace, retention), the
per-aggregator noise, the verify key, the role's key directory, the
collector's public key and the state directory.
*/}}
{{- define "crowdlog.prio3Args" -}}
{{- $p := .Values.prio3 -}}
--campaign, {{ required "prio3.campaign: the Prio3 campaign's name" $p.campaign | quote }}, --kind, {{ $p.kind | quote }}, {{ if eq $p.kind "presence" }}--max-weight, {{ $p.maxWeight | quote }}{{ else }}--bits, {{ $p.bits | quote }}, --l1, {{ $p.l1 | quote }}{{ end }}, --keywords, {{ if $p.keywordsFile }}{{ printf "/etc/crowdlog/public/%s" $p.keywordsFile | quote }}{{ else }}{{ $p.keywords | quote }}{{ end }}, --min-batch-size, {{ $p.minBatchSize | quote }}, --grace, {{ $p.grace | quote }}, --retain, {{ $p.retain | quote }}, --epsilon, {{ $p.epsilon | quote }}{{ if $p.exactShares }}, --exact-shares{{ end }}, --verify-key, /etc/crowdlog/prio3-verify/prio3-verify.key{{ if $p.keyEpoch }}, --key-epoch, {{ $p.keyEpoch | quote }}{{ end }}, --keys, /etc/crowdlog/keys, --collector-pub, /etc/crowdlog/public/prio3-collector.key.pub, --state-dir, /var/lib/crowdlog
{{- end }}

{{- define "crowdlog.labels" -}}
app.kubernetes.io/name: crowdlog
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: crowdlog-{{ .Values.operator }}
{{- end }}

{{/* crowdlog.podSecurity: the pod securityContext (nonroot uid, fsGroup so mounted keys are readable). */}}
{{- define "crowdlog.podSecurity" -}}
runAsNonRoot: true
runAsUser: {{ .Values.uid }}
runAsGroup: {{ .Values.uid }}
fsGroup: {{ .Values.uid }}
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "crowdlog.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities: {drop: [ALL]}
{{- end }}

{{/* crowdlog.natsArgs: connection and credential flags of NATS role $c.nats. */}}
{{- define "crowdlog.natsArgs" -}}
- --nats
- {{ .Values.nats.url | quote }}
- --nats-nkey
- /etc/crowdlog/nats/nkey
- --nats-ca
- /etc/crowdlog/nats/ca.crt
- --nats-cert
- /etc/crowdlog/nats/tls.crt
- --nats-key
- /etc/crowdlog/nats/tls.key
{{- end }}

{{/* crowdlog.kafkaArgs: the Kafka flags of a dict (root; user: a SASL user other than kafka.user, e.g. the epoch jobs'). */}}
{{- define "crowdlog.kafkaArgs" -}}
- --kafka
- {{ .root.Values.kafka.brokers | quote }}
- --kafka-tls-ca
- /etc/crowdlog/kafka/ca.crt
- --kafka-sasl-mechanism
- {{ .root.Values.kafka.mechanism | quote }}
- --kafka-sasl-user
- {{ required "kafka.user: this role's SASL user" (.user | default .root.Values.kafka.user) | quote }}
{{- end }}

{{- define "crowdlog.clickhouseArgs" -}}
- --clickhouse
- {{ .Values.clickhouse.address | quote }}
- --clickhouse-user
- {{ .Values.clickhouse.user | quote }}
- --clickhouse-tls-ca
- /etc/crowdlog/clickhouse/ca.crt
{{- end }}

{{/* crowdlog.volumes: the volumes of component . (a dict: c, root). */}}
{{- define "crowdlog.volumes" -}}
{{- $c := .c }}{{ $v := .root.Values -}}
- name: tmp
  emptyDir: {sizeLimit: 1Gi}
{{- if $c.nats }}
- name: nats
  secret:
    secretName: {{ $c.natsSecret | default $v.nats.secret | quote }}
    defaultMode: 0440
    items:
      - {key: ca.crt, path: ca.crt}
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
      - {key: nkey, path: nkey}
{{- end }}
{{- if $c.kafka }}
- name: kafka
  secret:
    secretName: {{ $c.kafkaSecret | default $v.kafka.secret | quote }}
    defaultMode: 0440
    items:
      - {key: ca.crt, path: ca.crt}
      - {key: password, path: password}
{{- end }}
{{- if $c.clickhouse }}
- name: clickhouse
  secret:
    secretName: {{ $v.clickhouse.secret | quote }}
    defaultMode: 0440
    items:
      - {key: ca.crt, path: ca.crt}
      - {key: password, path: password}
{{- end }}
{{- if $c.keys }}
- name: keys
  secret:
    secretName: {{ $c.keysSecret | default (required "keys.secret: the Secret of this operator's private keys" $v.keys.secret) | quote }}
    defaultMode: 0440
    items:
    {{- range $c.keys }}
      - {key: {{ . | quote }}, path: {{ . | quote }}}
    {{- end }}
      # the custody marker of `crowdlog keys generate --role`: with it the
      # key loaders refuse another operator's key (infra/keydir)
      - {key: custody, path: custody}
{{- end }}
{{- if $c.public }}
- name: public
  configMap:
    name: {{ $v.public.configMap | quote }}
    defaultMode: 0444
    items:
    {{- range $c.public }}
      - {key: {{ . | quote }}, path: {{ . | quote }}}
    {{- end }}
{{- end }}
{{- if $c.verifyKey }}
- name: prio3-verify
  secret:
    secretName: {{ required "prio3.verifyKeySecret: the Secret of the campaign's verify key (crowdlog keys prio3-verify)" $v.prio3.verifyKeySecret | quote }}
    defaultMode: 0440
    items:
      - {key: prio3-verify.key, path: prio3-verify.key}
{{- end }}
{{- if $c.enrollment }}
- name: enrollment
  configMap:
    name: {{ $v.issuer.enrollment | quote }}
    defaultMode: 0444
    items:
      - {key: issuer.enrolled, path: issuer.enrolled}
{{- end }}
{{- end }}

{{- define "crowdlog.mounts" -}}
{{- $c := . -}}
- {name: tmp, mountPath: /tmp}
{{- if $c.nats }}
- {name: nats, mountPath: /etc/crowdlog/nats, readOnly: true}
{{- end }}
{{- if $c.kafka }}
- {name: kafka, mountPath: /etc/crowdlog/kafka, readOnly: true}
{{- end }}
{{- if $c.clickhouse }}
- {name: clickhouse, mountPath: /etc/crowdlog/clickhouse, readOnly: true}
{{- end }}
{{- if and $c.keys (not $c.scratch) }}
- {name: keys, mountPath: /etc/crowdlog/keys, readOnly: true}
{{- end }}
{{- if $c.public }}
- {name: public, mountPath: /etc/crowdlog/public, readOnly: true}
{{- end }}
{{- if $c.verifyKey }}
- {name: prio3-verify, mountPath: /etc/crowdlog/prio3-verify, readOnly: true}
{{- end }}
{{- if or $c.state $c.stateOf $c.scratch }}
- {name: state, mountPath: /var/lib/crowdlog{{ if $c.stateReadOnly }}, readOnly: true{{ end }}}
{{- end }}
{{- if and $c.keys $c.scratch }}
{{- /* after the directory they lie in: each key file and the custody marker, one by one */}}
{{- range (append $c.keys "custody") }}
- {name: keys, mountPath: /var/lib/crowdlog/{{ . }}, subPath: {{ . | quote }}, readOnly: true}
{{- end }}
{{- end }}
{{- if $c.enrollment }}
- {name: enrollment, mountPath: /var/lib/crowdlog/issuer.enrolled, subPath: issuer.enrolled, readOnly: true}
{{- end }}
{{- end }}

{{/* crowdlog.container: the container of component . (a dict: c, root, metrics). */}}
{{- define "crowdlog.container" -}}
{{- $c := .c }}{{ $root := .root }}{{ $v := .root.Values -}}
name: {{ $c.name }}
image: "{{ $v.image.repository }}:{{ $v.image.tag }}"
imagePullPolicy: {{ $v.image.pullPolicy }}
args:
{{- range $c.args }}
  - {{ . | quote }}
{{- end }}
{{- if $c.nats }}
{{- include "crowdlog.natsArgs" $root | nindent 2 }}
{{- end }}
{{- if $c.kafka }}
{{- include "crowdlog.kafkaArgs" (dict "root" $root "user" $c.kafkaUser) | nindent 2 }}
{{- end }}
{{- if $c.clickhouse }}
{{- include "crowdlog.clickhouseArgs" $root | nindent 2 }}
{{- end }}
{{- if .metrics }}
  - --metrics
  - "0.0.0.0:{{ $v.metrics.port }}"
{{- end }}
env:
  - {name: CROWDLOG_LOG_FORMAT, value: {{ $v.logFormat | quote }}}
{{- if $c.kafka }}
  - {name: CROWDLOG_KAFKA_SASL_PASSWORD_FILE, value: /etc/crowdlog/kafka/password}
{{- end }}
{{- if $c.clickhouse }}
  - {name: CROWDLOG_CLICKHOUSE_PASSWORD_FILE, value: /etc/crowdlog/clickhouse/password}
{{- end }}
{{- if $c.gomaxprocs }}
  - name: GOMAXPROCS
    valueFrom: {resourceFieldRef: {resource: requests.cpu, divisor: "1"}}
{{- end }}
securityContext:
  {{- include "crowdlog.containerSecurity" $root | nindent 2 }}
{{- if $c.resources }}
resources:
  {{- toYaml $c.resources | nindent 2 }}
{{- end }}
{{- if .metrics }}
ports:
  - {name: metrics, containerPort: {{ $v.metrics.port }}}
readinessProbe: {httpGet: {path: /readyz, port: metrics}}
livenessProbe: {httpGet: {path: /healthz, port: metrics}}
{{- end }}
volumeMounts:
  {{- include "crowdlog.mounts" $c | nindent 2 }}
{{- end }}
