package attack

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// p3eDay is the one day of the neighbouring logs.
const p3eDay = "2006-03-01"

// p3eLog writes the AOL TSV log D of the audit (users made-up users, one
// day, each searching 1–5 words of list 1–3 times) or, with added, D' =
// D plus one person who searched 30 words of the list 1–15 times each (a
// clipped daily sum far above the default L1 bound). Queries alternate
// words, so no two consecutive queries of a user are the same.
func p3eLog(t *testing.T, path string, list []string, users int, added bool) {
	t.Helper()
	var b strings.Builder
	b.WriteString("AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n")
	rng := rand.New(rand.NewPCG(46, 1))
	write := func(id int, words []string, counts []int) {
		t0 := time.Date(2006, 3, 1, 8, 0, 0, 0, time.UTC)
		n := 0
		for round := 0; ; round++ {
			more := false
			for i, w := range words {
				if counts[i] > round {
					more = true
					fmt.Fprintf(&b, "%d\t%s\t%s\t\t\n", id, w, t0.Add(time.Duration(n)*time.Minute).Format(time.DateTime))
					n++
				}
			}
			if !more {
				return
			}
		}
	}
	for u := range users {
		k := 1 + rng.IntN(5)
		var words []string
		var counts []int
		for j := range k {
			words = append(words, list[(u*7+j*3)%len(list)])
			counts = append(counts, 1+rng.IntN(3))
		}
		write(1000+u, words, counts)
	}
	if added {
		var words []string
		var counts []int
		for j := range 30 {
			words = append(words, list[(j*5+1)%len(list)])
			counts = append(counts, 1+(j*7)%15)
		}
		write(999999, words, counts)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// p3eRelease is what one Prio3 release published for the day: the
// pdd_rounds row, the keyword counts and the privacy ledger's rows.
type p3eRelease struct {
	round  release.PDDRound
	counts map[string]int64
	ledger []release.Spend
}

// p3eRun runs `crowdlog pdd --mode prio3` (runner.RunPDD: embedded NATS,
// kfake, the relays, the leader and the helper services, the release
// stage) on log into database db of the ClickHouse at addr and reads back
// every published column of the day.
func p3eRun(t *testing.T, ctx context.Context, addr, db, log, listPath string, exact bool) p3eRelease {
	t.Helper()
	dir := t.TempDir()
	cfg := runner.PDDConfig{Mode: runner.ModePrio3, Input: log, Keywords: listPath, ClickHouse: addr, Database: db,
		StateDir: filepath.Join(dir, "state"), Partitions: 2, ExactShares: exact}
	if _, err := runner.RunPDD(ctx, cfg); err != nil {
		t.Fatalf("pdd --mode prio3 on %s: %v", filepath.Base(log), err)
	}
	w, err := release.Open(ctx, addr, db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rounds, err := w.ReadPDDRounds(ctx, "pdd")
	if err != nil || len(rounds) != 1 {
		t.Fatalf("pdd_rounds: %v (%d rows, want 1)", err, len(rounds))
	}
	rows, err := w.ReadKeywordDaily(ctx, "pdd")
	if err != nil {
		t.Fatal(err)
	}
	out := p3eRelease{round: rounds[0], counts: map[string]int64{}}
	for _, r := range rows {
		out.counts[r.Keyword] = r.Count
	}
	if out.ledger, err = w.Ledger(ctx, "default", p3eDay); err != nil {
		t.Fatal(err)
	}
	return out
}

// p3eAudit compares every published column of the releases of D and D':
// the pdd_rounds columns (a deterministic column that differs reveals the
// added person: their participation), the keyword counts as one column
// (they reveal the person exactly when released(D') − released(D) is the
// person's bounded vector c on every keyword), and the ledger's ε per
// day. It returns the columns that reveal the person exactly, the number
// of columns, and the keywords whose difference equals c exactly.
func p3eAudit(d, d1 p3eRelease, c map[string]int64, words []string) (reveal []string, columns, exactKeywords int) {
	r0, r1 := d.round, d1.round
	scalar := []struct {
		name string
		a, b any
	}{
		{"active", r0.Active, r1.Active}, {"grouped", r0.Grouped, r1.Grouped}, {"decrypted", r0.Decrypted, r1.Decrypted},
		{"groups", r0.Groups, r1.Groups}, {"groups_complete", r0.Complete, r1.Complete}, {"groups_recovered", r0.Recovered, r1.Recovered},
		{"groups_lost", r0.Lost, r1.Lost}, {"confidence", r0.Confidence, r1.Confidence}, {"epsilon", r0.Epsilon, r1.Epsilon},
		{"max_count", r0.MaxCount, r1.MaxCount}, {"ledger_epsilon", ledgerEps(d.ledger), ledgerEps(d1.ledger)},
	}
	for _, s := range scalar {
		if s.a != s.b {
			reveal = append(reveal, fmt.Sprintf("%s %v vs %v", s.name, s.a, s.b))
		}
	}
	all := true
	for _, w := range words {
		if d1.counts[w]-d.counts[w] == c[w] {
			exactKeywords++
		} else {
			all = false
		}
	}
	if all {
		reveal = append(reveal, "keyword counts (the person's whole vector)")
	}
	return reveal, len(scalar) + 1, exactKeywords
}

func ledgerEps(l []release.Spend) float64 {
	var e float64
	for _, s := range l {
		e += s.Epsilon
	}
	return e
}

// TestAttackPrio3PerPersonEpsilon: a whole-release neighbouring-logs audit
// of PDD's Prio3 mode. The real release path (`crowdlog pdd --mode prio3`
// in one process: relays, leader and helper services, the release stage
// writing to a real ClickHouse) runs on D (100 made-up clients, one day,
// L = 50 keywords) and on D' = D plus one person whose clipped daily sum
// (well over 20) exceeds the default L1 bound S = 20; every published
// column is compared (pdd_rounds, the keyword counts, the privacy ledger).
// Under the defaults (ε = 1 per person-day, no flag given) no column
// reveals the person exactly: the participation columns are not
// published, the keyword counts carry Laplace noise of scale S/ε at each
// aggregator, S covering the person's whole bounded contribution (checked
// from the raw log by tests/truth), and the ledger charges ε = 1 per
// person-day. Control (--exact-shares): the report count is 100 vs 101 and
// the count difference is the person's vector, keyword by keyword.
func TestAttackPrio3PerPersonEpsilon(t *testing.T) {
	if _, err := clickhouse.ServerBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ClickHouse is required in CI: %v", err)
		}
		t.Skipf("no ClickHouse: %v", err)
	}
	if testing.Short() {
		t.Skip("four Prio3 runs: the attack suite runs it, -short does not")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ch, err := clickhouse.Start(ctx, filepath.Join(dir, "clickhouse"))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Stop()

	const users, length = 100, 50
	words := keywords.Default().Words[:length]
	listPath := filepath.Join(dir, "keywords.txt")
	if err := os.WriteFile(listPath, []byte(strings.Join(words, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logD, logD1 := filepath.Join(dir, "d.tsv"), filepath.Join(dir, "d1.tsv")
	p3eLog(t, logD, words, users, false)
	p3eLog(t, logD1, words, users, true)

	// the person's contribution, from the raw log (tests/truth): clipped
	// to 15 per keyword, and bounded by S as the honest client bounds it
	dc, err := truth.KeywordClients(logD1, 0, listPath, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	only := func(_, user string) bool { return user != "999999" }
	c := map[string]int64{}
	var bounded, clippedL1 int64
	for w, n := range dc.ClippedL1(15, p3.DefaultL1, words, only)[p3eDay] {
		c[w] = int64(n)
		bounded += int64(n)
	}
	for _, n := range dc.Clipped(15, only)[p3eDay] {
		clippedL1 += int64(n)
	}
	if bounded != p3.DefaultL1 || clippedL1 <= p3.DefaultL1 {
		t.Fatalf("the added person: clipped sum %d, bounded %d; want above and at S = %d", clippedL1, bounded, p3.DefaultL1)
	}

	noisyD := p3eRun(t, ctx, ch.TCPAddr, "noisy_d", logD, listPath, false)
	noisyD1 := p3eRun(t, ctx, ch.TCPAddr, "noisy_d1", logD1, listPath, false)
	exactD := p3eRun(t, ctx, ch.TCPAddr, "exact_d", logD, listPath, true)
	exactD1 := p3eRun(t, ctx, ch.TCPAddr, "exact_d1", logD1, listPath, true)

	reveal, cols, exactKw := p3eAudit(noisyD, noisyD1, c, words)
	ctlReveal, _, ctlExactKw := p3eAudit(exactD, exactD1, c, words)
	t.Logf("defaults: pdd_rounds D %+v, D' %+v; ledger D %+v", noisyD.round, noisyD1.round, noisyD.ledger)
	t.Logf("control: pdd_rounds D %+v, D' %+v", exactD.round, exactD1.round)

	// the noise covers the person's whole contribution: scale S/ε per
	// keyword at each aggregator, S ≥ the person's bounded sum, ε per
	// person-day on the ledger
	wantParams := fmt.Sprintf("sensitivity_l1=%d scale=%d", p3.DefaultL1, p3.DefaultL1)
	ledgerOK := len(noisyD1.ledger) == 1 && noisyD1.ledger[0].Epsilon == 1 && strings.Contains(noisyD1.ledger[0].Params, wantParams) &&
		strings.Contains(noisyD1.ledger[0].Params, "unit=person-day") && noisyD1.round.Epsilon == 1
	scale := "not stated"
	for _, l := range noisyD1.ledger {
		for _, f := range strings.Fields(l.Params) {
			if strings.HasPrefix(f, "scale=") {
				scale = strings.TrimPrefix(f, "scale=")
			}
		}
	}
	fmt.Printf("ATTACK prio3-per-person-epsilon: %d of %d published columns reveal one added person exactly (defaults: ε = %g per person-day, "+
		"Laplace scale per keyword at each aggregator (ledger) %s, S = %d ≥ the person's bounded sum %d (clipped sum %d); ledger ε per person-day %g; "+
		"report count published %d vs %d; %d of %d keyword differences equal the person's count) %v; control --exact-shares: %d of %d reveal %v, %d of %d keyword differences exact\n",
		len(reveal), cols, noisyD1.round.Epsilon, scale, p3.DefaultL1, bounded, clippedL1, ledgerEps(noisyD1.ledger),
		noisyD.round.Active, noisyD1.round.Active, exactKw, length, reveal, len(ctlReveal), cols, ctlReveal, ctlExactKw, length)
	if len(reveal) != 0 {
		t.Errorf("under the defaults %d published columns reveal the added person exactly: %v", len(reveal), reveal)
	}
	if !ledgerOK {
		t.Errorf("ledger of D' %+v, pdd_rounds epsilon %v: want one row of ε 1 per person-day with %q", noisyD1.ledger, noisyD1.round.Epsilon, wantParams)
	}
	if exactD.round.Active != users || exactD1.round.Active != users+1 || ctlExactKw != length || len(ctlReveal) < 4 {
		t.Errorf("control: report count %d vs %d, %d of %d keyword differences exact, revealing %v: the audit does not see an exact release",
			exactD.round.Active, exactD1.round.Active, ctlExactKw, length, ctlReveal)
	}
}
