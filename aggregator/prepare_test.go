package aggregator

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

func ctl(t testing.TB, op, app, epoch string) Message {
	return controlMsg(t, protocol.EpochOpen{Op: op, App: app, Epoch: epoch, Partitions: 1})
}

// prepareFixture is a message sequence that exercises every verdict of
// Prepare's checks (report tokens and ARC presentations, good and bad,
// replays), with the drop counts and decryptions it was built to cause.
type prepareFixture struct {
	onionKey   *onion.KeyPair
	reportKeys func(string) (*token.PrivateKey, error)
	arcKeys    func(string) (*arc.PrivateKey, error)
	msgs       []Message
	wantDrops  map[string]int64 // verification at the threshold
	// wantArrival: with VerifyOnArrival, where the verdicts differ
	wantArrival map[string]int64
	wantDec     int64
	arrival     bool // partition: VerifyOnArrival
}

func newPrepareFixture(t *testing.T) *prepareFixture {
	onionKey, _ := onion.GenerateKeyPair(1)
	otherOnion, _ := onion.GenerateKeyPair(2)
	k1, _ := token.GenerateKey(token.KindReport, "e1")
	k2, _ := token.GenerateKey(token.KindReport, "e2")
	arcKey, _ := arc.GenerateKey(rand.Reader)
	f := &prepareFixture{onionKey: onionKey, wantDrops: map[string]int64{},
		reportKeys: func(e string) (*token.PrivateKey, error) {
			switch e {
			case "e1":
				return k1, nil
			case "e2":
				return k2, nil
			}
			return nil, fmt.Errorf("no report key for %s", e)
		},
		arcKeys: func(e string) (*arc.PrivateKey, error) {
			if e == "e1" {
				return arcKey, nil
			}
			return nil, fmt.Errorf("no ARC key for %s", e)
		}}
	add := func(r *star.Report) { f.msgs = append(f.msgs, Message{Value: wrap(t, onionKey, r)}) }
	paid := func(key *token.PrivateKey, r *star.Report, pres []byte) *star.Report {
		r.Token, r.Presentation = nil, nil
		payWith(t, key, r)
		r.Presentation = pres
		return r
	}
	const k = 3
	s := sealing(t, "weather", star.FTu, k)
	other := sealing(t, "sunshine", star.FTu, k)
	for _, e := range []string{"e1", "e2", "e3"} {
		f.msgs = append(f.msgs, ctl(t, protocol.ControlOpenEpoch, "query", e))
	}
	// 4 credentials, each 2 impressions with one presentation's bytes and
	// 1 with a fresh presentation (same tag): all 12 open at k = 3
	var firstTag []byte
	var firstMsg Message
	for i := range 4 {
		cred := credential(t, arcKey)
		pres, tag := present(t, cred, &s)
		fresh, _ := present(t, cred, &s)
		if i == 0 {
			firstTag = tag
		}
		for j, p := range [][]byte{pres, pres, fresh} {
			r, err := s.SealARC(tag, "weather", fmt.Sprintf("v%d", j))
			if err != nil {
				t.Fatal(err)
			}
			add(paid(k1, r, p))
			f.wantDec++
			if i == 0 && j == 0 {
				firstMsg = f.msgs[len(f.msgs)-1]
			}
		}
	}
	// replays of an accepted message: spent-token
	f.msgs = append(f.msgs, firstMsg, firstMsg)
	f.wantDrops["spent-token"] += 2
	// the same report with a second token: duplicate
	r0, _ := s.SealARC(firstTag, "weather", "dup")
	cred0 := credential(t, arcKey)
	p0, tag0 := present(t, cred0, &other)
	rd, _ := other.SealARC(tag0, "sunshine", "x")
	add(paid(k1, rd, p0))
	// the same report with a token minted again: VOPRF tokens are
	// deterministic in their nonce, so it is the spent token when it was
	// verified on arrival; at the threshold (its group of 1 is pending,
	// unverified) the same report id: a duplicate
	add(paid(k1, rd, p0))
	f.wantDrops["duplicate"]++
	f.wantArrival = map[string]int64{"duplicate": -1, "spent-token": 1}
	// a repeat at the first credential's x whose presentation is for
	// another artifact: bad-presentation
	add(paid(k1, r0, p0))
	f.wantDrops["bad-presentation"]++
	// a Sybil: one credential's valid presentation on 5 self-chosen secrets
	sybil := credential(t, arcKey)
	sp, _ := present(t, sybil, &s)
	for range 5 {
		u, _ := star.NewUserSecret()
		r, _ := s.Seal(&u, "weather", "sybil")
		add(paid(k1, r, sp))
	}
	f.wantDrops["bad-presentation"] += 5
	// no presentation
	rn, _ := s.SealARC(tag0, "weather", "none")
	add(paid(k1, rn, nil))
	f.wantDrops["bad-presentation"]++
	// tokens: none, garbage, another report's, altered authenticator
	u, _ := star.NewUserSecret()
	rt, _ := s.Seal(&u, "weather", "t")
	rt.Token = nil
	add(rt)
	f.wantDrops["no-token"]++
	rt.Token = []byte("not a token")
	add(rt)
	ro, _ := s.Seal(&u, "weather", "o")
	paid(k1, ro, nil)
	rt.Token = ro.Token
	add(rt)
	bad := append([]byte(nil), paid(k1, rt, nil).Token...)
	bad[len(bad)-1] ^= 1
	rt.Token = bad
	add(rt)
	f.wantDrops["bad-token"] += 2
	// the altered token's report has no presentation either: at the
	// threshold that cheap check comes first; on arrival the token's
	f.wantDrops["bad-presentation"]++
	f.wantArrival["bad-presentation"]--
	f.wantArrival["bad-token"]++
	// e2: token key, no ARC key; e3: no token key; e4: never opened
	for _, e := range []string{"e2", "e3", "e4"} {
		omega := make([]byte, 64)
		copy(omega, "weather")
		se, err := star.DeriveSealing(omega, "query", e, star.FTu, k)
		if err != nil {
			t.Fatal(err)
		}
		c := credential(t, arcKey)
		pe, te := present(t, c, &se)
		r, _ := se.SealARC(te, "weather", "e")
		add(paid(k2, r, pe)) // bound to r; e3 and e4 have no key of their own
	}
	f.wantDrops["arc-key"]++
	f.wantDrops["token-key"]++
	f.wantDrops["unknown-epoch"]++
	// malformed message, unknown key, malformed control
	f.msgs = append(f.msgs, Message{Value: []byte("garbage")})
	f.wantDrops["malformed"]++
	rk, _ := s.Seal(&u, "weather", "k")
	f.msgs = append(f.msgs, Message{Value: wrap(t, otherOnion, paid(k1, rk, nil))})
	f.wantDrops["unknown-key"]++
	f.msgs = append(f.msgs, Message{Value: []byte("{"), Control: true})
	f.wantDrops["malformed-control"]++
	// close e1, then a late report
	f.msgs = append(f.msgs, ctl(t, protocol.ControlCloseEpoch, "query", "e1"))
	cl := credential(t, arcKey)
	pl, tl := present(t, cl, &s)
	rl, _ := s.SealARC(tl, "weather", "late")
	add(paid(k1, rl, pl))
	f.wantDrops["late"]++
	return f
}

func (f *prepareFixture) partition() *Partition {
	p := NewPartition(0, 1, []*onion.KeyPair{f.onionKey})
	p.RequireOpen = true
	p.ReportKeys, p.ARCKeys = f.reportKeys, f.arcKeys
	p.VerifyOnArrival = f.arrival
	return p
}

// result is everything a run shows: the emits' JSON in order, the
// counters and the pending groups.
type prepareResult struct {
	emits    []byte
	stats    Stats
	verified int64
	pending  []PendingGroup
}

func resultOf(t *testing.T, p *Partition, emits [][]protocol.Decrypted) prepareResult {
	var b []byte
	for _, e := range emits {
		j, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b = append(append(b, j...), '\n')
	}
	return prepareResult{emits: b, stats: p.Stats, verified: p.arcVerified, pending: p.Pending()}
}

// TestPrepareEquivalent: Prepare on several goroutines in a shuffled
// order (with the epochs' keys loaded before, as EpochOpen loads them, and
// without: then ApplyPrepared checks), and PrepareBatch on the shared pool
// in batches of random sizes, then ApplyPrepared in message order, gives byte-identical emits, the same Stats and the same
// pending groups as plain Apply, with report tokens and ARC presentations,
// bad tokens, bad presentations and replays — also through a small shared
// verifyCache that evicts, and again with that cache warm (a rebuild by
// replay). The plain run itself shows the drops and decryptions the
// fixture was built to cause.
func TestPrepareEquivalent(t *testing.T) {
	for _, arrival := range []bool{false, true} {
		t.Run(fmt.Sprintf("VerifyOnArrival=%v", arrival), func(t *testing.T) { testPrepareEquivalent(t, arrival) })
	}
}

func testPrepareEquivalent(t *testing.T, arrival bool) {
	f := newPrepareFixture(t)
	f.arrival = arrival
	wantVerified := int64(4) // 4 credentials of weather; the sunshine group never reaches k
	if arrival {
		for r, d := range f.wantArrival {
			if f.wantDrops[r] += d; f.wantDrops[r] == 0 {
				delete(f.wantDrops, r)
			}
		}
		wantVerified = 4 + 1 // and 1 of sunshine (the duplicate's group), verified on arrival
	}
	plain := f.partition()
	var emits [][]protocol.Decrypted
	for _, m := range f.msgs {
		emits = append(emits, plain.Apply(m))
	}
	want := resultOf(t, plain, emits)
	if !reflect.DeepEqual(plain.Stats.Dropped, f.wantDrops) || plain.Stats.Decrypted != f.wantDec {
		t.Fatalf("plain Apply: dropped %v, decrypted %d; the fixture was built for %v, %d",
			plain.Stats.Dropped, plain.Stats.Decrypted, f.wantDrops, f.wantDec)
	}
	if plain.arcVerified != wantVerified {
		t.Fatalf("%d presentations verified in full, want %d", plain.arcVerified, wantVerified)
	}

	cache := newVerifyCache(3) // shared by the runs below; evicts
	shuffled := func(preload bool) prepareResult {
		p := f.partition()
		p.cache = cache
		if preload { // as the EpochOpens would: Prepare verifies on the goroutines
			p.reportKey("e1", true)
			p.reportKey("e2", true)
			p.arcKey("e1", true)
		}
		prepared := make([]Prepared, len(f.msgs))
		work := make(chan int)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					prepared[i] = p.Prepare(f.msgs[i])
				}
			}()
		}
		for _, i := range mrand.Perm(len(f.msgs)) {
			work <- i
		}
		close(work)
		wg.Wait()
		verified := 0
		for _, pm := range prepared {
			if pm.report != nil && !pm.checks.later && pm.checks.tokenPre == "" {
				verified++
			}
		}
		if preload && verified < 20 {
			t.Fatalf("only %d reports were verified by Prepare", verified)
		}
		var emits [][]protocol.Decrypted
		for i := range prepared {
			emits = append(emits, p.ApplyPrepared(&prepared[i]))
		}
		return resultOf(t, p, emits)
	}
	batched := func() prepareResult {
		p := f.partition()
		p.cache = cache
		var emits [][]protocol.Decrypted
		for lo := 0; lo < len(f.msgs); {
			hi := min(len(f.msgs), lo+1+mrand.IntN(20))
			prepared := p.PrepareBatch(f.msgs[lo:hi])
			for i := range prepared {
				emits = append(emits, p.ApplyPrepared(&prepared[i]))
			}
			lo = hi
		}
		return resultOf(t, p, emits)
	}
	unloaded := func() prepareResult { return shuffled(false) } // every check in the state step
	preloaded := func() prepareResult { return shuffled(true) }
	for i, run := range []func() prepareResult{preloaded, batched, unloaded, preloaded, batched} {
		got := run()
		if string(got.emits) != string(want.emits) {
			t.Errorf("run %d: emits differ from Apply's:\n%s\nwant\n%s", i, got.emits, want.emits)
		}
		if !reflect.DeepEqual(got.stats, want.stats) || got.verified != want.verified || !reflect.DeepEqual(got.pending, want.pending) {
			t.Errorf("run %d: stats %+v, verified %d, pending %v; Apply gave %+v, %d, %v",
				i, got.stats, got.verified, got.pending, want.stats, want.verified, want.pending)
		}
	}
	if len(cache.cur)+len(cache.old) == 0 {
		t.Fatal("the shared cache never held a verdict")
	}
}

// FuzzPrepareReport fuzzes a report's encoding (trailer included: token
// and presentation) with report tokens and ARC on: a partition whose
// epoch keys were loaded before (Prepare verifies) and one whose keys were
// not (the state step verifies), and plain ApplyReport, all applying the
// report twice, must give the same emits and Stats.
func FuzzPrepareReport(f *testing.F) {
	reportKey, _ := token.GenerateKey(token.KindReport, "e1")
	arcKey, _ := arc.GenerateKey(rand.Reader)
	s := sealing(f, "x", star.FTu, 1)
	pres, tag := present(f, credential(f, arcKey), &s)
	r, _ := s.SealARC(tag, "x", "x")
	payWith(f, reportKey, r)
	r.Presentation = pres
	b, _ := r.MarshalBinary()
	f.Add(b)
	r.Presentation = nil
	plain, _ := r.MarshalBinary()
	f.Add(plain)
	f.Add(b[:len(b)-5])
	newP := func() *Partition {
		p := NewPartition(0, 1, nil)
		p.ReportKeys = keysOf(reportKey)
		p.ARCKeys = func(e string) (*arc.PrivateKey, error) {
			if e == "e1" {
				return arcKey, nil
			}
			return nil, fmt.Errorf("no ARC key for %s", e)
		}
		return p
	}
	f.Fuzz(func(t *testing.T, enc []byte) {
		r, err := star.ParseReport(enc)
		if err != nil {
			t.Skip()
		}
		plain, loaded, unloaded := newP(), newP(), newP()
		loaded.reportKey("e1", true)
		loaded.arcKey("e1", true)
		var want, got1, got2 []byte
		for range 2 {
			e1, _ := json.Marshal(plain.ApplyReport(r))
			want = append(want, e1...)
			for _, q := range []struct {
				p   *Partition
				out *[]byte
			}{{loaded, &got1}, {unloaded, &got2}} {
				pm := Prepared{report: r, checks: q.p.check(r, false)}
				e, _ := json.Marshal(q.p.ApplyPrepared(&pm))
				*q.out = append(*q.out, e...)
			}
		}
		if string(got1) != string(want) || string(got2) != string(want) ||
			!reflect.DeepEqual(loaded.Stats, plain.Stats) || !reflect.DeepEqual(unloaded.Stats, plain.Stats) {
			t.Fatalf("prepared runs differ from ApplyReport: stats %+v / %+v, want %+v", loaded.Stats, unloaded.Stats, plain.Stats)
		}
	})
}
