package prio3

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// helperInjection is what one run of the injection attack did to a real
// HelperService on an embedded NATS server.
type helperInjection struct {
	reports, requests int
	added             uint64            // reports the helper committed to a batch
	refused           map[string]uint64 // requests refused before any state change
	malformed         uint64
}

// injectIntoHelper starts a helper and, as an operator other than the
// leader, delivers to protocol.Prio3HelperSubject well-formed aggregate
// requests for n fresh reports, prepared by a leader state machine of the
// attacker's (the strongest such attacker: it holds the campaign's verify
// key, so the proof check passes — what it lacks is the leader's signing
// key). Each request goes out four ways: bare with a reply subject that is
// not an inbox (what a push consumer's deliver subject delivers: nats-server
// checks no permission on it), bare as an inbox request, and both ways
// signed by a key that is not the leader's. It returns what the helper
// committed and refused.
func injectIntoHelper(t *testing.T, n int) helperInjection {
	e := newSvcEnv(t, p3.Config{Kind: p3.KindSumVec, Length: 50, Bits: 4}, 5, 48*time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 2, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	h, hr := e.startHelper()
	defer hr.stop(t, "helper")

	rng := rand.New(rand.NewPCG(7, 45))
	counts, _ := clients(rng, n, 50, 15)
	uploads := e.w.shardAll(t, day, counts)
	attacker, err := NewLeader(e.w.cfgL)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range uploads {
		if _, err := attacker.Apply(Event{Now: e.now(), Kind: EventUpload, Msg: u}); err != nil {
			t.Fatal(err)
		}
	}
	outs, err := attacker.Apply(Event{Now: e.now(), Kind: EventTick})
	if err != nil || len(outs) == 0 {
		t.Fatalf("attacker's requests: %d, %v", len(outs), err)
	}
	_, foreign, _ := ed25519.GenerateKey(nil)
	nc := e.conn()
	sent := 0
	for _, o := range outs {
		signed, err := p3.SignReq(foreign, o.Msg, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range [][]byte{o.Msg, signed} {
			// a push consumer delivers with the server's ack subject as
			// reply ($JS.ACK…, which a client may not name itself); any
			// subject that is not a requester inbox stands for it
			if err := nc.PublishMsg(&nats.Msg{Subject: protocol.Prio3HelperSubject, Reply: "crowdlog.attacker.deliver", Data: body}); err != nil {
				t.Fatal(err)
			}
			if _, err := nc.Request(protocol.Prio3HelperSubject, body, 2*time.Second); err != nil && !errors.Is(err, nats.ErrTimeout) {
				t.Fatal(err)
			}
			sent += 2
		}
	}
	waitFor(t, "the helper to handle every injected request", 30*time.Second, func() bool { return h.Requests.Load() == int64(sent) })
	st := h.Stats()
	return helperInjection{reports: n, requests: sent, added: st.Prepared, refused: h.Refused(), malformed: st.Rejected[ReasonMalformedRequest]}
}

// TestAttackPrio3HelperUnauthenticated: a non-leader delivers well-formed
// preparation requests for 8 reports to the Prio3 helper's subject, bare
// and signed by a foreign key, each with a non-inbox reply subject (a push
// consumer's delivery) and as an inbox request. The helper refuses all of
// them before it changes any state (reply subject, then signature) and
// counts each refusal; its batch stays empty. Control: the helper as it was
// before the check (apply, snapshot, then refuse only the answer) adds
// every report. Then the leader's own signed request is accepted, and its
// replay and a stale one are refused.
func TestAttackPrio3HelperUnauthenticated(t *testing.T) {
	const n = 8
	acceptUnauthenticated.Store(true)
	before := injectIntoHelper(t, n)
	acceptUnauthenticated.Store(false)
	after := injectIntoHelper(t, n)
	if before.added != n {
		t.Errorf("control: the unchecked helper added %d of %d injected reports, want all (the control must show the attack)", before.added, n)
	}
	if after.added != 0 {
		t.Errorf("the helper added %d of %d injected reports to a batch", after.added, n)
	}
	q := after.requests / 4
	for reason, want := range map[string]uint64{RefusedReplySubject: uint64(2 * q), RefusedUnsigned: uint64(q), RefusedSignature: uint64(q)} {
		if got := after.refused[reason]; got != want {
			t.Errorf("refused %q: %d, want %d (all: %v)", reason, got, want, after.refused)
		}
	}
	if after.malformed != 0 {
		t.Errorf("%d injected requests reached the state machine (malformed_request)", after.malformed)
	}

	// the leader's own requests: accepted once, a replay and a stale one refused
	e := newSvcEnv(t, p3.Config{Kind: p3.KindSumVec, Length: 50, Bits: 4}, 5, 48*time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 2, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	h, hr := e.startHelper()
	defer hr.stop(t, "helper")
	rng := rand.New(rand.NewPCG(7, 46))
	counts, _ := clients(rng, n, 50, 15)
	for _, u := range e.w.shardAll(t, day, counts) {
		if _, err := e.w.l.Apply(Event{Now: e.now(), Kind: EventUpload, Msg: u}); err != nil {
			t.Fatal(err)
		}
	}
	outs, err := e.w.l.Apply(Event{Now: e.now(), Kind: EventTick})
	if err != nil || len(outs) != 1 {
		t.Fatalf("leader's requests: %d, %v", len(outs), err)
	}
	signed, _ := p3.SignReq(e.signKey, outs[0].Msg, time.Now())
	stale, _ := p3.SignReq(e.signKey, outs[0].Msg, time.Now().Add(-2*DefaultMaxSkew))
	nc := e.conn()
	if _, err := nc.Request(protocol.Prio3HelperSubject, signed, 60*time.Second); err != nil {
		t.Fatalf("the leader's signed request was not answered: %v", err)
	}
	for _, b := range [][]byte{signed, stale} {
		if _, err := nc.Request(protocol.Prio3HelperSubject, b, 300*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
			t.Errorf("a replayed or stale request was answered: %v", err)
		}
	}
	waitFor(t, "the helper to handle the leader's requests", 60*time.Second, func() bool { return h.Requests.Load() == 3 })
	if got := h.Stats().Prepared; got != n {
		t.Errorf("the leader's signed request: %d of %d reports prepared", got, n)
	}
	if r := h.Refused(); r[RefusedReplay] != 1 || r[RefusedStale] != 1 {
		t.Errorf("refused %v, want one %s and one %s", r, RefusedReplay, RefusedStale)
	}
	fmt.Printf("ATTACK prio3-helper-unauthenticated: %d of %d injected reports added to a helper batch (before: %d of %d); %d requests (bare and foreign-signed, push-consumer and inbox replies) refused before any state change (%s=%d %s=%d %s=%d); the leader's signed request: %d of %d prepared, its replay and a stale copy refused\n",
		after.added, n, before.added, n, after.requests,
		RefusedReplySubject, after.refused[RefusedReplySubject], RefusedUnsigned, after.refused[RefusedUnsigned],
		RefusedSignature, after.refused[RefusedSignature], h.Stats().Prepared, n)
}
