#!/usr/bin/env bash
# make bench-bounds: every stage's throughput per core next to its crypto
# bound, measured in one run on this machine. Prints, per stage,
#   BOUND <stage> measured=<value> bound=<value> unit=<unit> ratio=<measured/bound>
# Per-core figures are CPU time (getrusage), not wall time, except
# end-to-end, which is wall time against the crypto bound on all cores.
#
# Variables:
#   BOUNDS_E2E=0          skip end-to-end (`crowdlog run` on the bundled log,
#                         ~2.5 min on 2 cores; needs clickhouse-server)
#   BOUNDS_PENDING=N      pending-bytes: synthetic pending reports in one
#                         partition (default 10000000: ~40 s, 1.4 GB of
#                         memory and 3.5 GB of spill in the temp directory)
#   BOUNDS_MOVE=N         partition-move: pending reports in the moved
#                         partition (default 1000000: ~10 s, 0.5 GB of disk)
#   BOUNDS_USERS=N        aggregator-service: bundled-log users (default 200,
#                         ~52k reports; 1000 = all 254,775)
#   BOUNDS_RELAY_MSGS=N   relay: messages (default 20000)
#   BOUNDS_HPKE_N=N       HPKE open/seal iterations per size (default 3000)
#   BOUNDS_PRIO3_N=N      prio3-prep: reports prepared per measurement (default 20,
#                         SumVec b = 4 at L = 10,000 keywords, ~30 s)
#   BOUNDS_TOKENS=0       skip aggregator-service-tokens (report tokens),
#                         aggregator-service-arc (report tokens and FT_u ARC
#                         presentations) and end-to-end-tokens
#   BOUNDS_BIN=DIR        use prebuilt binaries instead of building: DIR holds
#                         onion.test arc.test ingest.test relays.test aggregator.test prio3.test
#                         (go test -c) and crowdlog (machines without Go)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
E2E=${BOUNDS_E2E:-1}
PENDING=${BOUNDS_PENDING:-10000000}
USERS=${BOUNDS_USERS:-200}
RELAY_MSGS=${BOUNDS_RELAY_MSGS:-20000}
HPKE_N=${BOUNDS_HPKE_N:-3000}
TOKENS=${BOUNDS_TOKENS:-1}
MOVE=${BOUNDS_MOVE:-1000000}
PRIO3_N=${BOUNDS_PRIO3_N:-20}
began=$(date +%s.%N)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=${BOUNDS_BIN:-$work/bin}
if [ -z "${BOUNDS_BIN:-}" ]; then
  mkdir -p "$bin"
  for p in protocol/onion protocol/arc ingest relays aggregator aggregator/prio3; do
    "$GO" test -c -o "$bin/$(basename "$p").test" "./$p"
  done
  "$GO" build -o "$bin/crowdlog" ./cmd/crowdlog
fi
bin=$(cd "$bin" && pwd)
out=$work/bench.txt
cores=$(nproc)

# bench DIR BINARY PATTERN BENCHTIME: run benchmarks in their package
# directory (they read ../testdata), keep the output in $out.
bench() {
  echo "== $2 $3 (benchtime $4)" >&2
  if ! (cd "$1" && CROWDLOG_BOUND_USERS=$USERS CROWDLOG_BOUND_PENDING=$PENDING CROWDLOG_BOUND_RELAY_MSGS=$RELAY_MSGS CROWDLOG_BOUND_MOVE=$MOVE \
    "$bin/$2" -test.run '^$' -test.bench "$3" -test.benchtime "$4" -test.timeout 60m) >"$work/one.txt" 2>&1; then
    tail -40 "$work/one.txt" >&2
    echo "bench-bounds: $2 $3 failed" >&2
    exit 1
  fi
  cat "$work/one.txt" >>"$out"
  grep '^Benchmark' "$work/one.txt" >&2
}
# metric NAME UNIT: the value reported with UNIT on benchmark NAME's line.
metric() {
  local v
  v=$(awk -v n="$1" -v u="$2" '{ name = $1; sub(/-[0-9]+$/, "", name) } name == n { for (i = 3; i <= NF; i++) if ($i == u) print $(i-1) }' "$out" | tail -1)
  [ -n "$v" ] || { echo "bench-bounds: no $2 for $1 in the output" >&2; exit 1; }
  echo "$v"
}
# metricmin NAME UNIT: the smallest value reported with UNIT on benchmark
# NAME's lines. Bounds are benchmarked three times, spread over the run (the
# machine's speed drifts by up to ±15% within one run), and the fastest
# counts: a bound is the best the crypto does on this machine.
metricmin() {
  local v
  v=$(awk -v n="$1" -v u="$2" '{ name = $1; sub(/-[0-9]+$/, "", name) } name == n { for (i = 3; i <= NF; i++) if ($i == u) print $(i-1) }' "$out" | sort -g | head -1)
  [ -n "$v" ] || { echo "bench-bounds: no $2 for $1 in the output" >&2; exit 1; }
  echo "$v"
}
# line STAGE MEASURED BOUND UNIT
line() { awk -v s="$1" -v m="$2" -v b="$3" -v u="$4" 'BEGIN { printf "BOUND %s measured=%.0f bound=%.0f unit=%s ratio=%.2f\n", s, m, b, u, m / b }'; }
# per second from nanoseconds per op
rate() { awk -v ns="$1" 'BEGIN { printf "%.3f", 1e9 / ns }'; }

# The two per-core service stages (relay, aggregator-service) run three
# times, spread over the run like their bound, and their fastest run
# counts too: a stage compared by its best run with a bound taken as the
# crypto's best of three would carry the machine's drift into the ratio.
stages() {
  bench relays relays.test '^BenchmarkBoundRelay$' 1x
  bench aggregator aggregator.test '^BenchmarkBoundAggregatorService$' 1x
}
bench protocol/onion onion.test '^BenchmarkBoundHPKE$' "${HPKE_N}x"
bench ingest ingest.test '^BenchmarkBoundClient$' 2s
bench ingest ingest.test '^BenchmarkBoundLogShape$' 1x
stages
bench protocol/onion onion.test '^BenchmarkBoundHPKE$' "${HPKE_N}x"
bench aggregator aggregator.test '^BenchmarkBoundPendingBytes$' 1x
bench aggregator aggregator.test '^BenchmarkBoundPartitionMove$' 1x
stages
if [ "$TOKENS" != 0 ]; then
  bench aggregator aggregator.test '^BenchmarkBoundTokenVerify$' "${HPKE_N}x"
  bench aggregator aggregator.test '^BenchmarkBoundAggregatorServiceTokens$' 1x
  bench aggregator aggregator.test '^BenchmarkBoundTokenVerify$' "${HPKE_N}x"
  bench protocol/arc arc.test '^BenchmarkVerifyPresentation$' 2s
  bench aggregator aggregator.test '^BenchmarkBoundAggregatorServiceARC$' 1x
  bench protocol/arc arc.test '^BenchmarkVerifyPresentation$' 2s
fi
bench protocol/onion onion.test '^BenchmarkBoundHPKE$' "${HPKE_N}x"
stages

open512=$(metricmin BenchmarkBoundHPKE/op=open/layer=512 cpu-ns/op)
open1024=$(metricmin BenchmarkBoundHPKE/op=open/layer=1024 cpu-ns/op)
open1536=$(metricmin BenchmarkBoundHPKE/op=open/layer=1536 cpu-ns/op)
seal512=$(metricmin BenchmarkBoundHPKE/op=seal/layer=512 cpu-ns/op)
seal1024=$(metricmin BenchmarkBoundHPKE/op=seal/layer=1024 cpu-ns/op)
seal1536=$(metricmin BenchmarkBoundHPKE/op=seal/layer=1536 cpu-ns/op)
submit=$(metric BenchmarkBoundClient/op=submit cpu-ns/op)
derive=$(metric BenchmarkBoundClient/op=derive cpu-ns/op)
sealrep=$(metric BenchmarkBoundClient/op=seal-report cpu-ns/op)
voprf=$(metric BenchmarkBoundClient/op=voprf-client cpu-ns/op)
oprfeval=$(metric BenchmarkBoundClient/op=oprf-eval cpu-ns/op)
logreports=$(metric BenchmarkBoundLogShape reports)
logderiv=$(metric BenchmarkBoundLogShape derivations)
relaymsg=$(metricmin BenchmarkBoundRelay/cores=all cpu-ns/msg)
relay1msg=$(metricmin BenchmarkBoundRelay/cores=1 cpu-ns/msg)
aggrep=$(metricmin BenchmarkBoundAggregatorService cpu-ns/report)
# every run of the compared figures, so the spread is on record
for m in 'BenchmarkBoundHPKE/op=open/layer=512 cpu-ns/op' 'BenchmarkBoundHPKE/op=open/layer=1024 cpu-ns/op' \
  'BenchmarkBoundRelay/cores=all cpu-ns/msg' 'BenchmarkBoundRelay/cores=1 cpu-ns/msg' 'BenchmarkBoundAggregatorService cpu-ns/report'; do
  set -- $m
  echo "runs of $1 ($2): $(awk -v n="$1" -v u="$2" '{ name = $1; sub(/-[0-9]+$/, "", name) } name == n { for (i = 3; i <= NF; i++) if ($i == u) printf "%s ", $(i-1) }' "$out")" >&2
done
aggn=$(metric BenchmarkBoundAggregatorService reports)
pending=$(metric BenchmarkBoundPendingBytes rss-B/report)
move=$(metric BenchmarkBoundPartitionMove move-s)

# client bound per artifact: 3 HPKE seals (512, 1024, 1536 B), the sealing
# derivation, the report seal (no VOPRF: the measured path uses a stub)
clientns=$(awk -v a="$seal512" -v b="$seal1024" -v c="$seal1536" -v d="$derive" -v s="$sealrep" 'BEGIN { print a + b + c + d + s }')
lines=()
lines+=("$(line hpke-open "$(rate "$open512")" "$(rate "$open512")" 'opens/s/core(512B)')")
lines+=("$(line aggregator-service "$(rate "$aggrep")" "$(rate "$open512")" 'reports/s/core')")
lines+=("$(line relay "$(rate "$relaymsg")" "$(rate "$open1024")" 'msgs/s/core(1024B)')")
# the same relay as one process per core (GOMAXPROCS=1), how operators
# scale relays out
lines+=("$(line relay-1core "$(rate "$relay1msg")" "$(rate "$open1024")" 'msgs/s/core(1024B)')")
lines+=("$(line client-seal "$(rate "$submit")" "$(rate "$clientns")" 'artifacts/s/core')")
if [ "$TOKENS" != 0 ]; then
  # with report tokens: bound = the aggregator layer's open plus one
  # report token's verification for each report whose group reaches k
  # (verification at the threshold: opening-fraction, computed by the
  # benchmark from the raw log)
  tokverify=$(metricmin BenchmarkBoundTokenVerify cpu-ns/op)
  aggtok=$(metric BenchmarkBoundAggregatorServiceTokens cpu-ns/report)
  opens=$(metric BenchmarkBoundAggregatorServiceTokens opening-fraction)
  lines+=("$(line aggregator-service-tokens "$(rate "$aggtok")" "$(rate "$(awk -v a="$open512" -v t="$tokverify" -v f="$opens" 'BEGIN { print a + f * t }')")" 'reports/s/core')")
  echo "aggregator with report tokens: $(awk -v a="$aggrep" -v t="$aggtok" 'BEGIN { printf "%.2f", a / t }')x the throughput per core without (token verify $tokverify ns)" >&2
  # with report tokens and FT_u ARC presentations (tokens on, the
  # default): bound = the open, plus the report token and one
  # presentation's verification for each report whose group reaches k
  # (each report carries one; the others are never verified)
  arcverify=$(metricmin BenchmarkVerifyPresentation ns/op)
  aggarc=$(metric BenchmarkBoundAggregatorServiceARC cpu-ns/report)
  lines+=("$(line aggregator-service-arc "$(rate "$aggarc")" "$(rate "$(awk -v a="$open512" -v t="$tokverify" -v v="$arcverify" -v f="$opens" 'BEGIN { print a + f * (t + v) }')")" 'reports/s/core')")
  echo "aggregator with report tokens and ARC: $(awk -v a="$aggrep" -v t="$aggarc" 'BEGIN { printf "%.3f", a / t }')x the throughput per core of aggregator-service (tokens off), same run (ARC verify $arcverify ns)" >&2
fi

if [ "$E2E" != 0 ]; then
  echo "== end-to-end: crowdlog run --app query --policy ft-u --k 5 --tokens off on the bundled log" >&2
  state=$work/e2e
  mkdir -p "$state"
  t0=$(date +%s.%N)
  TIMEFORMAT='end-to-end CPU: user %U s, sys %S s, wall %R s'
  # --tokens off: this bound sums the HPKE and VOPRF work; Privacy Pass
  # tokens and ARC have their own figures in docs/benchmarks.md
  { time "$bin/crowdlog" run --input testdata/aol-top1000.tsv.gz --app query --policy ft-u --k 5 --tokens off \
      --state "$state" --export "$state/out.tsv" >"$work/e2e.txt" 2>&1; } 2>>"$work/e2e.time" ||
    { cat "$work/e2e.txt" >&2; echo "bench-bounds: crowdlog run failed (BOUNDS_E2E=0 skips it)" >&2; exit 1; }
  t1=$(date +%s.%N)
  grep -E '^  (reports|items)' "$work/e2e.txt" >&2 || true
  cat "$work/e2e.time" >&2
  sent=$(awk '$1 == "reports" && $2 == "sent" { print $3 }' "$work/e2e.txt")
  [ -n "$sent" ] || { cat "$work/e2e.txt" >&2; echo "bench-bounds: no 'reports sent' in crowdlog run's output" >&2; exit 1; }
  # crypto per report: 3 seals, the report seal, per distinct artifact per
  # user the derivation and the VOPRF (client and service), 3 opens
  perreport=$(awk -v s1="$seal512" -v s2="$seal1024" -v s3="$seal1536" -v sr="$sealrep" -v d="$derive" -v v="$voprf" -v e="$oprfeval" \
    -v o1="$open512" -v o2="$open1024" -v o3="$open1536" -v nd="$logderiv" -v nr="$logreports" \
    'BEGIN { print s1 + s2 + s3 + sr + (d + v + e) * nd / nr + o1 + o2 + o3 }')
  # the same bound against CPU time (crowdlog run and its children,
  # ClickHouse included), fairer than wall time on a shared machine
  awk -v p="$perreport" -v n="$sent" '/^end-to-end CPU/ { cpu = ($4 + $7) * 1e9 / n;
    printf "end-to-end CPU per report: %.0f ns; crypto bound / CPU per report = %.2f\n", cpu, p / cpu }' "$work/e2e.time" >&2
  echo "end-to-end crypto per report: $perreport ns (derivations per report $(awk -v a="$logderiv" -v b="$logreports" 'BEGIN { printf "%.3f", a / b }')), $cores cores" >&2
  lines+=("$(line end-to-end "$(awk -v n="$sent" -v a="$t0" -v b="$t1" 'BEGIN { print n / (b - a) }')" \
    "$(awk -v c="$cores" -v p="$perreport" 'BEGIN { print c * 1e9 / p }')" "reports/s(${cores}cores)")")
  if [ "$TOKENS" != 0 ]; then
    # the same run with tokens on (the default): every randomness token,
    # report token, ARC credential and presentation made and checked;
    # bound: the tokens-off crypto plus, per report, its report token's
    # and presentation's verification
    echo "== end-to-end-tokens: crowdlog run --app query --policy ft-u --k 5 (tokens on) on the bundled log" >&2
    state=$work/e2e-tokens
    mkdir -p "$state"
    t0=$(date +%s.%N)
    { time "$bin/crowdlog" run --input testdata/aol-top1000.tsv.gz --app query --policy ft-u --k 5 \
        --state "$state" --export "$state/out.tsv" >"$work/e2e-tokens.txt" 2>&1; } 2>>"$work/e2e-tokens.time" ||
      { cat "$work/e2e-tokens.txt" >&2; echo "bench-bounds: crowdlog run (tokens on) failed" >&2; exit 1; }
    t1=$(date +%s.%N)
    cat "$work/e2e-tokens.time" >&2
    sentt=$(awk '$1 == "reports" && $2 == "sent" { print $3 }' "$work/e2e-tokens.txt")
    cmp -s "$work/e2e/out.tsv" "$state/out.tsv" || echo "bench-bounds: the tokens-on export differs from the tokens-off one" >&2
    perreportt=$(awk -v p="$perreport" -v t="$tokverify" -v v="$arcverify" 'BEGIN { print p + t + v }')
    lines+=("$(line end-to-end-tokens "$(awk -v n="$sentt" -v a="$t0" -v b="$t1" 'BEGIN { print n / (b - a) }')" \
      "$(awk -v c="$cores" -v p="$perreportt" 'BEGIN { print c * 1e9 / p }')" "reports/s(${cores}cores)")")
  fi
fi
# prio3-prep: each Prio3 aggregator's preparation through its state machine
# (HPKE opens, PrepInit, proof check, PrepNext, commit) in reports/s on one
# core, against circl's bare PrepInit (+ PrepSharesToPrep at the helper) on
# the same reports in the same run; SumVec b = 4, L = 10,000 keywords.
echo "== prio3.test BenchmarkPrep/sumvec-b4 (benchtime ${PRIO3_N}x, GOMAXPROCS=1)" >&2
if ! (cd aggregator/prio3 && GOMAXPROCS=1 "$bin/prio3.test" -test.run '^$' -test.bench '^BenchmarkPrep$/^sumvec-b4$' \
  -test.benchtime "${PRIO3_N}x" -test.timeout 30m) >"$work/prio3.txt" 2>&1; then
  tail -40 "$work/prio3.txt" >&2
  echo "bench-bounds: prio3.test BenchmarkPrep failed" >&2
  exit 1
fi
prio3=$(grep -o 'PRIO3 sumvec-b4 .*' "$work/prio3.txt" | tail -1)
[ -n "$prio3" ] || { cat "$work/prio3.txt" >&2; echo "bench-bounds: no PRIO3 line" >&2; exit 1; }
echo "$prio3" >&2
prio3get() { printf '%s\n' "$prio3" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'; }
for role in leader helper; do
  lines+=("$(line "prio3-prep-$role" "$(awk -v x="$(prio3get "${role}_ms")" 'BEGIN { print 1000 / x }')" \
    "$(awk -v x="$(prio3get "bare_${role}_ms")" 'BEGIN { print 1000 / x }')" 'reports/s/core')")
done
# bytes a Prio3 client publishes per day (the onion to relay a, padded to
# its size class) against the upload itself (public share, leader share,
# sealed helper share: what any transport must carry)
lines+=("$(line prio3-client-bytes "$(prio3get wire_bytes)" "$(prio3get upload_bytes)" 'B/client/day(lower-is-better)')")
lines+=("$(line pending-bytes "$pending" 200 'B/report(lower-is-better)')")
# a partition of MOVE pending reports moved with snapshots: restore plus
# the tail after the snapshot (SnapshotEvery messages), seconds
lines+=("$(awk -v m="$move" 'BEGIN { printf "BOUND partition-move measured=%.2f bound=3 unit=s(lower-is-better) ratio=%.2f\n", m, m / 3 }')")

echo >&2
echo "bench-bounds: aggregator-service over $aggn reports; pending-bytes over $PENDING reports; partition-move at $MOVE pending reports; $cores cores; $(awk -v a="$began" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') s in all" >&2
printf '%s\n' "${lines[@]}"
