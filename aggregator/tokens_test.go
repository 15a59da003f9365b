package aggregator

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/protocol/token/tokentest"
)

// mint issues tokens for the given nonces under key as the issuer would
// (blind, Issue with one batch proof, Finalize).
func mint(t testing.TB, key *token.PrivateKey, nonces ...[32]byte) []*token.Token {
	t.Helper()
	return tokentest.Mint(t, key, nonces...)
}

// payWith attaches a report token of key bound to r (nonce = SHA-256 of
// the label and r's encoding without trailer, computed here by hand).
func payWith(t testing.TB, key *token.PrivateKey, r *star.Report) {
	t.Helper()
	plain, err := r.MarshalBinary() // no trailer yet: the bytes the nonce binds
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Token) != 0 || len(r.Presentation) != 0 {
		t.Fatal("payWith: report already has a trailer")
	}
	nonce := token.ReportNonce(plain)
	if r.Token, err = mint(t, key, nonce)[0].MarshalBinary(); err != nil {
		t.Fatal(err)
	}
}

func keysOf(key *token.PrivateKey) func(string) (*token.PrivateKey, error) {
	return func(epoch string) (*token.PrivateKey, error) {
		if epoch == key.Epoch() {
			return key, nil
		}
		return nil, fmt.Errorf("no report-token key for epoch %s", epoch)
	}
}

// TestReportTokens: with ReportKeys set, a report with a valid token
// bound to it is accepted and the artifact opens at k users exactly as
// without tokens; a report without token, with garbage, with a token of
// another report (nonce mismatch), of the randomness kind, of another
// epoch's key, or with an altered authenticator is dropped; a replayed
// report is dropped as "spent-token", also by a partition rebuilt by
// replaying the same messages, which reaches the same outputs and counts.
func TestReportTokens(t *testing.T) {
	onionKey, _ := onion.GenerateKeyPair(1)
	reportKey, _ := token.GenerateKey(token.KindReport, "e1")
	randKey, _ := token.GenerateKey(token.KindRandomness, "e1")
	otherEpoch, _ := token.GenerateKey(token.KindReport, "e2")
	const k = 3
	s := sealing(t, "weather", star.FTu, k)
	var msgs []Message
	add := func(r *star.Report) { msgs = append(msgs, Message{Value: wrap(t, onionKey, r)}) }
	seal := func() *star.Report {
		u, _ := star.NewUserSecret()
		r, err := s.Seal(&u, "weather", "Weather")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	wantDrops := map[string]int64{}

	// k honest users, one valid token each; the first report is replayed twice
	var honest []*star.Report
	for range k {
		r := seal()
		payWith(t, reportKey, r)
		honest = append(honest, r)
		add(r)
	}
	add(honest[0])
	add(honest[0])
	wantDrops["spent-token"] = 2

	// no token
	add(seal())
	wantDrops["no-token"]++
	// garbage token bytes
	r := seal()
	r.Token = []byte{0xC1, 0xD0, 1, 2, 3}
	add(r)
	wantDrops["bad-token"]++
	// a valid token of another report (nonce mismatch)
	r = seal()
	r.Token = honest[1].Token
	add(r)
	wantDrops["bad-token"]++
	// a valid, unspent token bound to another report
	other := seal()
	payWith(t, reportKey, other)
	r = seal()
	r.Token = other.Token
	add(r)
	wantDrops["bad-token"]++
	// a token bound to this report but of the randomness kind, of another
	// epoch's report key, and with one authenticator bit flipped
	for _, key := range []*token.PrivateKey{randKey, otherEpoch} {
		r = seal()
		payWith(t, key, r)
		add(r)
		wantDrops["bad-token"]++
	}
	r = seal()
	payWith(t, reportKey, r)
	r.Token[len(r.Token)-1] ^= 1
	add(r)
	wantDrops["bad-token"]++

	run := func() (*Partition, []protocol.Decrypted) {
		p := NewPartition(0, 1, []*onion.KeyPair{onionKey})
		p.ReportKeys = keysOf(reportKey)
		var out []protocol.Decrypted
		for _, m := range msgs {
			out = append(out, p.Apply(m)...)
		}
		return p, out
	}
	p, out := run()
	var ids []string
	for _, d := range out {
		if d.Item != "weather" {
			t.Fatalf("released %q", d.Item)
		}
		ids = append(ids, d.Report)
	}
	var wantIDs []string
	for _, r := range honest {
		wantIDs = append(wantIDs, fmt.Sprintf("%x", r.ID))
	}
	sort.Strings(ids)
	sort.Strings(wantIDs)
	if !reflect.DeepEqual(ids, wantIDs) {
		t.Fatalf("decrypted reports %v, want the %d honest ones %v", ids, k, wantIDs)
	}
	if !reflect.DeepEqual(p.Stats.Dropped, wantDrops) || p.Stats.Reports != k {
		t.Fatalf("dropped %v, reports %d; want %v, %d", p.Stats.Dropped, p.Stats.Reports, wantDrops, k)
	}

	// restart by replay: same outputs, same counts; a replay after it is still spent
	p2, out2 := run()
	if !reflect.DeepEqual(out, out2) || !reflect.DeepEqual(p.Stats, p2.Stats) {
		t.Fatalf("rebuilt partition differs: %v vs %v", p2.Stats, p.Stats)
	}
	if got := p2.Apply(Message{Value: wrap(t, onionKey, honest[2])}); len(got) != 0 || p2.Stats.Dropped["spent-token"] != 3 {
		t.Fatalf("replay after rebuild: %d items, dropped %v", len(got), p2.Stats.Dropped)
	}

	// without ReportKeys (tokens off) the same messages: the no-token and
	// bad-token reports count as reports, the replays as duplicates
	off := NewPartition(0, 1, []*onion.KeyPair{onionKey})
	for _, m := range msgs {
		off.Apply(m)
	}
	if off.Stats.Dropped["duplicate"] != 2 || off.Stats.Reports != int64(len(msgs)-2) {
		t.Fatalf("tokens off: %v, %d reports", off.Stats.Dropped, off.Stats.Reports)
	}

	// an epoch without a report-token key
	s2, _ := star.DeriveSealing(make([]byte, 64), "query", "e2", star.FTu, k)
	u, _ := star.NewUserSecret()
	r2, _ := s2.Seal(&u, "x", "x")
	payWith(t, otherEpoch, r2)
	p.Apply(Message{Value: wrap(t, onionKey, r2)})
	if p.Stats.Dropped["token-key"] != 1 {
		t.Fatalf("epoch without key: %v", p.Stats.Dropped)
	}
}
