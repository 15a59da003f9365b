package vectors

import (
	"crypto/ed25519"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

// signedFor is body signed with key for (topic, partition, campaign),
// issued at issued.
func signedFor(t testing.TB, key ed25519.PrivateKey, body []byte, topic string, partition int, campaign string, issued time.Time) []byte {
	t.Helper()
	b, err := protocol.SignVectorsControl(key, body, protocol.VectorsTarget{Topic: topic, Partition: partition, Campaign: campaign}, issued, protocol.ControlValidity)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestApplyControlVerdicts: under ControlKey a control record is applied
// only when signed by it for this topic, partition and a served campaign,
// with a body of the same campaign, read inside its validity and not older
// than a newer record already accepted; every other one is dropped with
// its reason and changes nothing.
func TestApplyControlVerdicts(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	g := newTestGroup(t, rand.New(rand.NewPCG(7, 7)), 4, 8, 100) // campaign "c"
	roster := enc(t, &g.roster)
	now := time.Unix(1767225600, 0)
	for _, tc := range []struct {
		name   string
		rec    []byte
		at     time.Time
		reason string
	}{
		{"unsigned roster", roster, now, DropUnsignedControl},
		{"foreign key", signedFor(t, other, roster, protocol.VectorsTopic, 1, "c", now), now, DropBadControlSignature},
		{"another partition", signedFor(t, key, roster, protocol.VectorsTopic, 0, "c", now), now, DropReplayedControl},
		{"another topic", signedFor(t, key, roster, protocol.ReportsTopic, 1, "c", now), now, DropReplayedControl},
		{"campaign not served", signedFor(t, key, roster, protocol.VectorsTopic, 1, "other", now), now, DropReplayedControl},
		{"no timestamp", signedFor(t, key, roster, protocol.VectorsTopic, 1, "c", now), time.Time{}, DropReplayedControl},
		{"expired", signedFor(t, key, roster, protocol.VectorsTopic, 1, "c", now), now.Add(2 * time.Hour), DropReplayedControl},
		{"before its issue", signedFor(t, key, roster, protocol.VectorsTopic, 1, "c", now), now.Add(-time.Hour), DropReplayedControl},
		{"truncated", signedFor(t, key, roster, protocol.VectorsTopic, 1, "c", now)[:40], now, DropMalformedControl},
	} {
		p := NewPartition()
		p.ControlKey, p.ID, p.Campaigns = pub, 1, map[string]bool{"c": true}
		p.ApplyControl(tc.rec, tc.at)
		if p.Stats.Dropped[tc.reason] != 1 || p.Open() != 0 {
			t.Errorf("%s: drops %v, open groups %d; want one %s and no group", tc.name, p.Stats.Dropped, p.Open(), tc.reason)
		}
	}
	// a roster whose body names another campaign than the record
	p := NewPartition()
	p.ControlKey, p.ID = pub, 1
	p.ApplyControl(signedFor(t, key, roster, protocol.VectorsTopic, 1, "d", now), now)
	if p.Stats.Dropped[DropReplayedControl] != 1 || p.Open() != 0 {
		t.Errorf("campaign of the body: drops %v", p.Stats.Dropped)
	}
	// accepted, then a record that expired before the newest issue time
	p.ApplyControl(signedFor(t, key, roster, protocol.VectorsTopic, 1, "c", now), now)
	if p.Open() != 1 {
		t.Fatalf("signed roster not applied: %v", p.Stats.Dropped)
	}
	later := now.Add(3 * time.Hour)
	p.ApplyControl(signedFor(t, key, enc(t, &blind.Tick{Day: 101}), protocol.VectorsTopic, 1, "c", later), later)
	old := signedFor(t, key, enc(t, &blind.Tick{Day: 200}), protocol.VectorsTopic, 1, "c", now)
	p.ApplyControl(old, now.Add(30*time.Minute)) // back-dated timestamp inside its own validity
	if p.Stats.Dropped[DropReplayedControl] != 2 || p.day != 101 || p.Open() != 1 {
		t.Errorf("replay of an older record: drops %v, day %d, open %d", p.Stats.Dropped, p.day, p.Open())
	}
	// without a key: signed records are unwrapped, bare ones applied
	q := NewPartition()
	q.ApplyControl(roster, time.Time{})
	q.ApplyControl(signedFor(t, other, enc(t, &blind.Tick{Day: 101}), protocol.VectorsTopic, 5, "x", now), time.Time{})
	if q.Open() != 1 || q.day != 101 {
		t.Errorf("without a key: open %d, day %d, drops %v", q.Open(), q.day, q.Stats.Dropped)
	}
}

// FuzzApplyControl: no control record, signed or not, panics the
// partition; under ControlKey one not signed by it is never applied.
func FuzzApplyControl(f *testing.F) {
	pub, key, _ := ed25519.GenerateKey(nil)
	g := newTestGroup(f, rand.New(rand.NewPCG(6, 6)), 3, 4, 1)
	now := time.Unix(1767225600, 0)
	f.Add(signedFor(f, key, enc(f, &g.roster), protocol.VectorsTopic, 0, "c", now))
	f.Add(signedFor(f, key, enc(f, &blind.Tick{Day: 9}), protocol.VectorsTopic, 0, "c", now))
	f.Add(signedFor(f, key, g.deal(f, 1), protocol.VectorsTopic, 0, "c", now))
	f.Add(enc(f, &g.roster))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := NewPartition()
		p.ApplyControl(b, now)
		signed := NewPartition()
		signed.ControlKey = pub
		signed.ApplyControl(b, now)
		if c, err := protocol.ParseVectorsControl(b); (err != nil || c.Verify(pub) != nil) && (signed.Open() != 0 || signed.day != 0) {
			t.Fatalf("a record not signed by the key was applied: %x", b)
		}
	})
}

// TestReplayedCommitments: a dealer's earlier commitments replayed after
// its redeal (inside their validity) are refused; the redeal stays.
func TestReplayedCommitments(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	g := newTestGroup(t, rand.New(rand.NewPCG(8, 8)), 4, 8, 100)
	p := NewPartition()
	p.ControlKey, p.ID = pub, 0
	now := time.Unix(1767225600, 0)
	rec := func(body []byte, issued time.Time) []byte {
		return signedFor(t, key, body, protocol.VectorsTopic, 0, "c", issued)
	}
	p.ApplyControl(rec(enc(t, &g.roster), now), now)
	first := rec(g.deal(t, 0), now.Add(time.Minute))
	p.ApplyControl(first, now.Add(time.Minute))
	redeal := g.deal(t, 0)
	p.ApplyControl(rec(redeal, now.Add(2*time.Minute)), now.Add(2*time.Minute))
	p.ApplyControl(first, now.Add(3*time.Minute))
	m, _ := blind.Parse(redeal)
	stored := p.groups[g.in].commits[0]
	if p.Stats.Dropped[DropReplayedControl] != 1 || stored == nil || stored.Roots[1] != m.Commit.Roots[1] {
		t.Fatalf("drops %v; the redeal's commitments must stay", p.Stats.Dropped)
	}
}
