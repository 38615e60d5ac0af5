#!/usr/bin/env bash
# system_info: the OS and the workspace's disk space (a toolgate demo tool folder).
#
# Runs two fixed, read-only commands and prints one JSON object with their output and a
# "shell-output" _visualization. The JSON is built in pure bash: command output is first cleaned
# of control characters (and of invalid UTF-8 when iconv is there), then \ " newline, carriage
# return and tab are escaped - nothing else can then break a JSON string.
set -u

cat >/dev/null # the input (workspacePath, sessionId) is not needed: the cwd is the workspace

clean() {
	if command -v iconv >/dev/null 2>&1; then
		iconv -f UTF-8 -t UTF-8 -c 2>/dev/null | LC_ALL=C tr -d '\000-\010\013\014\016-\037\177'
	else
		LC_ALL=C tr -d '\000-\010\013\014\016-\037\177'
	fi
}

json_string() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\n'/\\n}
	s=${s//$'\r'/\\r}
	s=${s//$'\t'/\\t}
	printf '"%s"' "$s"
}

errors=$(mktemp "${TMPDIR:-/tmp}/system_info.XXXXXX") || exit 1
trap 'rm -f "$errors"' EXIT

system=$(uname -srm 2>>"$errors" | clean)
system_status=${PIPESTATUS[0]}
disk=$(df -hP . 2>>"$errors" | clean)
disk_status=${PIPESTATUS[0]}
stderr=$(clean <"$errors")
exit_code=$((system_status != 0 ? system_status : disk_status))

command='uname -srm && df -hP .'
stdout="$system"$'\n'"$disk"$'\n'

printf '{"system": %s, "disk": %s, "exitCode": %d, ' \
	"$(json_string "$system")" "$(json_string "$disk")" "$exit_code"
printf '"_visualization": {"type": "shell-output", "command": %s, "stdout": %s, "stderr": %s, "exitCode": %d}}\n' \
	"$(json_string "$command")" "$(json_string "$stdout")" "$(json_string "$stderr")" "$exit_code"
