{{/* The chart's name, and the release's full name (63 characters at most: a DNS label). */}}
{{- define "toolgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "toolgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The hook Job's name, a label value (63 characters at most) since the Job controller puts it
into its pods' job-name label; the fullname alone may be 63 long. A fullname cut short keeps a
digest of itself, so two long release names with one prefix do not share (and replace) a Job. */}}
{{- define "toolgate.jobName" -}}
{{- $fullname := include "toolgate.fullname" . -}}
{{- if le (len $fullname) 52 -}}
{{- printf "%s-db-upgrade" $fullname -}}
{{- else -}}
{{- printf "%s-%s-db-upgrade" ($fullname | trunc 45 | trimSuffix "-") ($fullname | sha256sum | trunc 6) -}}
{{- end -}}
{{- end -}}

{{- define "toolgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "toolgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "toolgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "toolgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The server's pods (the migration Job's pods are component db-upgrade, never selected). */}}
{{- define "toolgate.serverSelectorLabels" -}}
{{ include "toolgate.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "toolgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "toolgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "toolgate.image" -}}
{{- $tag := .Values.image.tag | default (printf "%s%s" .Chart.AppVersion (ternary "-js" "" .Values.image.js)) -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* Whether a database / Redis URL / secrets key is given (inline or by a Secret of yours). */}}
{{- define "toolgate.hasDatabase" -}}
{{- if or .Values.database.url .Values.database.existingSecret }}true{{ end -}}
{{- end -}}
{{- define "toolgate.hasRedis" -}}
{{- if or .Values.redis.url .Values.redis.existingSecret }}true{{ end -}}
{{- end -}}
{{- define "toolgate.hasSecretsKey" -}}
{{- if or .Values.secretsKey.value .Values.secretsKey.existingSecret }}true{{ end -}}
{{- end -}}

{{/*
The checks a release must pass before anything is rendered: each names the value and the fix,
because the alternative is pods that exit 3 in a crash loop.
*/}}
{{- define "toolgate.checks" -}}
{{- $v := .Values -}}
{{- $fullname := include "toolgate.fullname" . -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $fullname) -}}
{{- fail (printf "the release's objects would be named %q, which cannot name a Service: a name must start with a letter and hold only lowercase letters, digits and '-' (DNS-1035). Choose another release name, or set fullnameOverride (or nameOverride) to one" $fullname) -}}
{{- end -}}
{{- range $i, $entry := $v.env -}}
{{- $name := (kindIs "map" $entry) | ternary (get $entry "name") "" -}}
{{- $owner := get (dict "TOOLGATE_DATABASE_URL" "database.url (or database.existingSecret)" "TOOLGATE_REDIS_URL" "redis.url (or redis.existingSecret)" "TOOLGATE_SECRETS_KEY" "secretsKey.value (or secretsKey.existingSecret)" "TOOLGATE_HOME" "home.mountPath" "HOME" "home.mountPath" "TMPDIR" "tmp (TMPDIR is /tmp, a volume)") (toString $name) -}}
{{- if $owner -}}
{{- fail (printf "env[%d]: %s is set by the chart: give it as %s instead. A second entry would override the chart's (the last one wins) without reaching the migration Job, and a value written in env stands in plain text in the Deployment (kubectl describe shows it), where a Secret's does not" $i $name $owner) -}}
{{- end -}}
{{- end -}}
{{- if not (kindIs "map" $v.config) -}}
{{- fail "config: must be toolgate.yaml as a mapping (config: {agents: {...}}), not a string" -}}
{{- end -}}
{{- if and (gt (int $v.replicaCount) 1) (not (include "toolgate.hasDatabase" .)) -}}
{{- fail (printf "replicaCount is %d, but several replicas need the shared state in PostgreSQL: set database.url (or database.existingSecret), and redis.url for the rate-limit counters; or set replicaCount: 1 (see docs/guides/kubernetes.md)" (int $v.replicaCount)) -}}
{{- end -}}
{{- range $key := list "state" "redis" -}}
{{- if hasKey $v.config $key -}}
{{- fail (printf "config.%s: give the URL as %s.url (or %s.existingSecret) instead: the chart puts it into a Secret, and the migration Job reads it from there" $key (ternary "database" "redis" (eq $key "state")) (ternary "database" "redis" (eq $key "state"))) -}}
{{- end -}}
{{- end -}}
{{- $keys := false -}}
{{- range $name, $agent := ($v.config.agents | default dict) -}}
{{- if and (kindIs "map" $agent) $agent.key_sha256 -}}{{- $keys = true -}}{{- end -}}
{{- end -}}
{{- if not (or $keys (hasKey $v.config "auth") $v.agentKeysInDatabase) -}}
{{- fail "config.agents: no agent has a key_sha256, and no auth: is configured; toolgate serve listens beyond loopback in a pod and refuses to start without credentials. Add config.agents.NAME.key_sha256 (printf %s \"$KEY\" | sha256sum | cut -d' ' -f1), configure OAuth under config.auth, or set agentKeysInDatabase: true after adding keys with 'toolgate agents add' to the PostgreSQL database" -}}
{{- end -}}
{{- if and $v.agentKeysInDatabase (not (include "toolgate.hasDatabase" .)) -}}
{{- fail "agentKeysInDatabase: true needs database.url (or database.existingSecret): keys added with 'toolgate agents add' are kept in PostgreSQL" -}}
{{- end -}}
{{- range $folder, $files := $v.toolFolders -}}
{{- if not (regexMatch "^[a-z0-9][a-z0-9_-]*$" $folder) -}}
{{- fail (printf "toolFolders.%s: a tool folder's name is lowercase letters, digits, '-' and '_' (it becomes a directory and part of ConfigMap keys)" $folder) -}}
{{- end -}}
{{- if not (kindIs "map" $files) -}}
{{- fail (printf "toolFolders.%s: must map file names to their contents (tool.md: |, script.py: |)" $folder) -}}
{{- end -}}
{{- range $file, $_ := $files -}}
{{- if not (regexMatch "^[A-Za-z0-9][-._A-Za-z0-9]*$" $file) -}}
{{- fail (printf "toolFolders.%s.%s: a file name is letters, digits, '.', '-' and '_' (no folders)" $folder $file) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $file, $_ := $v.configFiles -}}
{{- if or (eq $file "toolgate.yaml") (not (regexMatch "^[A-Za-z0-9][-._A-Za-z0-9]*$" $file)) -}}
{{- fail (printf "configFiles.%s: a file name is letters, digits, '.', '-' and '_', and not toolgate.yaml (that one is config:)" $file) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* toolgate.yaml: config, with the mounted tool folders added to tool_folders. */}}
{{- define "toolgate.configYaml" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.toolFolders -}}
{{- $folders := get $config "tool_folders" | default list -}}
{{- $_ := set $config "tool_folders" (append $folders (dict "path" "/srv/toolgate/tools" "namespace" .Values.toolFoldersNamespace)) -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/*
checksum/secret of the pod template: changes with the inline secrets, so pods roll when they
change. Whoever may read Deployments sees it, and every byte of the Secret's manifest but the
secrets follows from the chart and the release's name: a plain SHA-256 of it would let a short
password be found offline at billions of guesses a second. So it is derived with scrypt (sprig's
derivePassword: 32 MiB and about 0.1 s a guess), salted with the release's namespace and name.
*/}}
{{- define "toolgate.secretChecksum" -}}
{{- $secret := include (print .Template.BasePath "/secret.yaml") . -}}
{{- if trim $secret -}}
{{- derivePassword 1 "maximum" $secret (printf "%s/%s" .Release.Namespace .Release.Name) "toolgate checksum/secret" | sha256sum -}}
{{- else -}}
{{- "none" -}}
{{- end -}}
{{- end -}}

{{/* An environment variable from a Secret: the chart's (inline value) or one of yours. */}}
{{- define "toolgate.secretEnv" -}}
{{- $ctx := index . 0 -}}{{- $envName := index . 1 -}}{{- $item := index . 2 -}}{{- $chartKey := index . 3 -}}{{- $secretName := index . 4 -}}
- name: {{ $envName }}
  valueFrom:
    secretKeyRef:
{{- if $item.existingSecret }}
      name: {{ $item.existingSecret }}
      key: {{ $item.existingSecretKey }}
{{- else }}
      name: {{ $secretName }}
      key: {{ $chartKey }}
{{- end }}
{{- end -}}

{{/* The shared-state environment of the server and the migration Job. */}}
{{- define "toolgate.stateEnv" -}}
{{- $ctx := index . 0 -}}{{- $secretName := index . 1 -}}
{{- if include "toolgate.hasDatabase" $ctx }}
{{ include "toolgate.secretEnv" (list $ctx "TOOLGATE_DATABASE_URL" $ctx.Values.database "database-url" $secretName) }}
{{- end }}
{{- if include "toolgate.hasRedis" $ctx }}
{{ include "toolgate.secretEnv" (list $ctx "TOOLGATE_REDIS_URL" $ctx.Values.redis "redis-url" $secretName) }}
{{- end }}
{{- if include "toolgate.hasSecretsKey" $ctx }}
{{ include "toolgate.secretEnv" (list $ctx "TOOLGATE_SECRETS_KEY" $ctx.Values.secretsKey "secrets-key" $secretName) }}
{{- end }}
{{- end -}}

{{/* The pod's security context (restricted Pod Security Standard). */}}
{{- define "toolgate.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ int .Values.securityContext.runAsUser }}
runAsGroup: {{ int .Values.securityContext.runAsGroup }}
fsGroup: {{ int .Values.securityContext.fsGroup }}
seccompProfile:
  {{- toYaml .Values.securityContext.seccompProfile | nindent 2 }}
{{- end -}}

{{- define "toolgate.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ int .Values.securityContext.runAsUser }}
runAsGroup: {{ int .Values.securityContext.runAsGroup }}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  {{- toYaml .Values.securityContext.seccompProfile | nindent 2 }}
{{- end -}}
