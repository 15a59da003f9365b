package runner

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/ingest/keywords"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// TestPDDPrio3Exact: `crowdlog pdd --mode prio3` in one process (embedded
// NATS with each role's own NKey, kfake, the relays, leader and helper with
// their own key directories, the release stage, a local ClickHouse) on the
// bundled log's first 60 users
// and 3 days, L = the embedded list's first 300 keywords, counts clipped
// to 3 (b = 2, so clipping happens) and each client's day bounded by the
// default L1 bound S = 20, with exact shares asked for by name
// (--exact-shares): every (day, keyword) count of the export equals the
// raw log's per-client clipped and L1-bounded counts summed
// (tests/truth.ClippedL1), zeros included; pdd_rounds publishes the
// report count (exact days only); confidence 1; each day's reports equal the
// clients active that day in the raw log; the blacklisted keyword is never
// released.
func TestPDDPrio3Exact(t *testing.T) {
	if testing.Short() {
		t.Skip("a whole Prio3 replay: make test runs it, -short does not")
	}
	needClickHouse(t)
	const users, days, length, bits = 60, 3, 300, 2
	dir := t.TempDir()
	listPath := filepath.Join(dir, "keywords.txt")
	words := keywords.Default().Words[:length]
	if err := os.WriteFile(listPath, []byte(strings.Join(words, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	sum, out := runPDD(t, PDDConfig{Mode: ModePrio3, MaxUsers: users, MaxDays: days, Keywords: listPath, Bits: bits,
		Blacklist: []string{"free"}, Progress: &progress, ExactShares: true})
	if sum.Prio3 == nil {
		t.Fatal("no Prio3 summary")
	}
	got, conf := readPDDExport(t, out)
	dc, err := truth.KeywordClients(bundled, users, listPath, "", []string{"free"})
	if err != nil {
		t.Fatal(err)
	}
	var dayList []string
	for d := range dc.Active {
		dayList = append(dayList, d)
	}
	if len(dayList) < days {
		t.Fatalf("%d days in the log", len(dayList))
	}
	want := dc.ClippedL1(1<<bits-1, p3.DefaultL1, words, nil)
	if sum.Prio3.Epsilon != 0 || sum.Prio3.Measurement.L1 != p3.DefaultL1 {
		t.Fatalf("exact run: epsilon %v, L1 %d", sum.Prio3.Epsilon, sum.Prio3.Measurement.L1)
	}
	checked, nonzero := 0, 0
	for day := range got {
		if conf[day] != 1 {
			t.Fatalf("%s: confidence %v", day, conf[day])
		}
		if got[day]["free"] != 0 {
			t.Fatalf("%s: the blacklisted keyword released", day)
		}
		for i, w := range words {
			if got[day][w] != want[day][w] {
				t.Fatalf("%s keyword #%d: released %d, raw log clipped %d", day, i, got[day][w], want[day][w])
			}
			if want[day][w] != 0 {
				nonzero++
			}
		}
		if int(sum.Prio3.Released[day]) != len(dc.Active[day]) || int(sum.Prio3.Sent[day]) != len(dc.Active[day]) {
			t.Fatalf("%s: %d reports sent, %d released; %d clients active in the raw log", day, sum.Prio3.Sent[day], sum.Prio3.Released[day], len(dc.Active[day]))
		}
		checked++
	}
	if checked != days {
		t.Fatalf("%d days released, want %d", checked, days)
	}
	// the closing note's error against the exact sums: none in an exact run
	if sum.Prio3.TopCells == 0 || sum.Prio3.TopMRE != 0 {
		t.Fatalf("exact run: top-100 MRE %v over %d cells, want 0 over > 0", sum.Prio3.TopMRE, sum.Prio3.TopCells)
	}
	var b strings.Builder
	sum.Print(&b)
	t.Logf("%d days × %d keywords equal the raw log's clipped counts (%d non-zero), %d clipped by clients\n%s%s",
		days, length, nonzero, sum.Prio3.Clipped, progress.String(), b.String())
}

// TestPDDPrio3Noise: the same replay with --epsilon 1 per person-day (b =
// 2, S = the default L1 bound 20): both aggregators add their own Laplace
// draw of scale S/ε, the release stage writes the noisy totals. Released
// minus the raw log's clipped, L1-bounded counts over every (day,
// keyword), zeros included (a noisy 0 is left out of the export), has
// mean ≈ 0 and variance ≈ 4(S/ε)² = 1,600 (two draws of variance 2(S/ε)²
// each); one draw (800) or none (0) fails it. Tolerances: mean within 6
// standard errors, variance within ±40 % (over 5 standard errors of a
// Laplace sample variance at n = 900). The ledger charged each day ε = 1
// (per person-day, not L·ε).
func TestPDDPrio3Noise(t *testing.T) {
	if testing.Short() {
		t.Skip("a whole Prio3 replay: make test runs it, -short does not")
	}
	needClickHouse(t)
	const users, days, length, bits, eps, statusEps = 60, 3, 300, 2, 1.0, 2.0
	dir := t.TempDir()
	listPath := filepath.Join(dir, "keywords.txt")
	words := keywords.Default().Words[:length]
	if err := os.WriteFile(listPath, []byte(strings.Join(words, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// the day's status from the leader's noisy count (ε_c = 2, δ = 10⁻⁶:
	// a day's noisy count must pass min 10 + T 7, far below the log's
	// clients a day, so every day is released, with its exact report
	// count; the ledger charges ε + ε_c against a budget of as much)
	sum, out := runPDD(t, PDDConfig{Mode: ModePrio3, MaxUsers: users, MaxDays: days, Keywords: listPath, Bits: bits, Epsilon: eps,
		StatusEpsilon: statusEps, Budget: release.Budget{Epsilon: eps + statusEps}})
	got, conf := readPDDExport(t, out)
	dc, err := truth.KeywordClients(bundled, users, listPath, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := dc.ClippedL1(1<<bits-1, p3.DefaultL1, words, nil)
	for day, e := range sum.Prio3.Ledger {
		if e != eps+statusEps {
			t.Fatalf("%s: the ledger charged ε %v, want %v per person-day (the totals' ε and the status's)", day, e, eps+statusEps)
		}
	}
	if len(sum.Prio3.Ledger) != days {
		t.Fatalf("ledger rows for %d days, want %d", len(sum.Prio3.Ledger), days)
	}
	var n, s, s2 float64
	if len(sum.Prio3.Sent) != days {
		t.Fatalf("%d days sent, want %d", len(sum.Prio3.Sent), days)
	}
	for day := range sum.Prio3.Sent {
		if int(sum.Prio3.Released[day]) != len(dc.Active[day]) {
			t.Fatalf("%s: %d reports released, %d clients active in the raw log", day, sum.Prio3.Released[day], len(dc.Active[day]))
		}
		if conf[day] != 1 {
			t.Fatalf("%s: confidence %v", day, conf[day])
		}
		for _, w := range words {
			d := float64(got[day][w] - want[day][w])
			n, s, s2 = n+1, s+d, s2+d*d
		}
	}
	if n != days*length {
		t.Fatalf("%v (day, keyword) entries, want %d", n, days*length)
	}
	delta := float64(p3.DefaultL1)
	wantVar := 4 * (delta / eps) * (delta / eps)
	mean := s / n
	v := s2/n - mean*mean
	if mean < -6*math.Sqrt(wantVar/n) || mean > 6*math.Sqrt(wantVar/n) || v < 0.6*wantVar || v > 1.4*wantVar {
		t.Fatalf("released − clipped truth over %v entries: mean %.3f, variance %.1f; want mean 0 and variance %.0f (two Laplace draws of scale S/ε = %v)", n, mean, v, wantVar, delta/eps)
	}
	t.Logf("released − clipped truth over %v entries: mean %.3f, variance %.1f (expected %.0f)", n, mean, v, wantVar)
	if sum.Prio3.TopCells == 0 || sum.Prio3.TopMRE <= 0 {
		t.Fatalf("noisy run: top-100 MRE %v over %d cells, want > 0", sum.Prio3.TopMRE, sum.Prio3.TopCells)
	}
	var b strings.Builder
	sum.Print(&b)
	if !strings.Contains(b.String(), "top-100 keywords' daily counts: mean relative error") {
		t.Fatalf("the closing note has no top-100 error:\n%s", b.String())
	}
}
