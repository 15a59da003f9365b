package runner

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
	"github.com/crowdlog/crowdlog/release/stage"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// TestRunDPu runs `crowdlog run --policy dp-u` (d = 3) on the bundled log
// through real NATS, kfake and ClickHouse and checks: every released item
// is among the users' d most recent distinct queries with ≥ k_shamir users
// (raw-log truth), released counts are non-negative integers with users =
// impressions, the ledger row records the achieved (ε, δ), and a second
// release over the budget is refused before ingesting.
func TestRunDPu(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole bundled log: the full suite (make test) runs it; -short (and so the race run) does not")
	}
	needClickHouse(t)
	dir := t.TempDir()
	input := bundled // 1,000 users, at most d = 3 reports each
	out := filepath.Join(dir, "dp.tsv")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ch := startClickHouse(ctx, t, dir)
	defer ch.Stop()
	dp := policy.Params{Epsilon: 10, D: 3, ShamirK: 2, Users: 1000} // U: the bundled log's population, configured
	// Tokens off: the release is what this checks (tokens on the whole log
	// run in TestRunEndToEnd and TestRunDPGaussianSetUnion).
	cfg := Config{Input: input, App: "query", Policy: "dp-u", DP: dp, Export: out, Dataset: "test", TokensOff: true,
		Budget: release.Budget{Epsilon: 15}, StateDir: filepath.Join(dir, "state"), Partitions: 2,
		ClickHouse: ch.TCPAddr, Database: "dptest"}
	sum, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := ResolvePolicy("dp-u", 5, dp)
	if err != nil {
		t.Fatal(err)
	}
	limited, err := truth.RecentDistinctUsers(input, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := truth.ReadExport(out)
	if err != nil {
		t.Fatal(err)
	}
	for item, row := range got {
		if limited[item] < pol.ShamirK {
			t.Fatalf("released an item with %d < k_shamir=%d users among the limited data", limited[item], pol.ShamirK)
		}
		if row.Users != row.Impressions || row.Users < 0 {
			t.Fatalf("released counts %d/%d", row.Impressions, row.Users)
		}
	}
	t.Logf("%s; sent %d reports, %d items released", pol, sum.Sent, len(got))
	if sum.Sent > int64(3*1000) {
		t.Fatalf("clients sent %d reports, more than d=3 per user", sum.Sent)
	}

	w, err := release.Open(ctx, ch.TCPAddr, "dptest")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rows, err := w.Ledger(ctx, "test", "all")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Policy != "dp-u" || rows[0].K != pol.ShamirK || rows[0].App != "query" ||
		math.Abs(rows[0].Epsilon-pol.AchievedEpsilon) > 1e-9 || math.Abs(rows[0].Delta-pol.AchievedDelta) > 1e-12 {
		t.Fatalf("ledger %+v, want one dp-u row spending (%v, %v)", rows, pol.AchievedEpsilon, pol.AchievedDelta)
	}
	// the same epoch again, another app: over the ε budget of 15, refused before ingest
	cfg.App, cfg.Export, cfg.StateDir = "keyword", "", filepath.Join(dir, "state2")
	if _, err := Run(ctx, cfg); !errors.Is(err, release.ErrOverBudget) {
		t.Fatalf("second DP release in the epoch: err %v, want ErrOverBudget", err)
	}
	if rows, _ := w.Ledger(ctx, "test", "all"); len(rows) != 1 {
		t.Fatalf("refused release spent: ledger has %d rows", len(rows))
	}
}

// TestRunDPSetUnion runs `crowdlog run --policy dp-su` (window d = 100,
// the paper's ε = ln 10 and δ = 1/(U+1)) on the bundled log through real
// NATS, kfake and ClickHouse, three times with k_shamir = 1 and twice with
// the default 2, and checks each release against the raw log: every
// released query was chosen by at least k_shamir users under the client
// rule (truth.FrequentRecentUsers, written apart from the client), users =
// impressions, each released count is within b·ln(10⁶) of the true count (a
// Laplace draw outside has probability 10⁻⁶), and the ledger spends exactly
// (ε, δ). Over the runs (fresh noise each: the release draws from crypto
// randomness), the total number released is within 4 standard deviations
// (+1) of its expectation computed here from the raw-log counts and the
// Laplace tail (a sum of independent Bernoullis).
func TestRunDPSetUnion(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole bundled log: the full suite (make test) runs it; -short (and so the race run) does not")
	}
	needClickHouse(t)
	const window = 100
	eps, b := math.Ln10, 1/math.Ln10
	chosen, err := truth.FrequentRecentUsers(bundled, window, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ shamirK, runs int }{{1, 3}, {2, 2}} {
		dp := policy.Params{Epsilon: eps, D: window, ShamirK: c.shamirK, Users: 1000}
		pol, err := ResolvePolicy("dp-su", 5, dp)
		if err != nil {
			t.Fatal(err)
		}
		T := float64(c.shamirK) + b*math.Log(1/(2*pol.Delta))
		var mean, variance float64
		for _, n := range chosen {
			p := 0.0
			if n < c.shamirK {
				continue
			} else if x := float64(n) - T; x > 0 {
				p = 1 - 0.5*math.Exp(-eps*x)
			} else {
				p = 0.5 * math.Exp(eps*x)
			}
			mean, variance = mean+p, variance+p*(1-p)
		}
		released := 0
		for run := range c.runs {
			released += runSetUnion(t, dp, pol, chosen, fmt.Sprintf("k%d-%d", c.shamirK, run))
		}
		runs := float64(c.runs)
		if sd := math.Sqrt(runs * variance); math.Abs(float64(released)-runs*mean) > 4*sd+1 {
			t.Fatalf("k_shamir %d: released %d queries in %d runs, expectation %.2f ± %.2f (raw log, Laplace tail)",
				c.shamirK, released, c.runs, runs*mean, sd)
		}
		t.Logf("k_shamir %d: released %d in %d runs, expected %.2f ± %.2f", c.shamirK, released, c.runs, runs*mean, math.Sqrt(runs*variance))
	}
}

// runSetUnion runs one dp-su release of the bundled log in a fresh
// cluster and returns how many queries it released, after checking each
// against chosen (users per query under the client rule) and the ledger.
func runSetUnion(t *testing.T, dp policy.Params, pol *policy.Policy, chosen map[string]int, name string) int {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "dpsu.tsv")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ch := startClickHouse(ctx, t, dir)
	defer ch.Stop()
	db := "dpsu_" + strings.ReplaceAll(name, "-", "_")
	// Tokens off: the released set's statistics are what this checks
	// (tokens on the whole log run in TestRunEndToEnd and
	// TestRunDPGaussianSetUnion).
	cfg := Config{Input: bundled, App: "query", Policy: "dp-su", DP: dp, Export: out, Dataset: "test", TokensOff: true,
		StateDir: filepath.Join(dir, "state"), Partitions: 2, ClickHouse: ch.TCPAddr, Database: db}
	sum, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := truth.ReadExport(out)
	if err != nil {
		t.Fatal(err)
	}
	for item, row := range got {
		n := chosen[item]
		if n < pol.ShamirK {
			t.Fatalf("%s: released a query %d users chose, below k_shamir %d", name, n, pol.ShamirK)
		}
		if row.Users != row.Impressions {
			t.Fatalf("%s: released users %d != impressions %d", name, row.Users, row.Impressions)
		}
		if d := math.Abs(float64(row.Users) - float64(n)); d > pol.B*math.Log(1e6)+0.5 {
			t.Fatalf("%s: released count %d is %.1f from the true %d: more than b·ln(10⁶)", name, row.Users, d, n)
		}
	}
	if sum.Sent > 1000 {
		t.Fatalf("%s: clients sent %d reports, more than one per user", name, sum.Sent)
	}
	w, err := release.Open(ctx, ch.TCPAddr, db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rows, err := w.Ledger(ctx, "test", "all")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Policy != "dp-su" || rows[0].K != pol.ShamirK ||
		math.Abs(rows[0].Epsilon-pol.AchievedEpsilon) > 1e-9 || math.Abs(rows[0].Delta-pol.AchievedDelta) > 1e-12 {
		t.Fatalf("%s: ledger %+v, want one dp-su row spending (%v, %v)", name, rows, pol.AchievedEpsilon, pol.AchievedDelta)
	}
	t.Logf("%s: %s; sent %d reports; released %d", name, pol, sum.Sent, len(got))
	return len(got)
}

// TestRunDPGaussianSetUnion runs the bundled log through every real part
// under dp-gsu (m = 20, k_s = 2): the number released must match the
// expectation computed here from the raw log under the client rule
// (truth.FrequentTopUsers, written independently of ingest) and the
// Gaussian tail P(n + N(0, σ²) > T) = ½·erfc((T − n)/(σ√2)) within 4
// standard deviations; every released query is checked against that
// count (at least k_s users, count within 5.3σ); every client sent exactly
// m reports (padding); the ledger spends the policy's exact (ε, δ).
func TestRunDPGaussianSetUnion(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole bundled log: the full suite (make test) runs it; -short (and so the race run) does not")
	}
	needClickHouse(t)
	const m = 20
	chosen, err := truth.FrequentTopUsers(bundled, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	dp := policy.Params{Epsilon: math.Ln10, D: m, Users: 1000}
	pol, err := ResolvePolicy("dp-gsu", 5, dp)
	if err != nil {
		t.Fatal(err)
	}
	var mean, variance float64
	for _, n := range chosen {
		if n < pol.ShamirK {
			continue
		}
		p := 0.5 * math.Erfc((pol.Threshold-float64(n))/(pol.B*math.Sqrt2))
		mean, variance = mean+p, variance+p*(1-p)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "dpgsu.tsv")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ch := startClickHouse(ctx, t, dir)
	defer ch.Stop()
	// the broker outlives the run: the further release stages below read
	// its decrypted topic again
	kb, err := kafka.Start(ctx, filepath.Join(dir, "kafka"), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	const db = "dpgsu"
	cfg := Config{Input: bundled, App: "query", Policy: "dp-gsu", DP: dp, Export: out, Dataset: "test",
		StateDir: filepath.Join(dir, "state"), Partitions: 2, ClickHouse: ch.TCPAddr, Database: db, Kafka: kb.Addr}
	sum, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// the clients of a DP pipeline seal no original form: nobody past
	// the device (aggregator, readers of the decrypted topic) sees one
	if items, withOriginal := decryptedOriginals(ctx, t, kb.Addr); items == 0 || withOriginal != 0 {
		t.Fatalf("decrypted topic: %d of %d items carry an original form under dp-gsu, want 0 of > 0", withOriginal, items)
	} else {
		t.Logf("decrypted topic: 0 of %d items carry an original form", items)
	}
	got, _, err := truth.ReadExport(out)
	if err != nil {
		t.Fatal(err)
	}
	for item, row := range got {
		n := chosen[item]
		if n < pol.ShamirK {
			t.Fatalf("released a query %d users chose, below k_shamir %d", n, pol.ShamirK)
		}
		if row.Users != row.Impressions {
			t.Fatalf("released users %d != impressions %d", row.Users, row.Impressions)
		}
		if d := math.Abs(float64(row.Users) - float64(n)); d > 5.3*pol.B+0.5 {
			t.Fatalf("released count %d is %.1f from the true %d: more than 5.3σ", row.Users, d, n)
		}
	}
	if sum.Sent != int64(m*pol.Users) {
		t.Fatalf("clients sent %d reports, want exactly m·U = %d (padding)", sum.Sent, m*pol.Users)
	}
	if sd := math.Sqrt(variance); math.Abs(float64(len(got))-mean) > 4*sd+1 {
		t.Fatalf("released %d queries, expectation %.2f ± %.2f (raw log, Gaussian tail)", len(got), mean, sd)
	}
	w, err := release.Open(ctx, ch.TCPAddr, db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rows, err := w.Ledger(ctx, "test", "all")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Policy != "dp-gsu" || rows[0].K != pol.ShamirK ||
		math.Abs(rows[0].Epsilon-pol.AchievedEpsilon) > 1e-9 || math.Abs(rows[0].Delta-pol.AchievedDelta) > 1e-12 {
		t.Fatalf("ledger %+v, want one dp-gsu row spending (%v, %v)", rows, pol.AchievedEpsilon, pol.AchievedDelta)
	}
	t.Logf("%s; sent %d reports; released %d, expected %.2f ± %.2f", pol, sum.Sent, len(got), mean, math.Sqrt(variance))

	// The statistical test over seeds: the noise is drawn by the release
	// stage alone, so further release stages over the same decrypted topic,
	// each into its own database (its own stored draw), are independent
	// draws of the pipeline's release. Their total must match the raw-log
	// expectation within 4σ, every item must pass the client rule, and
	// the draws must differ (a fixed or reused draw would repeat one set).
	const draws = 15
	digest, err := hex.DecodeString(sum.Pipeline)
	if err != nil || len(digest) != 32 {
		t.Fatalf("pipeline digest %q: %v", sum.Pipeline, err)
	}
	total, sets := len(got), map[string]bool{releasedSet(got): true}
	for i := 1; i < draws; i++ {
		items := releaseAgain(ctx, t, kb.Addr, ch.TCPAddr, fmt.Sprintf("dpgsu_draw%d", i), pol, [32]byte(digest))
		for _, it := range items {
			n := chosen[it.Item]
			if n < pol.ShamirK {
				t.Fatalf("draw %d released a query %d users chose, below k_shamir %d", i, n, pol.ShamirK)
			}
			if d := math.Abs(float64(it.Users) - float64(n)); d > 5.3*pol.B+0.5 {
				t.Fatalf("draw %d: released count %d is %.1f from the true %d: more than 5.3σ", i, it.Users, d, n)
			}
		}
		total += len(items)
		sets[releasedSetItems(items)] = true
	}
	sd := math.Sqrt(draws * variance)
	if math.Abs(float64(total)-draws*mean) > 4*sd+1 {
		t.Fatalf("%d draws released %d queries in all, expectation %.1f ± %.1f (raw log, Gaussian tail)", draws, total, draws*mean, sd)
	}
	if len(sets) < 2 {
		t.Fatalf("%d release stages released the same set of queries each time: the noise is not drawn per release", draws)
	}
	t.Logf("%d independent draws through the release stage: %d queries in all, expected %.1f ± %.1f; %d distinct released sets",
		draws, total, draws*mean, sd, len(sets))
}

// releaseAgain runs a release stage for pol and digest over the decrypted
// topic at broker into database db of ClickHouse at chAddr until it has
// released one epoch, and returns what it released (the noisy items).
func releaseAgain(ctx context.Context, t *testing.T, broker, chAddr, db string, pol *policy.Policy, digest [32]byte) []release.Item {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, w, err := stage.New(ctx, []string{broker}, chAddr, db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	st.Policy, st.Pipeline, st.Dataset = pol, digest, "test"
	var items []release.Item
	released := make(chan struct{})
	st.OnRelease = func(app, epoch string, it []release.Item) {
		items = it
		close(released)
	}
	errc := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { errc <- st.Run(runCtx) }()
	select {
	case <-released:
	case err := <-errc:
		t.Fatalf("release stage into %s ended before releasing: %v", db, err)
	case <-ctx.Done():
		t.Fatalf("release stage into %s: no release within 2 min", db)
	}
	stop()
	<-errc
	return items
}

// releasedSet names the set of released artifacts (sorted, joined).
func releasedSet(got map[string]truth.Row) string {
	names := make([]string, 0, len(got))
	for a := range got {
		names = append(names, a)
	}
	sort.Strings(names)
	return strings.Join(names, "\x00")
}

func releasedSetItems(items []release.Item) string {
	names := make([]string, 0, len(items))
	for _, it := range items {
		names = append(names, it.Item)
	}
	sort.Strings(names)
	return strings.Join(names, "\x00")
}

// decryptedOriginals reads every partition of the decrypted topic at
// broker to its end and counts the items and those that carry an original
// form (a non-empty Variant).
func decryptedOriginals(ctx context.Context, t *testing.T, broker string) (items, withOriginal int) {
	t.Helper()
	conn, err := kafkago.DialContext(ctx, "tcp", broker)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(protocol.DecryptedTopic)
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		lc, err := kafkago.DialLeader(ctx, "tcp", broker, protocol.DecryptedTopic, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		end, err := lc.ReadLastOffset()
		lc.Close()
		if err != nil {
			t.Fatal(err)
		}
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{broker}, Topic: protocol.DecryptedTopic, Partition: p.ID, MaxWait: 50 * time.Millisecond})
		for off := int64(0); off < end; {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			m, err := r.ReadMessage(rctx)
			cancel()
			if err != nil {
				r.Close()
				t.Fatalf("decrypted partition %d at offset %d of %d: %v", p.ID, off, end, err)
			}
			off = m.Offset + 1
			d, err := protocol.ParseDecrypted(m.Value)
			if err != nil || d.Kind != protocol.KindItem {
				continue
			}
			items++
			if d.Variant != "" {
				withOriginal++
			}
		}
		r.Close()
	}
	return items, withOriginal
}
