#!/usr/bin/env bash
# make demo: install what is missing, build, run the whole pipeline on the
# bundled real AOL subset, show what an analyst gets from ClickHouse and
# write the HTML report; the last line printed is the report's path.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! command -v clickhouse-server >/dev/null 2>&1 || ! command -v clickhouse-client >/dev/null 2>&1; then
  echo "== installing ClickHouse (Debian package)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clickhouse-server clickhouse-client >/dev/null
fi
echo "== building crowdlog"
go build -o bin/crowdlog ./cmd/crowdlog

STATE=demo-state
rm -rf "$STATE"; mkdir -p "$STATE"
echo "== starting a local ClickHouse server in $STATE/clickhouse"
bin/crowdlog clickhouse --dir "$STATE/clickhouse" >"$STATE/clickhouse.out" 2>&1 &
CH_PID=$!
trap 'kill $CH_PID 2>/dev/null; wait $CH_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do [ -s "$STATE/clickhouse/addr.env" ] && break; sleep 0.2; done
[ -s "$STATE/clickhouse/addr.env" ] || { cat "$STATE/clickhouse.out"; exit 1; }
. "$STATE/clickhouse/addr.env"

echo "== crowdlog clickhouse init: the release database crowdlog, the analyst database"
echo "   crowdlog_analyst (what was released, and the views) and the read-only user analyst"
(umask 077; head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$STATE/analyst-password")
bin/crowdlog clickhouse init --dir "$STATE/clickhouse" --password-file "$STATE/analyst-password"
# clickhouse-client logs in from a config file (mode 0600), not from a
# --password argument that every local user sees in ps (18.16's client
# reads no password from the environment); printf is a shell builtin
(umask 077; printf '<config><user>analyst</user><password>%s</password></config>\n' "$(cat "$STATE/analyst-password")" > "$STATE/analyst-client.xml")

echo "== crowdlog run: 1,000 real AOL users, query frequency, FT_u with k = 5"
echo "   (embedded NATS relays a and b, kfake Kafka broker, aggregator, release -> ClickHouse)"
bin/crowdlog run --input testdata/aol-top1000.tsv.gz --app query --policy ft-u --k 5 \
  --clickhouse "$CH_TCP" --state "$STATE" --export "$STATE/released.tsv"

# as the analyst: SELECT on crowdlog_analyst only (the release database's raw tables are refused)
q() { echo; echo "clickhouse-client --user analyst> $1"; clickhouse-client --config-file "$STATE/analyst-client.xml" --port "$CH_TCP_PORT" \
  --database crowdlog_analyst --format PrettyCompact --query "$1"; }
echo
echo "== what an analyst sees (only artifacts that at least k = 5 distinct users sent)"
q "SELECT query, impressions, users FROM released_queries WHERE policy = 'ft-u' AND k = 5 ORDER BY impressions DESC, query LIMIT 10"
q "SELECT epoch, impressions AS released_impressions, undecrypted AS undecrypted_reports, round(impressions / (impressions + undecrypted), 4) AS share_of_impressions_released FROM completed_releases ANY LEFT JOIN (SELECT app, epoch, policy, k, sum(tags * reports) AS undecrypted FROM released_undecrypted GROUP BY app, epoch, policy, k) USING (app, epoch, policy, k) WHERE app = 'query' AND policy = 'ft-u' AND k = 5"
q "SELECT reports, users, tags AS undecrypted_artifacts FROM released_undecrypted WHERE app = 'query' AND policy = 'ft-u' AND k = 5 ORDER BY reports DESC, users DESC LIMIT 8"
echo
echo "clickhouse-client --user analyst> SELECT count() FROM crowdlog.released_items   (a raw table of the release database)"
clickhouse-client --config-file "$STATE/analyst-client.xml" --port "$CH_TCP_PORT" \
  --query "SELECT count() FROM crowdlog.released_items" 2>&1 | grep -o 'Access denied to database [a-z_]* for user [a-z_]*' || true
echo
echo "== export: $STATE/released.tsv ($(($(wc -l < "$STATE/released.tsv") - 1)) items)"

echo
echo "== crowdlog run --epoch-length 168h: the same log replayed week by week, FT_u with k = 3"
echo "   (each week is an epoch START-168h, released on its own into the same database)"
bin/crowdlog run --input testdata/aol-top1000.tsv.gz --app query --policy ft-u --k 3 --epoch-length 168h \
  --clickhouse "$CH_TCP" --state "$STATE/weekly" --export "$STATE/weekly.tsv"
echo
echo "== per week (aggregates only): artifacts released, their impressions, the share of the week's reports released"
q "SELECT epoch, count() AS artifacts, sum(impressions) AS impressions FROM released_queries WHERE policy = 'ft-u' AND k = 3 GROUP BY epoch ORDER BY epoch"
q "SELECT epoch, impressions AS released_impressions, undecrypted AS undecrypted_reports, round(impressions / (impressions + undecrypted), 4) AS share_of_impressions_released FROM completed_releases ANY LEFT JOIN (SELECT app, epoch, policy, k, sum(tags * reports) AS undecrypted FROM released_undecrypted GROUP BY app, epoch, policy, k) USING (app, epoch, policy, k) WHERE app = 'query' AND policy = 'ft-u' AND k = 3 ORDER BY epoch_start, epoch"
q "SELECT weeks_released, count() AS queries FROM (SELECT query, count() AS weeks_released FROM released_queries WHERE policy = 'ft-u' AND k = 3 AND epoch_start IS NOT NULL GROUP BY query) GROUP BY weeks_released ORDER BY weeks_released DESC"
echo
echo "== export: $STATE/weekly.tsv ($(($(wc -l < "$STATE/weekly.tsv") - 1)) items over all weeks)"

echo
# Both PDD modes count the same 1,000 monitored keywords (the first 1,000 of
# the default list) over the log's first 3 days, so their counts stand side
# by side (fewer days than the weeks above keep the demo short).
head -n 1000 ingest/keywords/google-10000-english.txt > "$STATE/keywords-1000.txt"
echo "== crowdlog pdd: the same users as Private Data Donor clients, 3 days, groups of 50"
echo "   (daily keyword counts; the aggregator sees only sums over blinded groups)"
bin/crowdlog pdd --input testdata/aol-top1000.tsv.gz --max-days 3 --group-size 50 --delay 2 \
  --keywords "$STATE/keywords-1000.txt" --clickhouse "$CH_TCP" --state "$STATE/pdd" --export "$STATE/pdd.tsv"
echo
echo "== crowdlog pdd --mode prio3: the same clients and days, one upload per client and day"
echo "   to two aggregators (leader and helper, Prio3 with a range proof); exact shares here"
echo "   so the counts compare with the groups mode's (the default adds ε = 1 per person-day"
echo "   of Laplace noise at each aggregator: docs/pdd.md, docs/benchmarks.md)"
bin/crowdlog pdd --mode prio3 --campaign pdd-prio3 --input testdata/aol-top1000.tsv.gz --max-days 3 \
  --keywords "$STATE/keywords-1000.txt" --epsilon 0 --exact-shares \
  --clickhouse "$CH_TCP" --state "$STATE/pdd-prio3" --export "$STATE/pdd-prio3.tsv"
echo
echo "== the two modes side by side (groups: exact sums of the members decrypted, unclipped without"
echo "   noise; prio3: each client's count clipped to 15 per keyword and 20 per day)"
q "SELECT campaign, day, active, decrypted, groups, groups_recovered, groups_lost, round(confidence, 3) AS confidence FROM pdd_rounds FINAL WHERE campaign IN ('pdd', 'pdd-prio3') ORDER BY campaign, day"
q "SELECT keyword, sumIf(count, campaign = 'pdd') AS groups, sumIf(count, campaign = 'pdd-prio3') AS prio3 FROM keyword_daily WHERE campaign IN ('pdd', 'pdd-prio3') AND length(keyword) >= 4 GROUP BY keyword ORDER BY groups DESC, keyword LIMIT 8"
q "SELECT day, sumIf(count, campaign = 'pdd') AS groups, sumIf(count, campaign = 'pdd-prio3') AS prio3 FROM keyword_daily WHERE campaign IN ('pdd', 'pdd-prio3') AND keyword = 'free' GROUP BY day ORDER BY day"
echo
echo "== exports: $STATE/pdd.tsv (groups), $STATE/pdd-prio3.tsv (prio3)"
echo

echo "== crowdlog report: one HTML page with plots of what was released (top artifacts,"
echo "   share released per epoch, top artifacts across the weeks, what stayed encrypted,"
echo "   privacy ledger, and per PDD campaign the daily keyword counts with 'free' followed)"
bin/crowdlog report --clickhouse "$CH_TCP" --user analyst --password-file "$STATE/analyst-password" --keyword free --out "$STATE/report.html"
echo "$(pwd)/$STATE/report.html"
