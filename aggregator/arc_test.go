package aggregator

import (
	"crypto/rand"
	"fmt"
	"reflect"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// credential runs ARC issuance for one identity under sk.
func credential(t testing.TB, sk *arc.PrivateKey) *arc.Credential {
	t.Helper()
	sec, req, err := arc.NewCredentialRequest(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sk.Issue(rand.Reader, req)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sec.Finalize(sk.Public(), req, resp)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// present returns cred's presentation for s's artifact (limit 1), encoded,
// and its tag.
func present(t testing.TB, cred *arc.Credential, s *star.Sealing) ([]byte, []byte) {
	t.Helper()
	p, err := cred.Present(rand.Reader, s.ARCContext(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b, p.Tag()
}

// TestARCPresentations: with ARCKeys set (and report tokens), an FT_u
// artifact opens at k distinct credentials; one credential posing as many
// users (its presentation on shares of self-chosen secrets) is dropped
// "bad-presentation" and adds nothing; so are a missing presentation, one
// for another artifact, and one under another ARC key. Repeated
// impressions of one credential are verified once per (group, x), and a
// repeat whose presentation tag is not the verified one is verified again
// and dropped. Restart by replay gives the same outputs and counts.
func TestARCPresentations(t *testing.T) {
	onionKey, _ := onion.GenerateKeyPair(1)
	reportKey, _ := token.GenerateKey(token.KindReport, "e1")
	arcKey, _ := arc.GenerateKey(rand.Reader)
	otherARC, _ := arc.GenerateKey(rand.Reader)
	const k = 3
	s := sealing(t, "weather", star.FTu, k)
	other := sealing(t, "sunshine", star.FTu, k)
	var msgs []Message
	add := func(r *star.Report, pres []byte) {
		r.Presentation = nil
		r.Token = nil
		payWith(t, reportKey, r)
		r.Presentation = pres
		msgs = append(msgs, Message{Value: wrap(t, onionKey, r)})
	}
	wantDrops := map[string]int64{}

	// a Sybil: one credential, k−1 … 10 self-chosen secrets, each report
	// carrying the credential's valid presentation for the artifact
	sybil := credential(t, arcKey)
	sybilPres, _ := present(t, sybil, &s)
	for range 10 {
		u, _ := star.NewUserSecret()
		r, _ := s.Seal(&u, "weather", "weather")
		add(r, sybilPres)
		wantDrops["bad-presentation"]++
	}
	// no presentation; one for another artifact; one under another ARC key
	u, _ := star.NewUserSecret()
	r, _ := s.Seal(&u, "weather", "weather")
	add(r, nil)
	wantDrops["bad-presentation"]++
	otherPres, otherTag := present(t, credential(t, arcKey), &other)
	r, _ = s.SealARC(otherTag, "weather", "weather")
	add(r, otherPres)
	wantDrops["bad-presentation"]++
	foreignPres, foreignTag := present(t, credential(t, otherARC), &s)
	r, _ = s.SealARC(foreignTag, "weather", "weather")
	add(r, foreignPres)
	wantDrops["bad-presentation"]++

	// k honest credentials, three impressions each (fresh presentations:
	// same tag, another proof); a fourth impression of the first whose
	// tag bytes are altered is verified again and dropped
	var wantItems int
	var firstTag []byte
	for i := range k {
		cred := credential(t, arcKey)
		for range 3 {
			pres, tag := present(t, cred, &s)
			if i == 0 {
				firstTag = tag
			}
			r, err := s.SealARC(tag, "weather", "weather")
			if err != nil {
				t.Fatal(err)
			}
			add(r, pres)
			wantItems++
		}
	}
	pres, _ := present(t, credential(t, arcKey), &s)
	bad := append([]byte(nil), pres...)
	bad[3*arc.ElementSize+5] ^= 1 // inside the tag
	r, _ = s.SealARC(firstTag, "weather", "weather")
	add(r, bad)
	wantDrops["bad-presentation"]++

	run := func() (*Partition, []protocol.Decrypted) {
		p := NewPartition(0, 1, []*onion.KeyPair{onionKey})
		p.ReportKeys = keysOf(reportKey)
		p.ARCKeys = func(epoch string) (*arc.PrivateKey, error) {
			if epoch != "e1" {
				return nil, fmt.Errorf("no ARC key for epoch %s", epoch)
			}
			return arcKey, nil
		}
		var out []protocol.Decrypted
		for _, m := range msgs {
			out = append(out, p.Apply(m)...)
		}
		return p, out
	}
	p, out := run()
	if len(out) != wantItems || p.Stats.Recoveries != 1 {
		t.Fatalf("%d items, %d recoveries; want %d items of %d credentials × 3 impressions, 1 recovery", len(out), p.Stats.Recoveries, wantItems, k)
	}
	units := map[string]bool{}
	for _, d := range out {
		units[d.Unit] = true
	}
	if len(units) != k {
		t.Fatalf("%d distinct unit ids, want %d (one per credential)", len(units), k)
	}
	if !reflect.DeepEqual(p.Stats.Dropped, wantDrops) {
		t.Fatalf("dropped %v, want %v", p.Stats.Dropped, wantDrops)
	}
	// verified successfully: each honest credential once, though each sent
	// three presentations (the per-(group, x) cache)
	if p.arcVerified != k {
		t.Fatalf("%d presentations verified successfully, want %d (one per credential, not per impression)", p.arcVerified, k)
	}
	p2, out2 := run()
	if !reflect.DeepEqual(out, out2) || !reflect.DeepEqual(p.Stats, p2.Stats) {
		t.Fatalf("rebuilt partition differs: %v vs %v", p2.Stats, p.Stats)
	}

	// control: without ARCKeys the Sybil's ten secrets are ten users and
	// open the artifact on their own
	off := NewPartition(0, 1, []*onion.KeyPair{onionKey})
	off.ReportKeys = keysOf(reportKey)
	opened := 0
	for _, m := range msgs[:10] {
		opened += len(off.Apply(m))
	}
	if opened == 0 {
		t.Fatal("control: without ARC the Sybil's reports did not open the artifact")
	}
}

// TestTokenFailureCostsNoARCCheck: checks run in order of cost. FT_u
// reports that carry a valid ARC presentation but no report token, a
// garbage token or a token bound to another report are dropped for their
// token and cost no ARC verification (before this ordering each cost one,
// ~10 × a token check, with no enrolled identity behind it); reports with
// valid tokens are verified (once per credential) and open the artifact.
func TestTokenFailureCostsNoARCCheck(t *testing.T) {
	onionKey, _ := onion.GenerateKeyPair(1)
	reportKey, _ := token.GenerateKey(token.KindReport, "e1")
	arcKey, _ := arc.GenerateKey(rand.Reader)
	const k, junk = 3, 30
	s := sealing(t, "weather", star.FTu, k)
	var msgs []Message
	wrapped := func(r *star.Report) { msgs = append(msgs, Message{Value: wrap(t, onionKey, r)}) }
	cred := credential(t, arcKey)
	pres, tag := present(t, cred, &s)
	for i := range junk {
		r, err := s.SealARC(tag, "weather", "weather")
		if err != nil {
			t.Fatal(err)
		}
		switch i % 3 {
		case 0: // no token
		case 1: // garbage
			r.Token = make([]byte, 90)
			rand.Read(r.Token)
		case 2: // a valid token of another report
			o, _ := s.SealARC(tag, "weather", "weather")
			payWith(t, reportKey, o)
			r.Token = o.Token
		}
		r.Presentation = pres
		wrapped(r)
	}
	for range k {
		c := credential(t, arcKey)
		p, tg := present(t, c, &s)
		r, _ := s.SealARC(tg, "weather", "weather")
		payWith(t, reportKey, r)
		r.Presentation = p
		wrapped(r)
	}
	p := NewPartition(0, 1, []*onion.KeyPair{onionKey})
	p.ReportKeys = keysOf(reportKey)
	p.ARCKeys = func(string) (*arc.PrivateKey, error) { return arcKey, nil }
	var items int
	for _, m := range msgs {
		items += len(p.Apply(m))
	}
	dropped := p.Stats.Dropped["no-token"] + p.Stats.Dropped["bad-token"]
	if dropped != junk || items != k {
		t.Fatalf("dropped %v, %d items; want %d token drops and %d items", p.Stats.Dropped, items, junk, k)
	}
	if n := p.arcChecks.Load(); n != k {
		t.Fatalf("%d ARC verifications for %d reports with failed tokens and %d honest ones; want %d (the honest ones only)", n, junk, k, k)
	}
}

// TestThresholdKeysKept: the epoch's report-token and ARC keys are loaded
// at its first report and kept for the partition's life, so a group that
// reaches k after the key source stopped answering (a key file rotated
// away, a store unreachable) is still verified under the keys its reports
// arrived with and opens, each report verified once, at the threshold
// (an epoch with no key is refused at arrival: TestPrepareEquivalent).
func TestThresholdKeysKept(t *testing.T) {
	onionKey, _ := onion.GenerateKeyPair(1)
	reportKey, _ := token.GenerateKey(token.KindReport, "e1")
	arcKey, _ := arc.GenerateKey(rand.Reader)
	const k = 3
	s := sealing(t, "weather", star.FTu, k)
	p := NewPartition(0, 1, []*onion.KeyPair{onionKey})
	var gone bool
	p.ReportKeys = func(e string) (*token.PrivateKey, error) {
		if gone || e != "e1" {
			return nil, fmt.Errorf("no report-token key for %s", e)
		}
		return reportKey, nil
	}
	p.ARCKeys = func(e string) (*arc.PrivateKey, error) {
		if gone || e != "e1" {
			return nil, fmt.Errorf("no ARC key for %s", e)
		}
		return arcKey, nil
	}
	var items int
	for i := range k {
		c := credential(t, arcKey)
		pr, tg := present(t, c, &s)
		r, _ := s.SealARC(tg, "weather", "weather")
		payWith(t, reportKey, r)
		r.Presentation = pr
		items += len(p.Apply(Message{Value: wrap(t, onionKey, r)}))
		gone = true // after the first report the key source fails
		if i < k-1 && p.arcChecks.Load()+p.tokenChecks.Load() != 0 {
			t.Fatalf("report %d was verified before its group reached k", i)
		}
	}
	if items != k || len(p.Stats.Dropped) != 0 {
		t.Fatalf("%d items, dropped %v; want %d and none", items, p.Stats.Dropped, k)
	}
	if p.arcChecks.Load() != k || p.tokenChecks.Load() != k {
		t.Fatalf("%d ARC and %d token verifications at the threshold, want %d each", p.arcChecks.Load(), p.tokenChecks.Load(), k)
	}
}
