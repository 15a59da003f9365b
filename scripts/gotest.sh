#!/usr/bin/env bash
# Runs `go test "$@"` and, when it fails, ends the output with a summary that
# survives a truncated log: every failed test and package, and, for a test
# binary that timed out or was killed, the tests it was running and the
# first frames of its goroutines. A CI that keeps only the tail of the
# output then still says what hung.
set -uo pipefail
GO=${GO:-go}
log=$(mktemp "${TMPDIR:-/tmp}/crowdlog-gotest.XXXXXX")
trap 'rm -f "$log"' EXIT
"$GO" test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo
  echo "== go test failed (exit $rc); summary:"
  grep -E '^(--- FAIL|FAIL|panic: |\*\*\* Test killed)' "$log" | head -60
  if grep -q -E '^panic: test timed out|^\*\*\* Test killed' "$log"; then
    echo "== tests running when the time ran out:"
    awk '/running tests:/ {f = 1; next} f && /^\t\t/ {print; next} {f = 0}' "$log" | head -40
    echo "== first frames of goroutines in crowdlog code (of the timed-out binary):"
    grep -E '^github.com/crowdlog/crowdlog/' "$log" | sed 's/(.*//' | sort | uniq -c | sort -rn | head -40
  fi
fi
exit "$rc"
