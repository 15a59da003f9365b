#!/usr/bin/env bash
# make attacks: runs every attack test (Go tests named TestAttack*, each of
# which mounts one attack of docs/threat-model.md against real state) and
# prints one line per attack:
#   ATTACK <name>: <outcome with numbers>
# It exits non-zero when any attack test fails (the attack succeeded where
# the threat model says it must not) or when no attack ran at all.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
$GO test -count=1 -timeout 30m -v -run '^TestAttack' ./... >"$out" 2>&1
rc=$?
grep -E '^ATTACK ' "$out" | sort
n=$(grep -cE '^ATTACK ' "$out")
if [ "$rc" -ne 0 ]; then
  echo "attacks: go test failed (exit $rc); the failing tests:" >&2
  # each failure line and, after a "x_test.go:N:" line, its continuation
  # lines (more indented, up to the next ---/=== or less indented line):
  # a message listing operations puts them there
  awk '
    /^([ \t]*--- FAIL|FAIL|panic:)/ { print; cont = 0; next }
    match($0, /^[ \t]+[^ \t]+_test\.go:[0-9]+:/) {
      print; cont = 1; ind = match($0, /[^ \t]/); next
    }
    cont && /^[ \t]/ && match($0, /[^ \t]/) > ind && $0 !~ /^[ \t]*(---|===)/ { print; next }
    { cont = 0 }
  ' "$out" >&2
  exit 1
fi
if [ "$n" -eq 0 ]; then
  echo "attacks: no ATTACK lines printed: no attack test ran" >&2
  exit 1
fi
echo "attacks: $n attacks, all held"
