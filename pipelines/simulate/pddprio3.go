package simulate

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/crowdlog/crowdlog/protocol/blind"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// Prio3Measurement is one Prio3-mode campaign measurement the simulation
// scores beside the groups modes (protocol/prio3.Config without the
// length, which is the keyword list's).
type Prio3Measurement struct {
	Kind      p3.Kind // p3.KindSumVec or p3.KindPresence
	Bits      int     // SumVec b, 1..16: counts clipped to 2^b − 1
	MaxWeight int     // presence w ≥ 1: at most w keywords per client and day
}

// Name is the mode column of the measurement: "prio3-sumvec-bB" or
// "prio3-presence-wW".
func (m Prio3Measurement) Name() string {
	if m.Kind == p3.KindPresence {
		return fmt.Sprintf("prio3-presence-w%d", m.MaxWeight)
	}
	return fmt.Sprintf("prio3-sumvec-b%d", m.Bits)
}

// Config is the campaign measurement for a list of length keywords.
func (m Prio3Measurement) Config(length int) p3.Config {
	return p3.Config{Kind: m.Kind, Length: length, Bits: m.Bits, MaxWeight: m.MaxWeight}
}

func (m Prio3Measurement) validate() error {
	switch {
	case m.Kind == p3.KindSumVec && (m.Bits < 1 || m.Bits > 16):
		return fmt.Errorf("simulate pdd: prio3 SumVec with %d bits: use 1..16", m.Bits)
	case m.Kind == p3.KindPresence && m.MaxWeight < 1:
		return fmt.Errorf("simulate pdd: prio3 presence with max weight %d: use ≥ 1", m.MaxWeight)
	case m.Kind != p3.KindSumVec && m.Kind != p3.KindPresence:
		return fmt.Errorf("simulate pdd: prio3 measurement kind %d: use SumVec or presence", m.Kind)
	}
	return nil
}

// Prio3Measurements builds the measurement list of the CLI flags: one
// SumVec per bit width, one presence per max weight; a 0 adds nothing (so
// `--prio3-bits 0` turns the SumVec rows off).
func Prio3Measurements(bits, weights []int) []Prio3Measurement {
	var ms []Prio3Measurement
	for _, b := range bits {
		if b != 0 {
			ms = append(ms, Prio3Measurement{Kind: p3.KindSumVec, Bits: b})
		}
	}
	for _, w := range weights {
		if w != 0 {
			ms = append(ms, Prio3Measurement{Kind: p3.KindPresence, MaxWeight: w})
		}
	}
	return ms
}

// errOne is the fixed-point unit of a relative error: an entry's error
// (c − ĉ)/c is stored as ⌊(c − ĉ)·2³²/c⌋, so sums are exact integers and
// do not depend on the order in which workers add them.
const errOne = 1 << 32

// kwCount is one non-zero entry of a client's day: keyword index and count.
type kwCount struct {
	k int32
	c int32
}

// relErr returns the entries' summed relative error against the raw
// counts once m's client has reduced them, in errOne units: SumVec clips
// c to 2^b − 1; presence keeps the w keywords with the highest counts
// (ties: the lower index, as ingest/prio3.Client.Measurement) at 1 and
// drops the rest (error 1 each). entries may be reordered.
func (m Prio3Measurement) relErr(entries []kwCount) int64 {
	var e int64
	if m.Kind == p3.KindSumVec {
		top := int64(1)<<uint(m.Bits) - 1
		for _, x := range entries {
			if c := int64(x.c); c > top {
				e += (c - top) * errOne / c
			}
		}
		return e
	}
	if len(entries) > m.MaxWeight { // which w the client keeps
		slices.SortFunc(entries, func(a, b kwCount) int {
			if a.c != b.c {
				return cmp.Compare(b.c, a.c)
			}
			return cmp.Compare(a.k, b.k)
		})
	}
	for i, x := range entries {
		if i >= m.MaxWeight {
			e += errOne
			continue
		}
		c := int64(x.c)
		e += (c - 1) * errOne / c
	}
	return e
}

// MaxPrio3Grace bounds the grace in days the simulation scores.
const MaxPrio3Grace = 63

// gapBuckets is the number of arrival buckets: gaps 1..MaxPrio3Grace, and
// one for later or never.
const gapBuckets = MaxPrio3Grace + 2

// gapBucket is the bucket of a client active on day s whose next active
// day after s is next (days when never): next − s, or the last bucket.
func gapBucket(s, next, days int) int {
	if next >= days || next-s > MaxPrio3Grace {
		return gapBuckets - 1
	}
	return next - s
}

// prio3Acc is the per-measurement relative error of the population's
// client-days, summed per (day, arrival bucket): acc[m][d*gapBuckets+g].
type prio3Acc [][]int64

func newPrio3Acc(ms, days int) prio3Acc {
	a := make(prio3Acc, ms)
	for i := range a {
		a[i] = make([]int64, days*gapBuckets)
	}
	return a
}

func (a prio3Acc) add(b prio3Acc) {
	for i := range a {
		for j := range a[i] {
			a[i][j] += b[i][j]
		}
	}
}

// addDay adds one client-day's entries (day d, arrival bucket g) for every
// measurement.
func (a prio3Acc) addDay(ms []Prio3Measurement, d, g int, entries []kwCount) {
	for i, m := range ms {
		a[i][d*gapBuckets+g] += m.relErr(entries)
	}
}

// NewPopulationCounts builds a population from an activity matrix
// active[u][d] and each client-day's keyword counts counts[u][d] (keyword
// index → count > 0), scoring the Prio3 measurements ms beside the groups
// modes. Errors: as NewPopulation, a count ≤ 0, an invalid measurement.
func NewPopulationCounts(active [][]bool, counts [][]map[int32]int32, ms []Prio3Measurement) (*Population, error) {
	nnz := make([][]int32, len(counts))
	for u := range counts {
		nnz[u] = make([]int32, len(counts[u]))
		for d, row := range counts[u] {
			for k, c := range row {
				if c <= 0 {
					return nil, fmt.Errorf("simulate pdd: user %d day %d keyword %d: count %d, want > 0", u, d, k, c)
				}
			}
			nnz[u][d] = int32(len(row))
		}
	}
	p, err := NewPopulation(active, nnz)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if err := m.validate(); err != nil {
			return nil, err
		}
	}
	p.prio3 = ms
	p.prio3Err = newPrio3Acc(len(ms), p.Days)
	var entries []kwCount
	for u := range p.Users {
		for d := range p.Days {
			entries = entries[:0]
			for k, c := range counts[u][d] {
				entries = append(entries, kwCount{k, c})
			}
			if len(entries) > 0 {
				p.prio3Err.addDay(ms, d, gapBucket(d, int(p.next[u*(p.Days+1)+d+1]), p.Days), entries)
			}
		}
	}
	return p, nil
}

// Prio3Point is one Prio3 measurement's score at one grace, on the same
// rounds and population as the groups points. A client's report for day s
// is uploaded on its first active day after s (the day's counts are only
// complete at its end) and counts iff that day is at most s + Grace: the
// batch (campaign, s) closes Grace days after the end of day s. Graces are
// δ + 1 for each delay δ of the grid, so a report arrives exactly when a
// groups member of the same round submits at delay δ (the same clients
// drop out); no groups, no recovery round.
type Prio3Point struct {
	Measurement Prio3Measurement
	Grace       int // days from the end of day s until the batch closes and is released
	// MRE is PDD eq. 4 over every non-zero entry of the scored client-days:
	// the mean of |c − ĉ|/c, ĉ = the released contribution (0 for a late
	// report, else the clipped count, or presence's 0/1).
	MRE float64
	// Coverage is the mean over rounds of reports in the batch / clients
	// active on day s: the groups points' Confidence definition. The
	// released confidence of a Prio3 batch is 1 (every report in it counts).
	Coverage float64
	Rounds   int
	Reports  int64 // reports in the batches, all scored rounds
	Late     int64 // client-days with a report that arrived after the batch closed (lost)
	LostNNZ  int64 // non-zero entries of late reports
	TotalNNZ int64
	// ErrClip is the summed relative error of the arrived reports' entries
	// (clipping or presence), in entries.
	ErrClip float64
}

// prio3Points scores the population's Prio3 measurements at grace δ + 1
// for each delay of g, rounds 0..last.
func (p *Population) prio3Points(g PDDGrid, last int) []Prio3Point {
	if len(p.prio3) == 0 {
		return nil
	}
	D := p.Days
	var pts []Prio3Point
	for _, delay := range g.Delays {
		grace := delay + 1
		var reports, late, lostNNZ, total int64
		var cov float64
		covN := 0
		errSum := make([]int64, len(p.prio3))
		for s := 0; s <= last; s++ {
			arrived := 0
			for _, u := range p.activeOn[s] {
				nz := int64(p.nnz[int(u)*D+s])
				total += nz
				if gapBucket(s, int(p.next[int(u)*(D+1)+s+1]), D) <= grace {
					arrived++
				} else {
					late++
					lostNNZ += nz
				}
			}
			reports += int64(arrived)
			if n := len(p.activeOn[s]); n > 0 {
				cov += float64(arrived) / float64(n)
				covN++
			}
			for i := range p.prio3 {
				row := p.prio3Err[i][s*gapBuckets:]
				for b := 1; b <= min(grace, MaxPrio3Grace); b++ {
					errSum[i] += row[b]
				}
			}
		}
		for i, m := range p.prio3 {
			pt := Prio3Point{Measurement: m, Grace: grace, Rounds: last + 1, Reports: reports, Late: late,
				LostNNZ: lostNNZ, TotalNNZ: total, ErrClip: float64(errSum[i]) / errOne}
			if total > 0 {
				pt.MRE = (float64(lostNNZ) + pt.ErrClip) / float64(total)
			}
			if covN > 0 {
				pt.Coverage = cov / float64(covN)
			}
			pts = append(pts, pt)
		}
	}
	return pts
}

// Prio3UploadBytes is the size of one client's daily upload for m over a
// list of length keywords: a real VDAF.Shard of a zero vector (the size
// does not depend on the counts) with both aggregators' tokens (the
// helper's and the leader's, 162 B each plus a 2-byte length), before the
// onion layers: 655,204 B at L = 10,000 keywords of b = 4 bits.
func Prio3UploadBytes(m Prio3Measurement, length int) (int, error) {
	v, err := p3.New("simulate", m.Config(length))
	if err != nil {
		return 0, fmt.Errorf("simulate pdd: %s: %w", m.Name(), err)
	}
	l, err := onion.GenerateKeyPair(1)
	if err != nil {
		return 0, err
	}
	h, err := onion.GenerateKeyPair(2)
	if err != nil {
		return 0, err
	}
	r, _, err := v.ShardReport("simulate", 0, make([]uint64, length), h.PublicKey())
	if err != nil {
		return 0, fmt.Errorf("simulate pdd: %s: shard a zero vector: %w", m.Name(), err)
	}
	// with its helper and leader tokens (RFC 9577 §2.2, TypeRistretto: 162 B each)
	r.HelperToken = make([]byte, prio3HelperTokenBytes)
	r.LeaderToken = make([]byte, prio3HelperTokenBytes)
	up, err := r.Seal(l.PublicKey())
	if err != nil {
		return 0, err
	}
	return len(up), nil
}

// prio3HelperTokenBytes is the size of a report's helper token (and of its
// leader token: the same Privacy Pass token type).
const prio3HelperTokenBytes = 162

// GroupDepositBytes is one member's deal in a group of n (protocol/blind
// Deal: its self-mask seed and n − 1 pair seeds Shamir-shared among the
// group, a Merkle root per holder and the sealed bundles): 44n² + 45n + 44
// bytes, fitted on BenchmarkDeposit (n = 10, 100, 1,000) and checked
// against a real Deal in the tests.
func GroupDepositBytes(n int) int64 {
	N := int64(n)
	return 44*N*N + 45*N + 44
}

// GroupMemberBytes is one member's daily upload in a group of n over a
// list of length keywords: its blinded vector (a real blind.Submission
// encoding, 8 bytes per keyword) plus its deal, before the onion layers.
func GroupMemberBytes(n, length int) int64 {
	s := blind.Submission{Instance: blind.Instance{Campaign: "simulate"}, Y: make([]uint64, length)}
	b, _ := s.MarshalBinary()
	return int64(len(b)) + GroupDepositBytes(n)
}

// ModesCSVHeader is the header of WriteModesCSV.
const ModesCSVHeader = "mode,group_size,delay_days,confidence,coverage,mre,bytes_per_client_day"

// modeRow is one line of the campaign-mode comparison.
type modeRow struct {
	mode               string
	gs, delay          int
	conf, coverage     float64
	mre                float64
	bytes              int64
	groupsDelay, grace int
}

// modeRows lists the groups points then the Prio3 points. A groups point
// at delay δ releases δ + 1 days after the end of day s (pdd modes) or at
// most δ + 1 + R (recovery modes: the unmasking and recovery window).
func (r *PDDResult) modeRows() []modeRow {
	var rows []modeRow
	for _, p := range r.Points {
		d := p.Delay + 1
		if p.Mode.Recovery() {
			d += r.RecoveryDays
		}
		var by int64
		if r.Length > 0 {
			by = GroupMemberBytes(p.GroupSize, r.Length)
		}
		rows = append(rows, modeRow{mode: string(p.Mode), gs: p.GroupSize, delay: d, conf: p.Confidence,
			coverage: p.Confidence, mre: p.MRE, bytes: by, groupsDelay: p.Delay})
	}
	for _, p := range r.Prio3 {
		rows = append(rows, modeRow{mode: p.Measurement.Name(), delay: p.Grace, conf: 1, coverage: p.Coverage,
			mre: p.MRE, bytes: int64(r.Prio3Bytes[p.Measurement]), grace: p.Grace})
	}
	return rows
}

// WriteModesCSV writes ModesCSVHeader and one line per groups point and
// per Prio3 point: delay_days is the days from a day's end until its
// counts are released; confidence is what the release reports (Prio3: 1);
// coverage the share of the day's active clients counted; bytes the
// client's daily upload (group_size 0 for Prio3).
func (r *PDDResult) WriteModesCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(strings.Split(ModesCSVHeader, ","))
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	for _, m := range r.modeRows() {
		cw.Write([]string{m.mode, strconv.Itoa(m.gs), strconv.Itoa(m.delay), f(m.conf), f(m.coverage), f(m.mre),
			strconv.FormatInt(m.bytes, 10)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("simulate pdd: write modes CSV: %w", err)
	}
	return nil
}

// WriteModesTable writes the Prio3 rows beside the groups rows at group
// size gs (PDDPlotGroupSize when the grid has it) for a terminal.
func (r *PDDResult) WriteModesTable(w io.Writer) error {
	if len(r.Prio3) == 0 {
		return nil
	}
	gs := 0
	for _, p := range r.Points {
		if p.GroupSize == PDDPlotGroupSize || gs == 0 {
			gs = p.GroupSize
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\ncampaign modes (groups at gs %d; delay = days from a day's end to its release; prio3 grace = δ+1 days; %d keywords)\n", gs, r.Length)
	fmt.Fprintf(&b, "%-22s %3s %6s %10s %8s %7s %14s\n", "mode", "δ", "delay", "confidence", "coverage", "MRE", "bytes/client")
	rows := r.modeRows()
	for _, m := range rows {
		if strings.HasPrefix(m.mode, "prio3") || m.gs != gs {
			continue
		}
		fmt.Fprintf(&b, "%-22s %3d %6d %10.4f %8.4f %7.4f %14d\n", m.mode, m.groupsDelay, m.delay, m.conf, m.coverage, m.mre, m.bytes)
	}
	for _, m := range rows {
		if !strings.HasPrefix(m.mode, "prio3") {
			continue
		}
		fmt.Fprintf(&b, "%-22s %3d %6d %10.4f %8.4f %7.4f %14d\n", m.mode, m.grace-1, m.delay, m.conf, m.coverage, m.mre, m.bytes)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
