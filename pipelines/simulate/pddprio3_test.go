package simulate

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol/blind"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// TestPrio3HandBuilt: three users over four days, delays 0 and 1 (graces
// 1 and 2 days), R = 0, so rounds 0 and 1 are scored. Counts (keyword:
// count) worked out by hand:
//
//	day:  0              1                   2      3
//	u0:   {0:5, 1:1}     {2:2}               {0:1}  .
//	u1:   {1:3}          {2:4}               .      {0:1}
//	u2:   .              {0:16, 1:1, 2:1}    .      .
//
// Round 0: u0 (next active day 1) and u1 (day 1) both report at grace 1.
// Round 1: u0 reports on day 2 (grace ≥ 1), u1 on day 3 (grace ≥ 2), u2
// never. Non-zero entries: 3 + 5 = 8. Late entries: grace 1: u1's 1 and
// u2's 3; grace 2: u2's 3. Coverage: grace 1 (2/2 + 1/3)/2, grace 2
// (2/2 + 2/3)/2.
//
// Relative errors of the arrived entries (c − ĉ)/c:
//   - b = 1 (ĉ ≤ 1): u0d0 4/5 + 0, u1d0 2/3, u0d1 1/2, u1d1 3/4;
//   - b = 2 (ĉ ≤ 3): u0d0 2/5, u1d1 1/4, others 0;
//   - presence w = 1: u0d0 keeps keyword 0 (4/5) and drops keyword 1 (1),
//     u1d0 2/3, u0d1 1/2, u1d1 3/4.
func TestPrio3HandBuilt(t *testing.T) {
	act := [][]bool{
		{true, true, true, false},
		{true, true, false, true},
		{false, true, false, false},
	}
	counts := [][]map[int32]int32{
		{{0: 5, 1: 1}, {2: 2}, {0: 1}, {}},
		{{1: 3}, {2: 4}, {}, {0: 1}},
		{{}, {0: 16, 1: 1, 2: 1}, {}, {}},
	}
	ms := []Prio3Measurement{{Kind: p3.KindSumVec, Bits: 1}, {Kind: p3.KindSumVec, Bits: 2}, {Kind: p3.KindPresence, MaxWeight: 1}}
	p, err := NewPopulationCounts(act, counts, ms)
	if err != nil {
		t.Fatal(err)
	}
	g := PDDGrid{GroupSizes: []int{2}, Delays: []int{0, 1}, RecoveryDays: 0}
	r, err := p.evaluate(context.Background(), g, 1, identity)
	if err != nil {
		t.Fatal(err)
	}
	if r.FirstRound != 0 || r.LastRound != 1 {
		t.Fatalf("rounds %d..%d, want 0..1", r.FirstRound, r.LastRound)
	}
	late := map[int]float64{1: 4, 2: 3}
	clip := map[string]map[int]float64{
		"prio3-sumvec-b1":   {1: 4.0/5 + 2.0/3 + 1.0/2, 2: 4.0/5 + 2.0/3 + 1.0/2 + 3.0/4},
		"prio3-sumvec-b2":   {1: 2.0 / 5, 2: 2.0/5 + 1.0/4},
		"prio3-presence-w1": {1: 4.0/5 + 1 + 2.0/3 + 1.0/2, 2: 4.0/5 + 1 + 2.0/3 + 1.0/2 + 3.0/4},
	}
	coverage := map[int]float64{1: (1 + 1.0/3) / 2, 2: (1 + 2.0/3) / 2}
	if len(r.Prio3) != 6 {
		t.Fatalf("%d Prio3 points, want 3 measurements × 2 graces", len(r.Prio3))
	}
	for _, pt := range r.Prio3 {
		name := pt.Measurement.Name()
		want := (late[pt.Grace] + clip[name][pt.Grace]) / 8
		if math.Abs(pt.MRE-want) > 1e-9 || math.Abs(pt.Coverage-coverage[pt.Grace]) > 1e-12 || pt.TotalNNZ != 8 || pt.Rounds != 2 {
			t.Errorf("%s grace %d: MRE %.6f coverage %.6f total %d rounds %d, want %.6f %.6f 8 2",
				name, pt.Grace, pt.MRE, pt.Coverage, pt.TotalNNZ, pt.Rounds, want, coverage[pt.Grace])
		}
	}
	// the comparison CSV: delay = grace for Prio3, δ+1 (pdd), δ+1+R
	// (recovery); confidence 1 and the coverage for Prio3
	var b strings.Builder
	if err := r.WriteModesCSV(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		ModesCSVHeader,
		fmt.Sprintf("prio3-sumvec-b1,0,1,1.0000,%.4f,%.4f,0", (1+1.0/3)/2, (4+4.0/5+2.0/3+1.0/2)/8),
		fmt.Sprintf("prio3-presence-w1,0,2,1.0000,%.4f,%.4f,0", (1+2.0/3)/2, (3+4.0/5+1+2.0/3+1.0/2+3.0/4)/8),
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("modes CSV lacks %q:\n%s", line, b.String())
		}
	}
	for _, p := range r.Points {
		want := p.Delay + 1 // R = 0 here
		prefix := fmt.Sprintf("%s,%d,%d,", p.Mode, p.GroupSize, want)
		if !strings.Contains(b.String(), prefix) {
			t.Errorf("modes CSV lacks a line starting %q", prefix)
		}
	}
	// the groups points are those of the same activity and nnz
	nnz := [][]int32{{2, 1, 1, 0}, {1, 1, 0, 1}, {0, 3, 0, 0}}
	q, err := NewPopulation(act, nnz)
	if err != nil {
		t.Fatal(err)
	}
	rq, err := q.evaluate(context.Background(), g, 1, identity)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rq.Points, r.Points) {
		t.Errorf("groups points differ with Prio3 measurements:\n%+v\n%+v", r.Points, rq.Points)
	}
	if _, err := NewPopulationCounts(act, counts, []Prio3Measurement{{Kind: p3.KindSumVec, Bits: 0}}); err == nil {
		t.Error("0 bits accepted")
	}
	if ms := Prio3Measurements([]int{0}, []int{0, 3}); len(ms) != 1 || ms[0].Name() != "prio3-presence-w3" {
		t.Errorf("flags 0 / 0,3: %v, want presence w = 3 alone", ms)
	}
}

// TestPrio3FromLog draws a population from a log whose only query is
// "apple banana" over the list apple, banana, cherry: every search counts 1
// for apple and for banana, so a client-day with n searches holds (n, n).
// The expected MRE is worked out from each client-day's activity and n
// alone: a report arrives iff the client is active within grace days after
// s; clipping at c = 2^b − 1 costs 2·max(0, n − c)/n; presence w = 1 keeps
// apple ((n − 1)/n) and drops banana (1); w = 2 keeps both.
func TestPrio3FromLog(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log.tsv")
	text := "AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n1\tapple banana\t2006-03-01 07:33:28\t\t\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := keywords.Parse(strings.NewReader("apple\nbanana\ncherry\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool, err := LoadQueryPool(ctx, log, list)
	if err != nil {
		t.Fatal(err)
	}
	const U, D = 300, 12
	ms := Prio3Measurements([]int{1, 2, 4}, []int{1, 2})
	pop, err := GeneratePopulation(ctx, U, D, 7, pool, ms...)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := GeneratePopulation(ctx, U, D, 7, pool)
	if err != nil {
		t.Fatal(err)
	}
	g := PDDGrid{GroupSizes: []int{10}, Delays: []int{0, 2}, RecoveryDays: 1}
	r, err := pop.Evaluate(ctx, g, 7)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := plain.Evaluate(ctx, g, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Points, rp.Points) {
		t.Error("the Prio3 measurements changed the groups points")
	}
	var csvText strings.Builder
	if err := r.WriteModesCSV(&csvText); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"pdd,10,1,", "pdd,10,3,", "recovery,10,2,", "recovery,10,4,", "prio3-sumvec-b4,0,1,1.0000,", "prio3-sumvec-b4,0,3,1.0000,"} {
		if !strings.Contains(csvText.String(), "\n"+prefix) { // δ = 0, 2 at R = 1
			t.Errorf("modes CSV lacks a line starting %q:\n%s", prefix, csvText.String())
		}
	}
	clipped := 0
	for _, pt := range r.Prio3 {
		var total, arrived, active int
		var errSum, cov float64
		for s := r.FirstRound; s <= r.LastRound; s++ {
			in, on := 0, 0
			for u := range U {
				if !pop.Active(u, s) {
					continue
				}
				on++
				n := pop.Searches(u, s)
				nz := 0
				if n > 0 {
					nz = 2
				}
				if pop.NNZ(u, s) != nz {
					t.Fatalf("user %d day %d: nnz %d with %d searches of apple banana", u, s, pop.NNZ(u, s), n)
				}
				total += nz
				ok := false
				for d := s + 1; d <= s+pt.Grace && d < D; d++ {
					ok = ok || pop.Active(u, d)
				}
				if !ok {
					errSum += float64(nz)
					continue
				}
				in++
				if n == 0 {
					continue
				}
				m := pt.Measurement
				if m.Kind == p3.KindSumVec {
					c := 1<<m.Bits - 1
					if n > c {
						errSum += 2 * float64(n-c) / float64(n)
						clipped++
					}
				} else {
					errSum += float64(n-1) / float64(n)
					if m.MaxWeight == 1 {
						errSum++
					} else {
						errSum += float64(n-1) / float64(n)
					}
				}
			}
			arrived += in
			active += on
			cov += float64(in) / float64(on)
		}
		rounds := r.LastRound - r.FirstRound + 1
		want := errSum / float64(total)
		if math.Abs(pt.MRE-want) > 1e-9 || math.Abs(pt.Coverage-cov/float64(rounds)) > 1e-12 || pt.Reports != int64(arrived) || pt.TotalNNZ != int64(total) {
			t.Errorf("%s grace %d: MRE %.6f coverage %.6f reports %d total %d; by hand %.6f %.6f %d %d",
				pt.Measurement.Name(), pt.Grace, pt.MRE, pt.Coverage, pt.Reports, pt.TotalNNZ, want, cov/float64(rounds), arrived, total)
		}
		t.Logf("%-18s grace %d: MRE %.4f coverage %.4f (%d reports of %d active client-days)", pt.Measurement.Name(), pt.Grace, pt.MRE, pt.Coverage, arrived, active)
	}
	if len(r.Prio3) != 10 || clipped == 0 {
		t.Errorf("%d Prio3 points (want 5 measurements × 2 graces), %d clipped client-days (want some)", len(r.Prio3), clipped)
	}
}

// TestPrio3UploadBytes: the upload size does not depend on the counts (a
// real Shard of a non-zero vector has the zero vector's size) and, at
// L = 10,000 and b = 4, is the 655,204 B docs/pdd.md gives (with both
// aggregators' tokens).
func TestPrio3UploadBytes(t *testing.T) {
	for _, m := range Prio3Measurements([]int{1, 4}, []int{3}) {
		got, err := Prio3UploadBytes(m, 40)
		if err != nil {
			t.Fatal(err)
		}
		v, err := p3.New("other", m.Config(40))
		if err != nil {
			t.Fatal(err)
		}
		l, _ := onion.GenerateKeyPair(1)
		h, _ := onion.GenerateKeyPair(2)
		counts := make([]uint64, 40)
		counts[0], counts[7], counts[39] = 1, 9, 2
		r, _, err := v.ShardReport("simulate", 3, counts, h.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		r.HelperToken = make([]byte, prio3HelperTokenBytes)
		r.LeaderToken = make([]byte, prio3HelperTokenBytes)
		up, err := r.Seal(l.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		if got != len(up) {
			t.Errorf("%s: zero vector %d B, counts %d B", m.Name(), got, len(up))
		}
	}
	if testing.Short() {
		return
	}
	got, err := Prio3UploadBytes(Prio3Measurement{Kind: p3.KindSumVec, Bits: 4}, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if got != 655204 {
		t.Errorf("L = 10,000, b = 4: %d B, docs/pdd.md says 655,204", got)
	}
}

// TestGroupDepositBytes checks the deal-size formula against real Deals
// (protocol/blind) of groups of 2, 10 and 33.
func TestGroupDepositBytes(t *testing.T) {
	in := blind.Instance{Campaign: "simulate", Round: 1, Group: 1}
	for _, n := range []int{2, 10, 33} {
		var pubs [][]byte
		k0, err := blind.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		pubs = append(pubs, k0.PublicKey().Bytes())
		for range n - 1 {
			k, err := blind.GenerateKey()
			if err != nil {
				t.Fatal(err)
			}
			pubs = append(pubs, k.PublicKey().Bytes())
		}
		seeds, err := blind.Seeds(k0, 0, pubs, in)
		if err != nil {
			t.Fatal(err)
		}
		var self blind.Seed
		crand.Read(self[:])
		d, err := blind.Deal(in, 0, seeds, self, pubs, blind.Threshold(n), crand.Reader)
		if err != nil {
			t.Fatal(fmt.Errorf("deal n=%d: %w", n, err))
		}
		size := 32 * len(d.Commit.Roots)
		for _, sb := range d.Bundles {
			size += len(sb.Ciphertext)
		}
		if int64(size) != GroupDepositBytes(n) {
			t.Errorf("n = %d: a real deal is %d B, GroupDepositBytes %d", n, size, GroupDepositBytes(n))
		}
	}
}

// TestQueryPoolMatchesLikeClient: the pool reads keywords as a client does
// (keywords.List.Match, UAX #29 boundaries): in the Chinese query
// "北京大学招生" (no spaces) the list's 北京, 大学 and 北京大学 all occur
// and 上海 does not; in
// "cheap flu-shots" flu occurs (a boundary at the hyphen), in "influenza"
// it does not. A split on spaces found nothing in the Chinese query (one
// token, not a keyword) and missed flu in "flu-shots". Also the midnight
// rule: "weather" at 23:50 and at 00:10 is two instances.
func TestQueryPoolMatchesLikeClient(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log.tsv")
	text := "AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n" +
		"1\t北京大学招生\t2006-03-01 07:33:28\t\t\n" +
		"1\tcheap flu-shots\t2006-03-01 07:40:00\t\t\n" +
		"1\tinfluenza\t2006-03-01 07:41:00\t\t\n" +
		"1\tweather\t2006-03-01 23:50:00\t\t\n" +
		"1\tweather\t2006-03-02 00:10:00\t\t\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := keywords.Parse(strings.NewReader("北京\n大学\n北京大学\n上海\nflu\nweather\n"))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := LoadQueryPool(context.Background(), log, list)
	if err != nil {
		t.Fatal(err)
	}
	// independent: the keyword indices each instance holds, by hand
	want := [][]int32{{0, 2, 1}, {4}, nil, {5}, {5}}
	if len(pool.inst) != len(want) {
		t.Fatalf("%d instances, want %d (the two weather searches straddle midnight)", len(pool.inst), len(want))
	}
	for i, id := range pool.inst {
		got := pool.kw[id]
		if !reflect.DeepEqual(sortedCopy(got), sortedCopy(want[i])) {
			t.Errorf("instance %d: keywords %v, want %v", i, got, want[i])
		}
	}
}

func sortedCopy(s []int32) []int32 {
	out := append([]int32(nil), s...)
	slices.Sort(out)
	if len(out) == 0 {
		return nil
	}
	return out
}
