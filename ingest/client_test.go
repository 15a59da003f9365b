package ingest

import (
	"context"
	"crypto/rand"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	circloprf "github.com/cloudflare/circl/oprf"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/vss"
)

// localRandomness evaluates the OPRF in process with a real key (the unit
// test's stand-in for the NATS service; end-to-end tests use the service).
// Build it with newLocalRandomness: circl's PrivateKey.Public fills a cache
// on first use, so the public key is taken once, before the value is
// shared by goroutines (as randomness.Service does with its keys).
type localRandomness struct {
	key *circloprf.PrivateKey
	pub *circloprf.PublicKey
}

func newLocalRandomness(key *circloprf.PrivateKey) localRandomness {
	return localRandomness{key: key, pub: key.Public()}
}

func (l localRandomness) Evaluate(_ context.Context, epoch string, inputs [][]byte) ([][]byte, error) {
	fin, q, err := oprf.Blind(l.pub, epoch, inputs)
	if err != nil {
		return nil, err
	}
	resp, err := oprf.Evaluate(l.key, q)
	if err != nil {
		return nil, err
	}
	return oprf.Finalize(fin, resp)
}

type hops struct{ a, b, agg *onion.KeyPair }

func newHops(t testing.TB) (hops, Route) {
	var h hops
	h.a, _ = onion.GenerateKeyPair(1)
	h.b, _ = onion.GenerateKeyPair(2)
	h.agg, _ = onion.GenerateKeyPair(3)
	return h, Route{RelayA: h.a.PublicKey(), RelayB: h.b.PublicKey(), Aggregator: h.agg.PublicKey(), SubjectB: "crowdlog.relay.b"}
}

func TestSubmitUser(t *testing.T) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	h, route := newHops(t)
	var mu sync.Mutex
	var onions [][]byte
	c := &Client{App: apps.QueryApp{}, Epoch: "e", Policy: star.FTu, K: 2,
		Randomness: newLocalRandomness(key), Route: route,
		Publish: func(_ context.Context, o []byte) error {
			mu.Lock()
			onions = append(onions, o)
			mu.Unlock()
			return nil
		}}
	t0 := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	recs := []aol.Record{{AnonID: "1", Query: "Weather", QueryTime: t0}, {AnonID: "1", Query: "weather ", QueryTime: t0},
		{AnonID: "1", Query: "news", QueryTime: t0}, {AnonID: "1", Query: "weather", QueryTime: t0}}
	u1, _ := star.NewUserSecret()
	u2, _ := star.NewUserSecret()
	n1, err := c.SubmitUser(context.Background(), &u1, recs)
	if err != nil || n1 != 3 {
		t.Fatalf("user 1: %d reports, %v (want 3: weather, news, weather)", n1, err)
	}
	if n2, err := c.SubmitUser(context.Background(), &u2, recs[:1]); err != nil || n2 != 1 {
		t.Fatalf("user 2: %d reports, %v", n2, err)
	}
	// peel all three layers as the relays and aggregator would
	tags := map[[32]byte][]*star.Report{}
	for _, o := range onions {
		hop, in, err := onion.Peel([]*onion.KeyPair{h.a}, o)
		if err != nil || hop.Kind != onion.HopRelay || hop.Subject != "crowdlog.relay.b" {
			t.Fatalf("layer a: %v", err)
		}
		hop, in, err = onion.Peel([]*onion.KeyPair{h.b}, in)
		if err != nil || hop.Kind != onion.HopKafka {
			t.Fatalf("layer b: %v", err)
		}
		key := hop.Key
		hop, in, err = onion.Peel([]*onion.KeyPair{h.agg}, in)
		if err != nil || hop.Kind != onion.HopDeliver {
			t.Fatalf("layer agg: %v", err)
		}
		r, err := star.ParseReport(in)
		if err != nil {
			t.Fatal(err)
		}
		if string(key) != string(onion.ReportKey(r.Tag)) {
			t.Fatal("kafka key is not the report key (tag bucket)")
		}
		tags[r.Tag] = append(tags[r.Tag], r)
	}
	if len(tags) != 2 {
		t.Fatalf("%d distinct tags, want 2 (weather, news)", len(tags))
	}
	for _, rs := range tags {
		if len(rs) == 3 { // weather: two reports of user 1 with one share x, one of user 2
			x0, _ := rs[0].Share.X.MarshalBinary()
			x1, _ := rs[1].Share.X.MarshalBinary()
			x2, _ := rs[2].Share.X.MarshalBinary()
			if string(x0) != string(x1) || string(x0) == string(x2) {
				t.Fatal("FT_u: a user's repeats must share x, different users must not")
			}
			sec, err := vss.Recover([]vss.Share{rs[0].Share, rs[2].Share}, 2)
			if err != nil {
				t.Fatal(err)
			}
			p, err := star.OpenPayload(star.KeyFromSecret(rs[0].Tag, sec), rs[1])
			if err != nil || p.Primary != "weather" {
				t.Fatalf("open: %v %q", err, p.Primary)
			}
		}
	}
}

// BenchmarkClientPerArtifact: one artifact's client cost — OPRF blind and
// finalize (server evaluation excluded), sealing and three onion layers.
func BenchmarkClientPerArtifact(b *testing.B) {
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	_, route := newHops(b)
	u, _ := star.NewUserSecret()
	const batch = 100
	inputs := make([][]byte, batch)
	for i := range inputs {
		inputs[i] = oprf.OPRFInput("query", "e", string(rune('a'+i%26))+"query")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		fin, q, _ := oprf.Blind(key.Public(), "e", inputs)
		b.StopTimer()
		resp, _ := oprf.Evaluate(key, q) // the service's work
		b.StartTimer()
		omegas, err := oprf.Finalize(fin, resp)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range omegas {
			s, _ := star.DeriveSealing(w, "query", "e", star.FTu, 5)
			r, _ := s.Seal(&u, "query", "Query")
			if _, err := route.Wrap(r); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkHPKESeal is the bound the client cost is compared with: one HPKE
// single-shot seal of a 512-byte layer on the same machine.
func BenchmarkHPKESeal(b *testing.B) {
	_, route := newHops(b)
	msg := make([]byte, 400)
	for b.Loop() {
		onion.SealLayer(route.Aggregator, onion.Hop{Kind: onion.HopDeliver}, msg)
	}
}

func TestLimitArtifacts(t *testing.T) {
	t0 := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	at := func(p string, min int) apps.Artifact {
		return apps.Artifact{Primary: p, Time: t0.Add(time.Duration(min) * time.Minute)}
	}
	// log order with one out-of-order time: c@5 is more recent than b@4
	arts := []apps.Artifact{at("a", 1), at("b", 2), at("a", 3), at("c", 5), at("b", 4), at("a", 6)}
	prim := func(as []apps.Artifact) string {
		var s []string
		for _, a := range as {
			s = append(s, a.Primary)
		}
		return strings.Join(s, ",")
	}
	if got := prim(LimitArtifacts(arts, 3, false)); got != "b,c,a" {
		t.Fatalf("3 most recent instances: %s", got)
	}
	if got := prim(LimitArtifacts(arts, 2, true)); got != "c,a" {
		t.Fatalf("2 most recent distinct: %s", got)
	}
	if got := prim(LimitArtifacts(arts, 10, true)); got != "b,c,a" {
		t.Fatalf("all distinct, one each, most recent instance: %s", got)
	}
	if got := LimitArtifacts(arts, 0, true); len(got) != len(arts) {
		t.Fatal("0 must not limit")
	}
}

// TestPaddedReportStreams: under padding (dp-gsu) a light user (one query)
// and a heavy user (twelve distinct queries, repeated) each publish
// exactly m onions, all of one length at every hop, so relay a cannot tell
// them apart by count or size. Opened at k = 1, the heavy user's real
// reports are its m most frequent queries, counted here from its records
// (ties to the more recent), and the light user's other m − 1 are
// distinct dummies of ≥ 16 letters that no query of either user equals.
func TestPaddedReportStreams(t *testing.T) {
	const m = 5
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	h, route := newHops(t)
	var onions [][]byte
	c := &Client{App: apps.QueryApp{}, Epoch: "e", Policy: star.FTu, K: 1, Limit: m, LimitDistinct: true, Window: 1 << 30, Pad: true,
		Randomness: newLocalRandomness(key), Route: route,
		Publish: func(_ context.Context, o []byte) error { onions = append(onions, o); return nil }}
	t0 := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	light := []aol.Record{{AnonID: "1", Query: "weather", QueryTime: t0}}
	var heavy []aol.Record
	freq := map[string]int{}
	last := map[string]int{}
	for i := range 40 {
		j := i % 12 // twelve queries twice, then four of them four more times
		if i >= 24 {
			j = i % 4
		}
		q := fmt.Sprintf("query number %d", j)
		heavy = append(heavy, aol.Record{AnonID: "2", Query: q, QueryTime: t0.Add(time.Duration(i) * time.Minute)})
		freq[q]++
		last[q] = i
	}
	var want []string // m most frequent, ties to the more recent
	for q := range freq {
		want = append(want, q)
	}
	sort.Slice(want, func(a, b int) bool {
		if freq[want[a]] != freq[want[b]] {
			return freq[want[a]] > freq[want[b]]
		}
		return last[want[a]] > last[want[b]]
	})
	want = want[:m]
	streams := map[string][][]byte{}
	for _, u := range []struct {
		name string
		recs []aol.Record
	}{{"light", light}, {"heavy", heavy}} {
		onions = nil
		sec, _ := star.NewUserSecret()
		n, err := c.SubmitUser(context.Background(), &sec, u.recs)
		if err != nil || n != m || len(onions) != m {
			t.Fatalf("%s user: %d reports (%d onions), %v; want exactly %d", u.name, n, len(onions), err, m)
		}
		streams[u.name] = onions
	}
	size := len(streams["light"][0])
	var got []string
	dummies := map[string]bool{}
	for name, os := range streams {
		for _, o := range os {
			if len(o) != size {
				t.Fatalf("%s user: onion of %d bytes, the other user's are %d", name, len(o), size)
			}
			_, in, err := onion.Peel([]*onion.KeyPair{h.a}, o)
			if err != nil {
				t.Fatal(err)
			}
			if l := len(in); l != 1024 && l != 1536 && l != 512 {
				t.Fatalf("layer b of %d bytes", l)
			}
			_, in, _ = onion.Peel([]*onion.KeyPair{h.b}, in)
			_, in, err = onion.Peel([]*onion.KeyPair{h.agg}, in)
			if err != nil {
				t.Fatal(err)
			}
			r, err := star.ParseReport(in)
			if err != nil {
				t.Fatal(err)
			}
			sec, err := vss.Recover([]vss.Share{r.Share}, 1)
			if err != nil {
				t.Fatal(err)
			}
			p, err := star.OpenPayload(star.KeyFromSecret(r.Tag, sec), r)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case name == "heavy":
				got = append(got, p.Primary)
			case p.Primary != "weather":
				if len(p.Primary) < 16 || dummies[p.Primary] || freq[p.Primary] > 0 {
					t.Fatalf("dummy %q: short, repeated or a real query", p.Primary)
				}
				dummies[p.Primary] = true
			}
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "|") != strings.Join(want, "|") || len(dummies) != m-1 {
		t.Fatalf("heavy user sent %q, want its %d most frequent %q; light user %d dummies", got, m, want, len(dummies))
	}
}
