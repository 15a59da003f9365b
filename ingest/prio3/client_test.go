package prio3

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

type world struct {
	a, b, leader, helper *onion.KeyPair
	tr                   *Transport
	sent                 [][]byte
	fail                 error
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{}
	for i, k := range []**onion.KeyPair{&w.a, &w.b, &w.leader, &w.helper} {
		var err error
		if *k, err = onion.GenerateKeyPair(byte(i + 1)); err != nil {
			t.Fatal(err)
		}
	}
	w.tr = &Transport{Route: ingest.Route{RelayA: w.a.PublicKey(), RelayB: w.b.PublicKey(), SubjectB: "relay.b"},
		Leader: w.leader.PublicKey(), Helper: w.helper.PublicKey(),
		Publish: func(_ context.Context, o []byte) error {
			if w.fail != nil {
				return w.fail
			}
			w.sent = append(w.sent, o)
			return nil
		}}
	return w
}

// open peels what relay a and relay b would and prepares the upload at both
// aggregators, returning the decoded sum of the two output shares.
func (w *world) open(t *testing.T, v *p3.VDAF, o []byte, campaign string, d keywords.Day) []int64 {
	t.Helper()
	if !onion.IsSizeClass(len(o)) {
		t.Fatalf("onion of %d bytes is not a size class", len(o))
	}
	hop, inner, err := onion.Peel([]*onion.KeyPair{w.a}, o)
	if err != nil || hop.Kind != onion.HopRelay || hop.Subject != "relay.b" {
		t.Fatalf("relay a: %+v %v", hop, err)
	}
	hop, upload, err := onion.Peel([]*onion.KeyPair{w.b}, inner)
	if err != nil || hop.Kind != onion.HopKafkaPrio3 || string(hop.Key) != campaign {
		t.Fatalf("relay b: %+v %v", hop, err)
	}
	r, err := p3.OpenReport([]*onion.KeyPair{w.leader}, upload)
	if err != nil {
		t.Fatal(err)
	}
	if r.Campaign != campaign || r.Day != p3.Day(d) {
		t.Fatalf("report of %q %s, want %q %s", r.Campaign, r.Day, campaign, d)
	}
	hs, err := p3.OpenHelperShare(w.helper, r.Campaign, r.Day, r.ID, r.PublicShare, r.SealedHelper)
	if err != nil {
		t.Fatal(err)
	}
	var vk [32]byte
	vk[0] = 7
	lp, err := v.PrepInit(vk, r.ID, 0, r.PublicShare, r.LeaderShare)
	if err != nil {
		t.Fatal(err)
	}
	msg, ho, err := v.PrepHelper(vk, r.ID, r.PublicShare, hs, lp.Share)
	if err != nil {
		t.Fatal(err)
	}
	lo, err := v.PrepNext(lp.State, msg)
	if err != nil {
		t.Fatal(err)
	}
	a := v.NewAggregate()
	v.Update(&a, lo)
	v.Update(&a, ho)
	sum, err := p3.DecodeVec(p3.EncodeAggregate(&a), v.Config.Length)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p3.Signed(sum)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func list(t *testing.T, n int) *keywords.List {
	t.Helper()
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.Repeat("k", i+1) + "\n")
	}
	l, err := keywords.Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestUploadClippedCounts: the onion goes relay a → relay b → Kafka
// "prio3-uploads" keyed by the campaign, the upload opens at the leader's
// key only, and the two prepared output shares sum to the day's counts
// clipped to 15 (b = 4), computed here; the clipped entries are counted; a
// second upload for the day is refused; a failed publish is retried by the
// next upload of the day.
func TestUploadClippedCounts(t *testing.T) {
	w := newWorld(t)
	l := list(t, 40)
	cfg := p3.Config{Kind: p3.KindSumVec, Length: l.Len(), Bits: 4}
	v, err := p3.New("camp", cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := keywords.Day(13210)
	counts := keywords.Sparse{0: 3, 5: 15, 6: 16, 39: 200}
	c := &Client{Campaign: "camp", List: l, Config: cfg, Counts: map[keywords.Day]keywords.Sparse{d: counts}}
	w.fail = errors.New("relay a unreachable")
	if _, err := c.Upload(context.Background(), w.tr, v, d); !errors.Is(err, w.fail) {
		t.Fatalf("upload with a failing publisher: %v", err)
	}
	w.fail = nil
	s, err := c.Upload(context.Background(), w.tr, v, d)
	if err != nil {
		t.Fatal(err)
	}
	if s.Clipped != 2 || s.Bytes != len(w.sent[0]) || len(w.sent) != 1 {
		t.Fatalf("sent %+v, %d onions", s, len(w.sent))
	}
	got := w.open(t, v, w.sent[0], "camp", d)
	for i := range l.Len() {
		if want := int64(min(counts[i], 15)); got[i] != want {
			t.Fatalf("keyword %d: %d, want %d", i, got[i], want)
		}
	}
	if _, err := c.Upload(context.Background(), w.tr, v, d); !errors.Is(err, ErrAlreadySent) {
		t.Fatalf("second upload of the day: %v", err)
	}
	// a day without counts is a report of zeros
	if _, err := c.Upload(context.Background(), w.tr, v, d+1); err != nil {
		t.Fatal(err)
	}
	if got := w.open(t, v, w.sent[1], "camp", d+1); slices.ContainsFunc(got, func(x int64) bool { return x != 0 }) {
		t.Fatalf("empty day: %v", got)
	}
	// a list of another length is refused before anything is sent
	v2, err := p3.New("camp", p3.Config{Kind: p3.KindSumVec, Length: 39, Bits: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(context.Background(), w.tr, v2, d+2); err == nil || len(w.sent) != 2 {
		t.Fatalf("length mismatch: %v, %d sent", err, len(w.sent))
	}
}

// TestUploadPresence: a presence campaign with max weight 3 keeps the three
// keywords with the highest counts (ties: the earlier keyword) and counts
// the others as clipped, with the counts above 1.
func TestUploadPresence(t *testing.T) {
	w := newWorld(t)
	l := list(t, 20)
	cfg := p3.Config{Kind: p3.KindPresence, Length: l.Len(), MaxWeight: 3}
	v, err := p3.New("camp", cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := keywords.Day(13211)
	c := &Client{Campaign: "camp", List: l, Config: cfg,
		Counts: map[keywords.Day]keywords.Sparse{d: {1: 1, 2: 5, 4: 1, 7: 2, 9: 1}}}
	s, err := c.Upload(context.Background(), w.tr, v, d)
	if err != nil {
		t.Fatal(err)
	}
	// kept: 2 (5), 7 (2), 1 (1, earliest of the ones); left out 4 and 9;
	// clipped among the kept: 2 and 7
	if s.Clipped != 4 {
		t.Fatalf("clipped %d, want 4", s.Clipped)
	}
	got := w.open(t, v, w.sent[0], "camp", d)
	want := make([]int64, l.Len())
	want[1], want[2], want[7] = 1, 1, 1
	if !slices.Equal(got, want) {
		t.Fatalf("presence %v, want %v", got, want)
	}
}

// TestUploadRestart: with StatePath set, a day whose publish failed is
// published again after a restart (Open) as the byte-identical onion — the
// same report id, which the aggregators count once — never as a second
// report; a day sent before the restart is refused after it. The state
// file is mode 0600 and belongs to one campaign.
func TestUploadRestart(t *testing.T) {
	w := newWorld(t)
	l := list(t, 30)
	cfg := p3.Config{Kind: p3.KindSumVec, Length: l.Len(), Bits: 4}
	v, err := p3.New("camp", cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := keywords.Day(13212)
	counts := map[keywords.Day]keywords.Sparse{d: {3: 2}, d + 1: {4: 1}}
	path := filepath.Join(t.TempDir(), "client.json")
	c := &Client{Campaign: "camp", List: l, Config: cfg, Counts: counts, StatePath: path}
	var failed []byte
	ok := w.tr.Publish
	w.tr.Publish = func(_ context.Context, o []byte) error { failed = o; return errors.New("connection lost") }
	if _, err := c.Upload(context.Background(), w.tr, v, d); err == nil {
		t.Fatal("upload with a failing publisher succeeded")
	}
	w.tr.Publish = ok
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v", fi, err)
	}
	c2, err := Open(path, "camp")
	if err != nil {
		t.Fatal(err)
	}
	c2.List, c2.Config, c2.Counts = l, cfg, counts
	s, err := c2.Upload(context.Background(), w.tr, v, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.sent) != 1 || !bytes.Equal(w.sent[0], failed) || s.Bytes != len(failed) {
		t.Fatalf("after the restart %d onions sent, identical to the failed one: %v", len(w.sent), len(w.sent) == 1 && bytes.Equal(w.sent[0], failed))
	}
	if got := w.open(t, v, w.sent[0], "camp", d); got[3] != 2 {
		t.Fatalf("keyword 3: %d", got[3])
	}
	if _, err := c2.Upload(context.Background(), w.tr, v, d+1); err != nil {
		t.Fatal(err)
	}
	c3, err := Open(path, "camp")
	if err != nil {
		t.Fatal(err)
	}
	c3.List, c3.Config, c3.Counts = l, cfg, counts
	for _, day := range []keywords.Day{d, d + 1} {
		if _, err := c3.Upload(context.Background(), w.tr, v, day); !errors.Is(err, ErrAlreadySent) {
			t.Fatalf("%s after a restart: %v", day, err)
		}
	}
	if len(w.sent) != 2 {
		t.Fatalf("%d onions sent, want 2", len(w.sent))
	}
	if _, err := Open(path, "other"); err == nil {
		t.Fatal("state of another campaign opened")
	}
}
