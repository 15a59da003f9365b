package simulate

// The PDD simulation's model is documented in the package comment
// (simulate_pdd_doc.go) and docs/pdd-simulation.md.

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/keywords"
)

// PDD §4.1 simulation inputs (Primault et al., WWW 2019, §4.1).
const (
	// PDDActiveAlpha and PDDActiveBeta are the Beta distribution of the
	// share of days a user is active (fitted on Mozilla's 2010 data).
	PDDActiveAlpha = 2.2170
	PDDActiveBeta  = 0.4634
	// PDDSearchMu and PDDSearchVar are the Normal distribution of searches
	// per active day (fitted on Yahoo's July 2010 log).
	PDDSearchMu  = 1.3020
	PDDSearchVar = 0.7603
)

// PDDMode is one protocol variant of the simulation.
type PDDMode string

// The four modes, in output order.
const (
	ModePDD               PDDMode = "pdd"                // PDD §3.4, all users active the day before
	ModePDDHeuristic      PDDMode = "pdd+heuristic"      // PDD eq. 5 client selection
	ModeRecovery          PDDMode = "recovery"           // crowdlog dropout recovery, no heuristic
	ModeRecoveryHeuristic PDDMode = "recovery+heuristic" // both
)

// PDDModes returns the four modes in output order.
func PDDModes() []PDDMode {
	return []PDDMode{ModePDD, ModePDDHeuristic, ModeRecovery, ModeRecoveryHeuristic}
}

// Heuristic reports whether m selects clients with PDD eq. 5.
func (m PDDMode) Heuristic() bool { return m == ModePDDHeuristic || m == ModeRecoveryHeuristic }

// Recovery reports whether m runs crowdlog's dropout recovery.
func (m PDDMode) Recovery() bool { return m == ModeRecovery || m == ModeRecoveryHeuristic }

// PDDGrid is the set of configurations evaluated: every mode × group size ×
// delay.
type PDDGrid struct {
	GroupSizes   []int // gs ≥ 1 (clients per group); paper: 50, 100, 500
	Delays       []int // δ ≥ 0 in days; paper: 0..5
	RecoveryDays int   // R ≥ 0: days of the recovery window after the delay
}

// DefaultPDDGrid is the grid of `crowdlog simulate pdd`: gs 10, 50, 100,
// 500, δ 0..5 (PDD Fig. 5), R = 1.
func DefaultPDDGrid() PDDGrid {
	return PDDGrid{GroupSizes: []int{10, 50, 100, 500}, Delays: []int{0, 1, 2, 3, 4, 5}, RecoveryDays: 1}
}

// PDDOptions configure RunPDD. Users, Days and the grid have no implicit
// defaults: see DefaultPDDGrid and the CLI flags (100,000 users × 100 days
// in the paper).
type PDDOptions struct {
	Input    string         // AOL TSV log (plain or .gz) whose query instances are the search content
	Keywords *keywords.List // monitored keywords; nil = keywords.Default()
	Users    int            // U ≥ 1
	Days     int            // D, 2..65535
	Seed     uint64         // all random draws derive from it
	Grid     PDDGrid
	// Prio3Bits and Prio3MaxWeights are the Prio3-mode measurements scored
	// beside the groups modes on the same population: SumVec at each bit
	// width b (1..16), presence at each max weight w ≥ 1 (0 or empty: none;
	// Prio3Measurements).
	Prio3Bits, Prio3MaxWeights []int
}

// PDDPoint is one configuration's score over the evaluated rounds.
type PDDPoint struct {
	Mode      PDDMode
	GroupSize int
	Delay     int
	// MRE is PDD eq. 4: LostNNZ / TotalNNZ.
	MRE float64
	// Confidence is the mean over rounds (with active clients) of decrypted
	// clients / clients active that day (PDD §4.5).
	Confidence      float64
	Rounds          int   // rounds evaluated
	Groups          int   // groups formed (≥ 2 members), all rounds
	GroupsLost      int   // formed groups of which nothing was decrypted
	GroupsRecovered int   // groups decrypted by recovery (some members lost)
	LostNNZ         int64 // non-zero entries not decrypted
	TotalNNZ        int64 // non-zero entries of all users in the evaluated rounds
}

// PDDResult is a whole PDD simulation.
type PDDResult struct {
	Users, Days  int
	Seed         uint64
	RecoveryDays int
	// FirstRound..LastRound are the evaluated rounds (days), inclusive.
	FirstRound, LastRound int
	ActiveUserDays        int64 // (user, day) pairs with the user active, evaluated rounds
	Points                []PDDPoint
	// Instances and Queries describe the search-content pool (0 when the
	// population was not generated from a log).
	Instances, Queries int
	// Wall-clock time of each phase.
	LoadTime, GenerateTime, EvaluateTime time.Duration
	// Prio3 are the Prio3 points: each measurement at grace δ + 1 for each
	// delay δ of the grid, on the same rounds.
	Prio3 []Prio3Point
	// Length is the keyword list's length L (0: unknown, no bytes).
	Length int
	// Prio3Bytes is each measurement's upload per client and day
	// (Prio3UploadBytes at Length).
	Prio3Bytes map[Prio3Measurement]int
}

// At returns the point of (mode, gs, δ) (false when absent).
func (r *PDDResult) At(m PDDMode, gs, delay int) (PDDPoint, bool) {
	for _, p := range r.Points {
		if p.Mode == m && p.GroupSize == gs && p.Delay == delay {
			return p, true
		}
	}
	return PDDPoint{}, false
}

// RunPDD loads the query pool from o.Input, draws the population and
// evaluates the grid. Progress goes to slog at Info level. Errors: invalid
// options, unreadable or empty log, cancelled ctx.
func RunPDD(ctx context.Context, o PDDOptions) (*PDDResult, error) {
	if err := o.Grid.validate(); err != nil {
		return nil, err
	}
	if o.Users < 1 {
		return nil, fmt.Errorf("simulate pdd: %d users: need at least 1", o.Users)
	}
	if o.Keywords == nil {
		o.Keywords = keywords.Default()
	}
	t0 := time.Now()
	pool, err := LoadQueryPool(ctx, o.Input, o.Keywords)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	slog.Info("simulate pdd: query pool loaded", "instances", len(pool.inst), "distinct_queries", len(pool.kw),
		"keywords", o.Keywords.Len(), "took", t1.Sub(t0).Round(time.Millisecond))
	ms := Prio3Measurements(o.Prio3Bits, o.Prio3MaxWeights)
	pop, err := GeneratePopulation(ctx, o.Users, o.Days, o.Seed, pool, ms...)
	if err != nil {
		return nil, err
	}
	t2 := time.Now()
	slog.Info("simulate pdd: population drawn", "users", o.Users, "days", o.Days, "seed", o.Seed,
		"took", t2.Sub(t1).Round(time.Millisecond))
	r, err := pop.Evaluate(ctx, o.Grid, o.Seed)
	if err != nil {
		return nil, err
	}
	r.Instances, r.Queries = len(pool.inst), len(pool.kw)
	r.Length = o.Keywords.Len()
	r.Prio3Bytes = map[Prio3Measurement]int{}
	for _, m := range ms {
		if r.Prio3Bytes[m], err = Prio3UploadBytes(m, r.Length); err != nil {
			return nil, err
		}
	}
	r.LoadTime, r.GenerateTime, r.EvaluateTime = t1.Sub(t0), t2.Sub(t1), time.Since(t2)
	slog.Info("simulate pdd: grid evaluated", "configurations", len(r.Points), "rounds", fmt.Sprintf("%d..%d", r.FirstRound, r.LastRound),
		"took", r.EvaluateTime.Round(time.Millisecond))
	return r, nil
}

func (g PDDGrid) validate() error {
	if len(g.GroupSizes) == 0 || len(g.Delays) == 0 {
		return fmt.Errorf("simulate pdd: empty grid (group sizes %v, delays %v): give at least one of each", g.GroupSizes, g.Delays)
	}
	for _, gs := range g.GroupSizes {
		if gs < 1 {
			return fmt.Errorf("simulate pdd: group size %d: must be ≥ 1", gs)
		}
	}
	for _, d := range g.Delays {
		if d < 0 {
			return fmt.Errorf("simulate pdd: delay %d: must be ≥ 0 days", d)
		}
	}
	if g.RecoveryDays < 0 {
		return fmt.Errorf("simulate pdd: recovery window %d: must be ≥ 0 days", g.RecoveryDays)
	}
	return nil
}

// QueryPool is the search content of the simulation: the query instances of
// a log, each as the monitored keywords it contains.
type QueryPool struct {
	kw   [][]int32 // per distinct normalized query: distinct keyword indices
	inst []int32   // per query instance: index into kw
}

// LoadQueryPool reads the log at path and keeps every query instance of
// every user with the monitored keywords of list it contains, read exactly
// as a client reads its own log (ingest/keywords): instances by
// keywords.Instances (normalized, consecutive repeats collapsed, a run
// ending at the UTC day boundary) and keywords by List.Match (UAX #29 word
// boundaries, so that keywords of scripts without spaces match inside a
// query: "北京" in "北京大学招生"). Errors: unreadable log, a log without
// queries.
func LoadQueryPool(ctx context.Context, path string, list *keywords.List) (*QueryPool, error) {
	p := &QueryPool{}
	ids := map[string]int32{}
	_, err := aol.ReadUsers(path, func(u aol.User) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, in := range keywords.Instances(u.Records, nil) {
			id, ok := ids[in.Query]
			if !ok {
				id = int32(len(p.kw))
				ids[in.Query] = id
				var kws []int32
				for _, i := range list.Match(in.Query) {
					kws = append(kws, int32(i))
				}
				p.kw = append(p.kw, kws)
			}
			p.inst = append(p.inst, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("simulate pdd: read %s (give the AOL log with --input): %w", path, err)
	}
	if len(p.inst) == 0 {
		return nil, fmt.Errorf("simulate pdd: %s has no query instances", path)
	}
	return p, nil
}

// Population is the simulated crowd: which days each user is active and
// nnz(u, d), the non-zero entries of user u's day-d keyword vector. It is
// read-only once built, so one population serves every configuration.
type Population struct {
	Users, Days int       // U users, D days (0..D−1)
	nnz         []int32   // u*Days + d
	next        []uint16  // u*(Days+1) + d: first active day ≥ d, Days if none
	cum         []uint16  // u*(Days+1) + d: active days in [0, d)
	activeOn    [][]int32 // per day, active users ascending
	dayNNZ      []int64   // per day, Σ_u nnz(u, d)
	searches    []uint8   // u*Days + d: searches drawn (GeneratePopulation only), at most 255
	prio3       []Prio3Measurement
	prio3Err    prio3Acc // per measurement, day and arrival bucket: summed relative error
}

// NewPopulation builds a population from an activity matrix active[u][d]
// and nnz[u][d] (U × D each). Errors: ragged or mismatched matrices, D out
// of 2..65535, a negative nnz, or nnz > 0 on an inactive day.
func NewPopulation(active [][]bool, nnz [][]int32) (*Population, error) {
	U := len(active)
	if U == 0 || len(nnz) != U {
		return nil, fmt.Errorf("simulate pdd: population of %d activity rows and %d nnz rows: need the same, ≥ 1", U, len(nnz))
	}
	D := len(active[0])
	p, err := newPopulation(U, D)
	if err != nil {
		return nil, err
	}
	for u := range U {
		if len(active[u]) != D || len(nnz[u]) != D {
			return nil, fmt.Errorf("simulate pdd: user %d has %d activity and %d nnz days, want %d", u, len(active[u]), len(nnz[u]), D)
		}
		for d := range D {
			if nnz[u][d] < 0 || (nnz[u][d] > 0 && !active[u][d]) {
				return nil, fmt.Errorf("simulate pdd: user %d day %d: nnz %d on a day with active=%v", u, d, nnz[u][d], active[u][d])
			}
		}
		p.setUser(u, active[u], nnz[u])
	}
	p.index()
	return p, nil
}

func newPopulation(U, D int) (*Population, error) {
	if D < 2 || D > math.MaxUint16 {
		return nil, fmt.Errorf("simulate pdd: %d days: need 2..%d", D, math.MaxUint16)
	}
	if U < 1 || U > math.MaxInt32 {
		return nil, fmt.Errorf("simulate pdd: %d users: need 1..%d", U, math.MaxInt32)
	}
	return &Population{
		Users: U, Days: D,
		nnz:  make([]int32, U*D),
		next: make([]uint16, U*(D+1)),
		cum:  make([]uint16, U*(D+1)),
	}, nil
}

// setUser fills user u's rows; safe for distinct u concurrently.
func (p *Population) setUser(u int, active []bool, nnz []int32) {
	D := p.Days
	copy(p.nnz[u*D:(u+1)*D], nnz)
	next, cum := p.next[u*(D+1):(u+1)*(D+1)], p.cum[u*(D+1):(u+1)*(D+1)]
	next[D] = uint16(D)
	for d := D - 1; d >= 0; d-- {
		if active[d] {
			next[d] = uint16(d)
		} else {
			next[d] = next[d+1]
		}
	}
	for d := range D {
		cum[d+1] = cum[d]
		if active[d] {
			cum[d+1]++
		}
	}
}

// index builds the per-day lists once every user is set.
func (p *Population) index() {
	D := p.Days
	p.activeOn = make([][]int32, D)
	p.dayNNZ = make([]int64, D)
	for u := range p.Users {
		for d := range D {
			if p.active(u, d) {
				p.activeOn[d] = append(p.activeOn[d], int32(u))
				p.dayNNZ[d] += int64(p.nnz[u*D+d])
			}
		}
	}
}

func (p *Population) active(u, d int) bool { return int(p.next[u*(p.Days+1)+d]) == d }

// Active reports whether user u is active on day d.
func (p *Population) Active(u, d int) bool { return p.active(u, d) }

// NNZ returns nnz(u, d).
func (p *Population) NNZ(u, d int) int { return int(p.nnz[u*p.Days+d]) }

// Searches returns the number of searches user u drew on day d (0 for a
// population not drawn by GeneratePopulation).
func (p *Population) Searches(u, d int) int {
	if p.searches == nil {
		return 0
	}
	return int(p.searches[u*p.Days+d])
}

// expSource adapts a math/rand/v2 PCG to the golang.org/x/exp/rand.Source
// that gonum's distuv samplers take, so one seeded stream feeds everything.
type expSource struct{ pcg *rand.PCG }

func (s expSource) Uint64() uint64   { return s.pcg.Uint64() }
func (s expSource) Seed(seed uint64) { s.pcg.Seed(seed, 0) }

// GeneratePopulation draws users × days of activity and keyword counts from
// the PDD §4.1 model (package comment) with queries from pool, and scores
// each client-day's counts under the Prio3 measurements ms (clipping,
// presence; no draw depends on ms). User u's draws come from its own
// stream PCG(seed, u), so the result does not depend on the number of
// workers. Errors: days out of 2..65535, users < 1, an invalid measurement,
// cancelled ctx.
func GeneratePopulation(ctx context.Context, users, days int, seed uint64, pool *QueryPool, ms ...Prio3Measurement) (*Population, error) {
	p, err := newPopulation(users, days)
	if err != nil {
		return nil, err
	}
	if pool == nil || len(pool.inst) == 0 {
		return nil, fmt.Errorf("simulate pdd: empty query pool")
	}
	for _, m := range ms {
		if err := m.validate(); err != nil {
			return nil, err
		}
	}
	p.searches = make([]uint8, users*days)
	p.prio3 = ms
	p.prio3Err = newPrio3Acc(len(ms), days)
	var accMu sync.Mutex
	maxKW := int32(0)
	for _, kws := range pool.kw {
		for _, k := range kws {
			maxKW = max(maxKW, k+1)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), max(1, users/1000))
	var wg sync.WaitGroup
	var next atomic.Int64 // first user of the next chunk
	const chunk = 1024
	for range workers {
		wg.Go(func() {
			active := make([]bool, days)
			nnz := make([]int32, days)
			perm := make([]int, days)
			mark := make([]uint32, maxKW)
			count := make([]int32, maxKW)
			var entries []kwCount
			nextAfter := make([]int, days+1)
			acc := newPrio3Acc(len(ms), days)
			defer func() {
				accMu.Lock()
				p.prio3Err.add(acc)
				accMu.Unlock()
			}()
			stamp := uint32(0)
			for {
				if ctx.Err() != nil {
					return
				}
				lo := int(next.Add(chunk) - chunk)
				if lo >= users {
					return
				}
				for u := lo; u < min(lo+chunk, users); u++ {
					pcg := rand.NewPCG(seed, uint64(u))
					rng := rand.New(pcg)
					src := expSource{pcg}
					share := distuv.Beta{Alpha: PDDActiveAlpha, Beta: PDDActiveBeta, Src: src}.Rand()
					searches := distuv.Normal{Mu: PDDSearchMu, Sigma: math.Sqrt(PDDSearchVar), Src: src}
					A := int(math.Round(share * float64(days)))
					A = min(max(A, 0), days)
					// A days without replacement: a partial Fisher–Yates shuffle
					for d := range perm {
						perm[d] = d
						active[d] = false
						nnz[d] = 0
					}
					for i := range A {
						j := i + rng.IntN(days-i)
						perm[i], perm[j] = perm[j], perm[i]
						active[perm[i]] = true
					}
					nextAfter[days] = days
					for d := days - 1; d >= 0; d-- {
						nextAfter[d] = nextAfter[d+1]
						if active[d] {
							nextAfter[d] = d
						}
					}
					for d := range days {
						if !active[d] {
							continue
						}
						n := int(max(0, math.Round(searches.Rand())))
						stamp++
						if stamp == 0 { // wrapped: forget old marks
							clear(mark)
							stamp = 1
						}
						p.searches[u*days+d] = uint8(min(n, 255))
						entries = entries[:0]
						for range n {
							for _, k := range pool.kw[pool.inst[rng.IntN(len(pool.inst))]] {
								if mark[k] != stamp {
									mark[k] = stamp
									count[k] = 0
									nnz[d]++
									entries = append(entries, kwCount{k: k})
								}
								count[k]++
							}
						}
						if len(ms) > 0 && len(entries) > 0 {
							for i := range entries {
								entries[i].c = count[entries[i].k]
							}
							acc.addDay(ms, d, gapBucket(d, nextAfter[d+1], days), entries)
						}
					}
					p.setUser(u, active, nnz)
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.index()
	return p, nil
}

// Evaluate scores every configuration of g on p (PDDResult.Points in
// PDDModes × g.GroupSizes × g.Delays order). The candidates of round s are
// shuffled with the stream PCG(seed, 2^63 + s), shared by all
// configurations. Errors: invalid grid, too few days for the largest delay
// plus the recovery window, cancelled ctx.
func (p *Population) Evaluate(ctx context.Context, g PDDGrid, seed uint64) (*PDDResult, error) {
	return p.evaluate(ctx, g, seed, func(s int, cand []int32) {
		r := rand.New(rand.NewPCG(seed, 1<<63+uint64(s)))
		r.Shuffle(len(cand), func(i, j int) { cand[i], cand[j] = cand[j], cand[i] })
	})
}

// groupTally accumulates one group's members during the round-robin deal.
type groupTally struct {
	n, sub, subRec int32 // members; who submitted; who submitted and are active in the recovery window
	nnzAll, nnzSub int64 // non-zero entries of all members; of those who submitted
}

// evaluate is Evaluate with the candidate order given by order, which
// permutes round s's candidates (users active on day s, ascending) in place.
func (p *Population) evaluate(ctx context.Context, g PDDGrid, seed uint64, order func(s int, cand []int32)) (*PDDResult, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	last, err := p.lastRound(g)
	if err != nil {
		return nil, err
	}
	if len(p.prio3) > 0 {
		for _, d := range g.Delays {
			if d+1 > MaxPrio3Grace {
				return nil, fmt.Errorf("simulate pdd: delay %d: the Prio3 rows score graces up to %d days; use delays ≤ %d, or turn the rows off with --prio3-bits 0 --prio3-max-weights 0", d, MaxPrio3Grace, MaxPrio3Grace-1)
			}
		}
	}
	e := p.newEvaluation(g, seed, last)
	start := time.Now()
	logged := start
	for s := 0; s <= last; s++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e.cand = append(e.cand[:0], p.activeOn[s]...)
		order(s, e.cand)
		e.round(s)
		if time.Since(logged) >= 2*time.Second {
			logged = time.Now()
			slog.Info("simulate pdd: evaluating", "round", s, "last", last, "elapsed", time.Since(start).Round(time.Millisecond))
		}
	}
	r := e.finish()
	r.Prio3 = p.prio3Points(g, last)
	return r, nil
}

// lastRound is the last round scored: every delay of g and the recovery
// window must end before the population's last day (s+1+δmax+R ≤ D−1).
func (p *Population) lastRound(g PDDGrid) (int, error) {
	D, R := p.Days, g.RecoveryDays
	dmax := 0
	for _, d := range g.Delays {
		dmax = max(dmax, d)
	}
	last := D - 2 - dmax - R
	if last < 0 {
		return 0, fmt.Errorf("simulate pdd: %d days leave no round to score with delay %d and a %d-day recovery window: simulate at least %d days",
			D, dmax, R, dmax+R+2)
	}
	return last, nil
}

// evaluation is the state of one evaluate: the result's points with their
// confidence sums, and buffers sized for the busiest day.
type evaluation struct {
	p       *Population
	g       PDDGrid
	res     *PDDResult
	confSum []float64
	confN   []int
	// per round: the ordered candidates, the members of one (delay,
	// heuristic) configuration and, per member, its non-zero entries,
	// whether it submitted and whether it answers recovery
	cand, list []int32
	nz         []int32
	sub, rec   []bool
	tally      []groupTally
}

// newEvaluation lays out one point per (mode, group size, delay) and the
// buffers.
func (p *Population) newEvaluation(g PDDGrid, seed uint64, last int) *evaluation {
	res := &PDDResult{Users: p.Users, Days: p.Days, Seed: seed, RecoveryDays: g.RecoveryDays, FirstRound: 0, LastRound: last}
	e := &evaluation{p: p, g: g, res: res}
	modes := PDDModes()
	res.Points = make([]PDDPoint, len(modes)*len(g.GroupSizes)*len(g.Delays))
	e.confSum = make([]float64, len(res.Points))
	e.confN = make([]int, len(res.Points))
	for mi, m := range modes {
		for gi, gs := range g.GroupSizes {
			for di, d := range g.Delays {
				res.Points[e.at(mi, gi, di)] = PDDPoint{Mode: m, GroupSize: gs, Delay: d, Rounds: last + 1}
			}
		}
	}
	maxActive := 0
	for _, a := range p.activeOn {
		maxActive = max(maxActive, len(a))
	}
	e.cand = make([]int32, 0, maxActive)
	e.list = make([]int32, 0, maxActive)
	e.nz = make([]int32, maxActive)
	e.sub = make([]bool, maxActive)
	e.rec = make([]bool, maxActive)
	e.tally = make([]groupTally, maxActive)
	return e
}

// at is the index of the point of mode mi, group size gi and delay di.
func (e *evaluation) at(mi, gi, di int) int {
	return (mi*len(e.g.GroupSizes)+gi)*len(e.g.Delays) + di
}

// round scores round s (its candidates in e.cand, ordered) under every
// delay, with and without the heuristic, every group size and both
// recovery settings.
func (e *evaluation) round(s int) {
	nActive := len(e.p.activeOn[s])
	e.res.ActiveUserDays += int64(nActive)
	for di, delay := range e.g.Delays {
		for _, heur := range []bool{false, true} {
			N := e.members(s, delay, heur)
			for gi, gs := range e.g.GroupSizes {
				G := 0
				if N > 0 {
					G = max(1, N/gs)
				}
				tl := e.deal(N, G)
				for _, recovery := range []bool{false, true} {
					mi := 0
					switch {
					case heur && recovery:
						mi = 3
					case recovery:
						mi = 2
					case heur:
						mi = 1
					}
					e.score(e.at(mi, gi, di), tl, recovery, e.p.dayNNZ[s], nActive)
				}
			}
		}
	}
}

// members fills e.list with round s's grouped members under delay (with
// heur, PDD eq. 5: only those active on ≥ (d−1)/δ of days 0..d−2) and, per
// member, its non-zero entries, whether it submitted within the delay and
// whether it is active in the recovery window after it. It returns their
// number.
func (e *evaluation) members(s, delay int, heur bool) int {
	p, D, R, d := e.p, e.p.Days, e.g.RecoveryDays, s+1
	e.list = e.list[:0]
	if heur && delay > 0 && d > delay {
		for _, u := range e.cand {
			if int(p.cum[int(u)*(D+1)+d-1])*delay >= d-1 {
				e.list = append(e.list, u)
			}
		}
	} else {
		e.list = append(e.list, e.cand...)
	}
	for j, u := range e.list {
		row := int(u) * (D + 1)
		e.nz[j] = p.nnz[int(u)*D+s]
		e.sub[j] = int(p.next[row+d]) <= d+delay
		e.rec[j] = R > 0 && int(p.next[row+d+delay+1]) <= d+delay+R
	}
	return len(e.list)
}

// deal deals the N members round-robin into G groups and returns the
// groups' tallies.
func (e *evaluation) deal(N, G int) []groupTally {
	tl := e.tally[:G]
	clear(tl)
	k := 0
	for j := range N {
		t := &tl[k]
		t.n++
		t.nnzAll += int64(e.nz[j])
		if e.sub[j] {
			t.sub++
			t.nnzSub += int64(e.nz[j])
			if e.rec[j] {
				t.subRec++
			}
		}
		if k++; k == G {
			k = 0
		}
	}
	return tl
}

// score adds one round's groups tl to point i: a group of all submitted
// members is decrypted whole; with recovery, one with a majority
// (n/2+1) that submitted and answers recovery yields its submitters' sum;
// any other is lost. total is the round's non-zero entries, nActive its
// active users (the confidence's denominator).
func (e *evaluation) score(i int, tl []groupTally, recovery bool, total int64, nActive int) {
	pt := &e.res.Points[i]
	var decNNZ int64
	decClients := 0
	for j := range tl {
		t := &tl[j]
		if t.n < 2 {
			continue // never formed: a lone member's data would be revealed
		}
		pt.Groups++
		th := t.n/2 + 1
		switch {
		case t.sub == t.n:
			decNNZ += t.nnzAll
			decClients += int(t.n)
		case recovery && t.sub >= th && t.subRec >= th:
			decNNZ += t.nnzSub
			decClients += int(t.sub)
			pt.GroupsRecovered++
		default:
			pt.GroupsLost++
		}
	}
	pt.TotalNNZ += total
	pt.LostNNZ += total - decNNZ
	if nActive > 0 {
		e.confSum[i] += float64(decClients) / float64(nActive)
		e.confN[i]++
	}
}

// finish computes each point's MRE (PDD eq. 4) and mean confidence.
func (e *evaluation) finish() *PDDResult {
	for i := range e.res.Points {
		pt := &e.res.Points[i]
		if pt.TotalNNZ > 0 {
			pt.MRE = float64(pt.LostNNZ) / float64(pt.TotalNNZ)
		}
		if e.confN[i] > 0 {
			pt.Confidence = e.confSum[i] / float64(e.confN[i])
		}
	}
	return e.res
}

// PDDCSVHeader is the header line of PDDResult.WriteCSV.
const PDDCSVHeader = "mode,group_size,delay,mre,confidence,rounds,groups,groups_lost,groups_recovered"

// WriteCSV writes PDDCSVHeader and one line per point.
func (r *PDDResult) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(strings.Split(PDDCSVHeader, ","))
	for _, p := range r.Points {
		cw.Write([]string{string(p.Mode), strconv.Itoa(p.GroupSize), strconv.Itoa(p.Delay),
			strconv.FormatFloat(p.MRE, 'f', 4, 64), strconv.FormatFloat(p.Confidence, 'f', 4, 64),
			strconv.Itoa(p.Rounds), strconv.Itoa(p.Groups), strconv.Itoa(p.GroupsLost), strconv.Itoa(p.GroupsRecovered)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("simulate pdd: write CSV: %w", err)
	}
	return nil
}

// WriteTable writes a human summary: MRE and confidence per mode and group
// size (rows) against the delay (columns).
func (r *PDDResult) WriteTable(w io.Writer) error {
	var delays, sizes []int
	seenD, seenG := map[int]bool{}, map[int]bool{}
	for _, p := range r.Points {
		if !seenD[p.Delay] {
			seenD[p.Delay] = true
			delays = append(delays, p.Delay)
		}
		if !seenG[p.GroupSize] {
			seenG[p.GroupSize] = true
			sizes = append(sizes, p.GroupSize)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "PDD simulation: %d users × %d days, seed %d, recovery window %d day(s); rounds %d..%d scored\n",
		r.Users, r.Days, r.Seed, r.RecoveryDays, r.FirstRound, r.LastRound)
	for _, metric := range []string{"MRE", "confidence"} {
		fmt.Fprintf(&b, "\n%-10s %-19s %5s", metric, "mode", "gs")
		for _, d := range delays {
			fmt.Fprintf(&b, "   δ=%-3d", d)
		}
		b.WriteString("\n")
		for _, m := range PDDModes() {
			for _, gs := range sizes {
				fmt.Fprintf(&b, "%-10s %-19s %5d", "", m, gs)
				for _, d := range delays {
					p, _ := r.At(m, gs, d)
					v := p.MRE
					if metric == "confidence" {
						v = p.Confidence
					}
					fmt.Fprintf(&b, "  %6.4f", v)
				}
				b.WriteString("\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
