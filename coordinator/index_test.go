package coordinator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

// idxOldFormation is advanceOne's formation before the active index, written
// out again from the client records (id → active days, ascending).
func idxOldFormation(name string, round, start int32, gs, delay int, heur bool, end int32, days map[string][]int32) (int, [][]string) {
	d := round + 1
	ids := make([]string, 0, len(days))
	for id := range days {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var active, cand []string
	for _, id := range ids {
		if !slices.Contains(days[id], round) {
			continue
		}
		active = append(active, id)
		if idx := d - start; heur && delay > 0 && int(idx) > delay {
			n := 0
			for _, x := range days[id] {
				if x >= start && x <= d-2 {
					n++
				}
			}
			if float64(n) < float64(idx-1)/float64(delay) {
				continue
			}
		}
		cand = append(cand, id)
	}
	seed := sha256.Sum256([]byte(fmt.Sprintf("crowdlog-v1 pdd groups %s %d", name, round)))
	rng := mrand.New(mrand.NewChaCha8(seed))
	rng.Shuffle(len(cand), func(i, j int) { cand[i], cand[j] = cand[j], cand[i] })
	G := 0
	if end != 0 && round > end {
		cand = nil
	}
	if len(cand) >= blind.MinGroup {
		G = max(1, len(cand)/gs)
	}
	groups := make([][]string, G)
	for i, id := range cand[:len(cand)*min(G, 1)] {
		groups[i%G] = append(groups[i%G], id)
	}
	return len(active), groups
}

func idxPub(id string) []byte { p := sha256.Sum256([]byte("pub " + id)); return p[:] }

// idxEntries is what the pings of day wrote: an entry per client active on
// day, Prior its active days in [start, day−1], in an order unrelated to the
// ids, followed by a later duplicate of some clients (Prior 0 and no key:
// FormGroups must keep the first).
func idxEntries(days map[string][]int32, start, day int32) []ActiveEntry {
	var out, dups []ActiveEntry
	for id, ds := range days {
		if !slices.Contains(ds, day) {
			continue
		}
		n := 0
		for _, x := range ds {
			if x >= start && x < day {
				n++
			}
		}
		out = append(out, ActiveEntry{ID: id, Public: idxPub(id), Prior: n})
		if id[len(id)-1]%3 == 1 {
			dups = append(dups, ActiveEntry{ID: id})
		}
	}
	slices.SortFunc(out, func(a, b ActiveEntry) int { return bytes.Compare(a.Public, b.Public) })
	slices.SortFunc(dups, func(a, b ActiveEntry) int { return strings.Compare(a.ID, b.ID) })
	return append(out, dups...)
}

// FormGroups forms the same groups as advanceOne's formation on client
// records, heuristic included.
func TestFormGroupsMatchesAdvanceOne(t *testing.T) {
	// campaign start 100; day 105 formed on day 106 (idx 6): with δ = 2 the
	// heuristic keeps clients active on ≥ 2.5 of days 100..104
	days := map[string][]int32{
		"c01": {100, 101, 102, 103, 104, 105}, // 5 prior: kept
		"c02": {105},                          // 0: dropped
		"c03": {102, 104, 105},                // 2: dropped
		"c04": {101, 102, 103, 105},           // 3: kept
		"c05": {100, 102, 104, 105},           // 3: kept
		"c06": {103, 104},                     // not active on 105
		"c07": {98, 99, 100, 105},             // 1 (days before the start don't count): dropped
		"c08": {100, 101, 102, 105},           // 3: kept
		"c09": {101, 103, 104, 105},           // 3: kept
		"c10": {100, 101, 103, 104, 105},      // 4: kept
		"c11": {104, 105},                     // 1: dropped
		"c12": {100, 101, 102, 103, 104, 105}, // 5: kept
		"c13": {100, 102, 103, 105},           // 3: kept
		"c14": {101},                          // only day 101
	}
	const start = 100
	ids := func(groups [][]ActiveEntry) [][]string {
		var out [][]string
		for _, g := range groups {
			var ms []string
			for _, e := range g {
				if !bytes.Equal(e.Public, idxPub(e.ID)) {
					t.Fatalf("member %s: entry not the first one recorded (public %x)", e.ID, e.Public)
				}
				ms = append(ms, e.ID)
			}
			out = append(out, ms)
		}
		return out
	}
	// the heuristic case worked out by hand
	active, groups := FormGroups("flu", 105, idxEntries(days, start, 105), start, 3, 2, true, 0)
	var all []string
	for _, g := range ids(groups) {
		all = append(all, g...)
	}
	slices.Sort(all)
	if want := []string{"c01", "c04", "c05", "c08", "c09", "c10", "c12", "c13"}; active != 12 || len(groups) != 2 || !slices.Equal(all, want) {
		t.Fatalf("active %d, %d groups, members %v; want 12 active, 2 groups of %v", active, len(groups), all, want)
	}

	type tc struct {
		name      string
		round     int32
		gs, delay int
		heur      bool
		end       int32
	}
	cases := []tc{
		{"flu", 105, 3, 2, true, 0},
		{"flu", 105, 3, 2, false, 0},
		{"flu", 105, 2, 5, true, 0},    // idx 6 > 5: ≥ 1 prior day
		{"flu", 105, 3, 6, true, 0},    // idx 6 ≤ δ: no filter
		{"flu", 105, 3, 0, true, 0},    // δ = 0: no filter
		{"flu", 105, 100, 1, true, 0},  // ≥ 5 prior days; one group
		{"flu.v2", 105, 3, 2, true, 0}, // another campaign, another shuffle
		{"flu", 105, 3, 2, true, 104},  // after the end: none
		{"flu", 105, 3, 2, true, 105},  // the last round
		{"flu", 101, 2, 2, true, 0},    // idx 2 ≤ δ
		{"flu", 104, 2, 1, true, 0},
		{"flu", 99, 3, 2, true, 0}, // one active client: no group
		{"flu", 97, 3, 2, true, 0}, // nobody
	}
	for _, c := range cases {
		wantActive, want := idxOldFormation(c.name, c.round, start, c.gs, c.delay, c.heur, c.end, days)
		active, groups := FormGroups(c.name, c.round, idxEntries(days, start, c.round), start, c.gs, c.delay, c.heur, c.end)
		if got := ids(groups); active != wantActive || len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			t.Errorf("%+v: got active %d groups %v; advanceOne: active %d groups %v", c, active, got, wantActive, want)
		}
	}
}

func idxNATS(t testing.TB) jetstream.JetStream {
	t.Helper()
	ns, err := natsserver.Start(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		ns.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close(); ns.Shutdown() })
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16384))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// idxPublish stores entries as RecordActive would, asynchronously (for
// volume).
func idxPublish(t testing.TB, js jetstream.JetStream, campaign string, day int32, entries []ActiveEntry) {
	t.Helper()
	subj := ActiveSubject(campaign, day)
	const chunk = 50000
	for lo := 0; lo < len(entries); lo += chunk {
		futs := make([]jetstream.PubAckFuture, 0, chunk)
		for _, e := range entries[lo:min(lo+chunk, len(entries))] {
			b, _ := json.Marshal(e)
			f, err := js.PublishAsync(subj, b, jetstream.WithMsgID(activeMsgID(campaign, day, e.ID)), jetstream.WithStallWait(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			futs = append(futs, f)
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(2 * time.Minute):
			t.Fatalf("publish %s: no acknowledgement after 2 min", subj)
		}
		for _, f := range futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				t.Fatalf("publish %s: %v", subj, err)
			}
		}
	}
}

func idxKey(r *mrand.Rand) []byte {
	b := make([]byte, 32)
	for i := 0; i < 32; i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// The active index keeps each day's entries apart, per campaign, one per
// client (a republished entry is stored once; a duplicate that gets through
// is dropped, keeping the first), sorted by id; bad input gets clear errors.
func TestActiveIndex(t *testing.T) {
	ctx := context.Background()
	js := idxNATS(t)
	r := mrand.New(mrand.NewPCG(1, 2))
	e := func(id string, prior int) ActiveEntry {
		return ActiveEntry{ID: id, Public: idxKey(r), Sign: idxKey(r), Mask: idxKey(r), Prior: prior}
	}
	a, b, c, d, x := e("aa", 1), e("bb", 2), e("cc", 3), e("dd", 4), e("xx", 5)

	if _, err := ActiveOn(ctx, js, "flu", 100); err == nil || !strings.Contains(err.Error(), "EnsureActiveIndex") {
		t.Fatalf("ActiveOn before EnsureActiveIndex: %v", err)
	}
	if err := RecordActive(ctx, js, "flu", 100, a); err == nil || !strings.Contains(err.Error(), "EnsureActiveIndex") {
		t.Fatalf("RecordActive before EnsureActiveIndex: %v", err)
	}
	for _, ret := range []time.Duration{time.Hour, 2 * time.Hour} {
		if err := EnsureActiveIndex(ctx, js, ret); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, ActiveStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.MaxAge != 2*time.Hour || cfg.Storage != jetstream.FileStorage || cfg.Replicas != 1 {
		t.Fatalf("stream config: max age %v, storage %v, replicas %d", cfg.MaxAge, cfg.Storage, cfg.Replicas)
	}

	for _, rec := range []struct {
		camp string
		day  int32
		e    ActiveEntry
	}{{"flu", 100, c}, {"flu", 100, a}, {"flu", 101, d}, {"flu", 100, b}, {"flu.v2", 100, x}, {"flu", 100, e("aa", 9)}} {
		if err := RecordActive(ctx, js, rec.camp, rec.day, rec.e); err != nil {
			t.Fatal(err)
		}
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 5 {
		t.Fatalf("republished entry stored again: %d messages (%v)", info.State.Msgs, err)
	}
	// a duplicate outside the deduplication window (no message id here)
	dup, _ := json.Marshal(e("bb", 7))
	if _, err := js.Publish(ctx, ActiveSubject("flu", 100), dup); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		camp string
		day  int32
		want []ActiveEntry
	}{{"flu", 100, []ActiveEntry{a, b, c}}, {"flu", 101, []ActiveEntry{d}}, {"flu.v2", 100, []ActiveEntry{x}}, {"flu", 102, nil}, {"flu.v2", 101, nil}} {
		got, err := ActiveOn(ctx, js, q.camp, q.day)
		if err != nil || !reflect.DeepEqual(got, q.want) {
			t.Fatalf("ActiveOn(%s, %d) = %+v, %v; want %+v", q.camp, q.day, got, err, q.want)
		}
	}

	// more entries than one pull batch, in random id order
	var many []ActiveEntry
	for range 3*activeBatch + 17 {
		many = append(many, ActiveEntry{ID: hex.EncodeToString(idxKey(r)[:16]), Public: idxKey(r), Prior: r.IntN(5)})
	}
	idxPublish(t, js, "flu", 200, many)
	got, err := ActiveOn(ctx, js, "flu", 200)
	want := slices.SortedFunc(slices.Values(many), func(a, b ActiveEntry) int { return strings.Compare(a.ID, b.ID) })
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ActiveOn of %d entries: %d entries, %v", len(many), len(got), err)
	}

	for _, bad := range []struct {
		camp string
		e    ActiveEntry
		msg  string
	}{
		{"flu", ActiveEntry{ID: "a.b", Public: a.Public}, "client id"},
		{"flu", ActiveEntry{ID: "", Public: a.Public}, "client id"},
		{"flu", ActiveEntry{ID: "ab", Public: a.Public[:31]}, "public key has 31 bytes"},
		{"flu", ActiveEntry{ID: "ab", Public: a.Public, Mask: a.Public[:5]}, "mask key"},
		{"flu", ActiveEntry{ID: "ab", Public: a.Public, Prior: -1}, "prior"},
		{".flu", a, "campaign"},
		{"flu..x", a, "campaign"},
		{"flu>", a, "campaign"},
	} {
		if err := RecordActive(ctx, js, bad.camp, 100, bad.e); err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("RecordActive(%q, %+v): %v, want an error about %s", bad.camp, bad.e, err, bad.msg)
		}
	}
	if _, err := js.Publish(ctx, ActiveSubject("flu", 300), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := ActiveOn(ctx, js, "flu", 300); err == nil || !strings.Contains(err.Error(), "entry") {
		t.Fatalf("malformed entry: %v", err)
	}
}

// Stored entries decode, directly or through json.Unmarshal, exactly as
// json.Unmarshal decodes them (an invalid client id is an error).
func FuzzActiveEntryDecode(f *testing.F) {
	k := idxPub("k")
	for _, e := range []ActiveEntry{
		{ID: "0123456789abcdef0123456789abcdef", Public: k, Sign: k, Mask: k, Prior: 7},
		{ID: "a", Public: k},
		{ID: "a-b_C", Public: k, Sign: []byte{}, Mask: k[:5], Prior: -3},
		{ID: "a.b", Public: k[:1]},
		{},
	} {
		b, _ := json.Marshal(e)
		if _, _, _, ok := fastDecodeEntry(b, nil); validActiveID(e.ID) && !ok {
			f.Fatalf("%s: not decoded directly", b)
		}
		f.Add(b)
	}
	for _, s := range []string{`{"id":"a","public":"AA==","sign":null,"mask":null,"prior":01}`,
		`{"id":"a","public":"AB==","sign":null,"mask":null,"prior":1}`, `{"id":"a","public":"AA==","sign":null,"mask":null,"prior":1} `,
		`{"id":"a","public":"AA\u003d=","sign":null,"mask":null,"prior":1}`, `{"id":"a","public":"AA==","sign":null,"mask":null,"prior":-0}`,
		`{"id":"a","public":"AA==","sign":null,"mask":null,"prior":99999999999999999999}`, `{"ID":"a","public":"AA=="}`, "not json"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want ActiveEntry
		err := json.Unmarshal(b, &want)
		if err == nil && !validActiveID(want.ID) {
			err = fmt.Errorf("invalid id %q", want.ID)
		}
		got, gotErr := decodeBatch(rawBatch{seqs: []uint64{1}, data: [][]byte{b}}, "s")
		if (err != nil) != (gotErr != nil) || err == nil && !reflect.DeepEqual(got[0], want) {
			t.Fatalf("%q: decoded %+v, %v; json.Unmarshal %+v, %v", b, got, gotErr, want, err)
		}
	})
}

// BenchmarkFormation1M forms a round's groups from the active index with
// 1,000,000 registered clients: all of them active on the round day (the
// worst case), or 10% (day 20001), ActiveOn then FormGroups (group size 100,
// δ = 2, heuristic on, day 11 of the campaign). Publishing the 1,100,000
// entries comes first and is not timed.
func BenchmarkFormation1M(b *testing.B) {
	ctx := context.Background()
	js := idxNATS(b)
	if err := EnsureActiveIndex(ctx, js, 0); err != nil {
		b.Fatal(err)
	}
	const registered, day = 1_000_000, int32(20000)
	const start = day - 10
	r := mrand.New(mrand.NewPCG(3, 4))
	clients := make([]ActiveEntry, registered)
	for i := range clients {
		clients[i] = ActiveEntry{ID: hex.EncodeToString(idxKey(r)[:16]), Public: idxKey(r), Sign: idxKey(r), Mask: idxKey(r), Prior: r.IntN(int(day - start))}
	}
	t0 := time.Now()
	idxPublish(b, js, "flu", day, clients)
	tenth := make([]ActiveEntry, 0, registered/10)
	for _, i := range r.Perm(registered)[:registered/10] {
		tenth = append(tenth, clients[i])
	}
	idxPublish(b, js, "flu", day+1, tenth)
	b.Logf("published %d entries in %v", registered+len(tenth), time.Since(t0).Round(time.Millisecond))

	for _, c := range []struct {
		day    int32
		active int
	}{{day, registered}, {day + 1, registered / 10}} {
		b.Run(fmt.Sprintf("active=%d", c.active), func(b *testing.B) {
			var read, form time.Duration
			var groups int
			for b.Loop() {
				t0 := time.Now()
				entries, err := ActiveOn(ctx, js, "flu", c.day)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				active, gs := FormGroups("flu", c.day, entries, start, 100, 2, true, 0)
				read, form = read+t1.Sub(t0), form+time.Since(t1)
				if active != c.active || len(gs) == 0 {
					b.Fatalf("active %d (want %d), %d groups", active, c.active, len(gs))
				}
				groups = len(gs)
			}
			n := float64(b.N)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/op")
			b.ReportMetric(float64(c.active)*n/b.Elapsed().Seconds(), "entries/s")
			b.ReportMetric(float64(read.Nanoseconds())/n, "read-ns/op")
			b.ReportMetric(float64(form.Nanoseconds())/n, "form-ns/op")
			b.ReportMetric(float64(groups), "groups")
		})
	}
}
