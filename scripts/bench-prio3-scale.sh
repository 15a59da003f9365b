#!/usr/bin/env bash
# make bench-prio3-scale: Prio3 mode's scale curve. For each size in SIZES
# (default 1000,10000) the leader and the helper run as processes of their
# own on n uploads of one day (SumVec, L = 10,000 keywords, b = 4; sealed by
# the benchmark process, with a leader and a helper token each, so the
# clients' and issuers' CPU is not the aggregators'; both check every
# token), then
# the day is collected and the collector's totals are compared with the
# clients' sums. Prints per size
#   PRIO3SCALE n=… leader_ups_core=… helper_ups_core=… leader_rss_mb=… … collect_s=… correct=…
# and BOUND lines (`BOUND <stage> measured=… bound=… unit=… ratio=…`): each
# aggregator's uploads/s per core against bare circl's preparation on the
# same machine (BenchmarkPrep sumvec-b4: PrepInit as aggregator 0; PrepInit
# as aggregator 1 + PrepSharesToPrep), peak RSS against 500 MB.
#
# Variables:
#   SIZES=1000,10000[,100000]  upload counts (100,000 uploads: about an
#                              hour on 2 cores, most of it the clients'
#                              sealing; the broker's disk stays at a few
#                              hundred MB because the benchmark deletes
#                              the uploads the leader's snapshots passed,
#                              LeaderService.Applied; docs/benchmarks.md)
#   RATE=R                     pace the clients at R uploads a second, each
#                              written as it is sealed (default: as fast as
#                              they are sealed, a backlog): at a trickle the
#                              disk written per upload is the steps' count
#                              (leader --step-fill)
#   FILL=D                     the leader's step fill (LeaderService.StepFill,
#                              default 1s; -1ns: none, each step takes what
#                              has arrived)
#   PRIO3_N=N                  reports of the bare circl bound (default 10)
#   CROWDLOG_PRIO3_L=N         keywords (default 10000)
set -euo pipefail
# main: bash reads the whole function before running it, so a script
# edited during a run (hours at large SIZES) does not change that run
main() {
cd "$(dirname "$0")/.."
GO=${GO:-go}
SIZES=${SIZES:-1000,10000}
PRIO3_N=${PRIO3_N:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$GO" test -c -o "$work/prio3.test" ./aggregator/prio3
cd aggregator/prio3
echo "== bare circl bound: BenchmarkPrep/sumvec-b4 (${PRIO3_N}x, GOMAXPROCS=1)" >&2
GOMAXPROCS=1 "$work/prio3.test" -test.run '^$' -test.bench '^BenchmarkPrep$/^sumvec-b4$' -test.benchtime "${PRIO3_N}x" \
  -test.timeout 30m >"$work/prep.txt" 2>&1 || { tail -40 "$work/prep.txt" >&2; exit 1; }
prio3=$(grep -o 'PRIO3 sumvec-b4 .*' "$work/prep.txt" | tail -1)
echo "$prio3" >&2
get() { printf '%s\n' "$2" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'; }
bare_leader=$(awk -v x="$(get bare_leader_ms "$prio3")" 'BEGIN { print 1000 / x }')
bare_helper=$(awk -v x="$(get bare_helper_ms "$prio3")" 'BEGIN { print 1000 / x }')
echo "== BenchmarkPrio3Scale SIZES=$SIZES" >&2
CROWDLOG_PRIO3_SCALE_SIZES=$SIZES CROWDLOG_PRIO3_SCALE_RATE=${RATE:-0} CROWDLOG_PRIO3_SCALE_FILL=${FILL:-} "$work/prio3.test" -test.run '^$' -test.bench '^BenchmarkPrio3Scale$' -test.benchtime 1x \
  -test.timeout 5h >"$work/scale.txt" 2>&1 || { grep -v '^20[0-9][0-9]/' "$work/scale.txt" | tail -40 >&2; exit 1; }
grep '^PRIO3SCALE' "$work/scale.txt"
line() { awk -v s="$1" -v m="$2" -v b="$3" -v u="$4" 'BEGIN { printf "BOUND %s measured=%.0f bound=%.0f unit=%s ratio=%.2f\n", s, m, b, u, m / b }'; }
grep '^PRIO3SCALE' "$work/scale.txt" | while read -r l; do
  n=$(get n "$l")
  line "prio3-scale-leader-n$n" "$(get leader_ups_core "$l")" "$bare_leader" 'uploads/s/core'
  line "prio3-scale-helper-n$n" "$(get helper_ups_core "$l")" "$bare_helper" 'uploads/s/core'
  line "prio3-scale-leader-rss-n$n" "$(get leader_rss_mb "$l")" 500 'MB(lower-is-better)'
  line "prio3-scale-helper-rss-n$n" "$(get helper_rss_mb "$l")" 500 'MB(lower-is-better)'
done
}
main "$@"
exit
