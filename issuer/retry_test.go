package issuer

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// resign gives q a fresh timestamp and signature under id (what a client
// does to retry) and encodes it.
func resign(t *testing.T, q *token.IssueRequest, id ed25519.PrivateKey) []byte {
	t.Helper()
	q.Timestamp = now()
	if err := q.Sign(id); err != nil {
		t.Fatal(err)
	}
	b, err := q.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stored is the counter of (identity of id, epoch, kind) in s's bucket.
func (e *env) stored(s *Service, id ed25519.PrivateKey, kind token.Kind) counter {
	c, err := s.count(e.ctx, IdentityOf(id.Public().(ed25519.PublicKey)), epoch, kind)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// TestRetryCountedOnce: a request re-signed over the same blinded elements
// (a client whose answer was lost) is answered again with the same
// evaluations and is not counted again — by the same issuer and by a
// restarted one on the same counters bucket; an ARC request sent again
// gets the very same credential response.
func TestRetryCountedOnce(t *testing.T) {
	e := newEnv(t)
	s, stop := e.start(Limits{RandomnessTokens: 4})
	nc := e.conn()
	alice := e.identity(true)
	p, b := e.request(alice, token.KindRandomness, 4, now())
	first := e.ask(nc, b)
	if err := first.Err(); err != nil {
		t.Fatal(err)
	}
	q, err := token.ParseIssueRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	again := e.ask(nc, resign(t, q, alice))
	if err := again.Err(); err != nil {
		t.Fatalf("retry of an issued request: %v", err)
	}
	if !slices.EqualFunc(first.Evaluated, again.Evaluated, bytes.Equal) || again.Used != 4 {
		t.Fatalf("retry answered other evaluations or count %d", again.Used)
	}
	if _, err := p.Finalize(again.Evaluated, again.Proof); err != nil {
		t.Fatalf("retry's answer does not finalize: %v", err)
	}
	if c := e.stored(s, alice, token.KindRandomness); c.used != 4 || s.Issued.Load() != 4 || s.Reissued.Load() != 1 {
		t.Fatalf("counter %d, issued %d, reissued %d; want 4, 4, 1", c.used, s.Issued.Load(), s.Reissued.Load())
	}

	// ARC: one credential per identity and epoch, answered again verbatim
	if err := keydir.EnsureIssuerKeys(e.keys, epoch); err != nil {
		t.Fatal(err)
	}
	_, creq, err := arc.NewCredentialRequest(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := creq.MarshalBinary()
	aq := &token.IssueRequest{Kind: token.KindARC, Epoch: epoch, ARC: rb}
	a1 := e.ask(nc, resign(t, aq, alice))
	a2 := e.ask(nc, resign(t, aq, alice))
	if a1.Err() != nil || a2.Err() != nil || !bytes.Equal(a1.ARC, a2.ARC) {
		t.Fatalf("ARC request and its retry: %v, %v, same response %v", a1.Err(), a2.Err(), bytes.Equal(a1.ARC, a2.ARC))
	}

	// a restarted issuer (fresh process state, same bucket) still knows both
	stop()
	s2, stop2 := e.start(Limits{RandomnessTokens: 4})
	defer stop2()
	after := e.ask(nc, resign(t, q, alice))
	if err := after.Err(); err != nil || !slices.EqualFunc(first.Evaluated, after.Evaluated, bytes.Equal) {
		t.Fatalf("retry after a restart: %v", err)
	}
	a3 := e.ask(nc, resign(t, aq, alice))
	if a3.Err() != nil || !bytes.Equal(a1.ARC, a3.ARC) {
		t.Fatalf("ARC retry after a restart: %v", a3.Err())
	}
	if c := e.stored(s2, alice, token.KindRandomness); c.used != 4 || s2.Issued.Load() != 0 || s2.Reissued.Load() != 2 {
		t.Fatalf("after restart: counter %d, issued %d, reissued %d; want 4, 0, 2", c.used, s2.Issued.Load(), s2.Reissued.Load())
	}
	if c := e.stored(s2, alice, token.KindARC); c.used != 1 {
		t.Fatalf("ARC counter %d, want 1", c.used)
	}
}

// TestRetryRecordsBounded: a counter remembers its last RetryRecords
// requests; a retry of an older one is counted again (the safe side).
func TestRetryRecordsBounded(t *testing.T) {
	e := newEnv(t)
	s, stop := e.start(Limits{RandomnessTokens: 100})
	defer stop()
	nc := e.conn()
	alice := e.identity(true)
	var qs []*token.IssueRequest
	for range RetryRecords + 1 {
		_, b := e.request(alice, token.KindRandomness, 1, now())
		if err := e.ask(nc, b).Err(); err != nil {
			t.Fatal(err)
		}
		q, _ := token.ParseIssueRequest(b)
		qs = append(qs, q)
	}
	if c := e.stored(s, alice, token.KindRandomness); len(c.recent) != RetryRecords || c.used != RetryRecords+1 {
		t.Fatalf("counter %d with %d records, want %d with %d", c.used, len(c.recent), RetryRecords+1, RetryRecords)
	}
	if err := e.ask(nc, resign(t, qs[len(qs)-1], alice)).Err(); err != nil { // remembered
		t.Fatal(err)
	}
	if err := e.ask(nc, resign(t, qs[0], alice)).Err(); err != nil { // forgotten: a new request
		t.Fatal(err)
	}
	if c := e.stored(s, alice, token.KindRandomness); c.used != RetryRecords+2 || s.Reissued.Load() != 1 {
		t.Fatalf("counter %d, reissued %d; want %d, 1", c.used, s.Reissued.Load(), RetryRecords+2)
	}
}

// TestParseCounter: a plain count (the form before retry records) and the
// count with records parse; anything else is ErrCorruptCounter.
func TestParseCounter(t *testing.T) {
	var id [32]byte
	id[0] = 7
	c := counter{used: 3}.charge(2, id)
	got, err := parseCounter(c.encode())
	if err != nil || got.used != 5 || !got.has(id) {
		t.Fatalf("round trip %+v: %v", got, err)
	}
	if got, err := parseCounter([]byte("12")); err != nil || got.used != 12 || len(got.recent) != 0 {
		t.Fatalf("plain count: %+v %v", got, err)
	}
	for _, v := range []string{"", "-1", "x", "3 ", "3 zz", "3  " + fmt.Sprintf("%064x", 1), fmt.Sprintf("3 %062x", 1)} {
		if _, err := parseCounter([]byte(v)); !errors.Is(err, ErrCorruptCounter) {
			t.Errorf("%q: %v, want ErrCorruptCounter", v, err)
		}
	}
}

// TestAttackIssuerRetrySmuggle: an enrolled client whose budget is spent
// sends, as "retries" of its issued batch, requests that differ from it —
// a fresh batch of the same size, the batch with one element swapped, the
// batch with one more element, the batch reordered — and another enrolled
// identity (budget spent) sends the first client's batch under its own
// signature. Only the exact batch is answered again (with the
// evaluations already given); every other request is refused over
// budget, so the distinct evaluated elements the clients hold stay at
// their budgets. The retry record is bound to the request's content
// (ContentID) and lives in the identity's own counter.
func TestAttackIssuerRetrySmuggle(t *testing.T) {
	e := newEnv(t)
	const limit = 4
	_, stop := e.start(Limits{RandomnessTokens: limit})
	defer stop()
	nc := e.conn()
	alice, bob := e.identity(true), e.identity(true)
	held := map[string]map[string]bool{"alice": {}, "bob": {}} // distinct evaluated elements per client
	answered := 0
	send := func(who string, id ed25519.PrivateKey, q *token.IssueRequest) {
		r := e.ask(nc, resign(t, q, id))
		if r.Err() != nil {
			if !errors.Is(r.Err(), token.ErrBudget) {
				t.Fatalf("%s: refused %v, want over budget", who, r.Err())
			}
			return
		}
		answered++
		for _, ev := range r.Evaluated {
			held[who][string(ev)] = true
		}
	}
	fresh := func(n int) [][]byte {
		_, b := e.request(alice, token.KindRandomness, n, now())
		q, _ := token.ParseIssueRequest(b)
		return q.Blinded
	}
	batch := &token.IssueRequest{Kind: token.KindRandomness, Epoch: epoch, Blinded: fresh(limit)}
	send("alice", alice, batch)
	send("bob", bob, &token.IssueRequest{Kind: token.KindRandomness, Epoch: epoch, Blinded: fresh(limit)})
	answered = 0
	swapped := append(slices.Clone(batch.Blinded[:limit-1]), fresh(1)...)
	longer := append(slices.Clone(batch.Blinded), fresh(1)...)
	reordered := slices.Clone(batch.Blinded)
	slices.Reverse(reordered)
	attempts := []struct {
		who     string
		id      ed25519.PrivateKey
		blinded [][]byte
	}{
		{"alice", alice, batch.Blinded}, // the honest retry
		{"alice", alice, fresh(limit)},
		{"alice", alice, swapped},
		{"alice", alice, longer},
		{"alice", alice, reordered},
		{"bob", bob, batch.Blinded},
	}
	for _, a := range attempts {
		send(a.who, a.id, &token.IssueRequest{Kind: token.KindRandomness, Epoch: epoch, Blinded: a.blinded})
	}
	extra := len(held["alice"]) - limit + len(held["bob"]) - limit
	fmt.Printf("ATTACK issuer-retry-smuggle: %d requests passed off as retries of a spent budget (%d per identity): %d answered (the honest retry answers 1), alice holds %d distinct evaluations, bob %d; %d beyond the budgets\n",
		len(attempts), limit, answered, len(held["alice"]), len(held["bob"]), extra)
	if extra != 0 || answered != 1 {
		t.Fatalf("%d evaluations beyond the budgets, %d requests answered (want 0 and 1: only the honest retry)", extra, answered)
	}
}
