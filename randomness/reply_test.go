package randomness

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// TestReplyCheckedBeforeSpend: a request paying valid tokens whose reply
// subject is not a requester inbox (a push consumer's delivery, a publish
// naming another subject) is refused before any token is spent or any
// element evaluated, counted as reply-subject; the same request through an
// inbox is then answered. Control (the check off, as before): the request
// spends its tokens although its answer goes nowhere useful.
func TestReplyCheckedBeforeSpend(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.dir, "keys", "randomness.keys")
	randKey, _ := token.GenerateKey(token.KindRandomness, "e1")
	s, k, stop := e.serveTokens(dir, map[string]*token.PrivateKey{"e1": randKey})
	defer stop()
	openEpochs(t, k, "e1")
	sk, err := k.Lookup("e1")
	if err != nil {
		t.Fatal(err)
	}
	inputs := [][]byte{oprf.OPRFInput("query", "e1", "a"), oprf.OPRFInput("query", "e1", "b")}
	paid := func() *oprf.RandomnessRequest {
		_, q, err := oprf.Blind(mustPub(t, sk), "e1", inputs)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range issue(t, randKey, 2) {
			b, _ := tk.MarshalBinary()
			q.Tokens = append(q.Tokens, b)
		}
		return q
	}
	deliver := func(q *oprf.RandomnessRequest) {
		b, _ := q.MarshalBinary()
		if err := e.nc.PublishMsg(&nats.Msg{Subject: protocol.RandomnessSubject, Reply: "crowdlog.attacker.deliver", Data: b}); err != nil {
			t.Fatal(err)
		}
		if err := e.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(what string, cond func() bool) {
		for end := time.Now().Add(60 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("waited 60 s for %s", what)
			}
		}
	}
	q := paid()
	deliver(q)
	wait("the refusal", func() bool { return s.Refusals()[ReasonReplySubject] == 1 })
	if s.Evaluated.Load() != 0 {
		t.Fatalf("evaluated %d elements of a request with a non-inbox reply", s.Evaluated.Load())
	}
	if resp := request(t, e, q); resp.Refused() {
		t.Fatalf("the same tokens through an inbox: %+v (spent by the refused request?)", resp.Refusal)
	}

	// control: the check off, the request spends its tokens
	restore := natsconn.AnswerAnyReplyForTesting()
	defer restore()
	c := paid()
	deliver(c)
	wait("the unchecked request", func() bool { return s.Evaluated.Load() == 4 })
	_, other, _ := oprf.Blind(mustPub(t, sk), "e1", inputs)
	other.Tokens = c.Tokens
	if resp := request(t, e, other); !errors.Is(oprf.TokenRefusal(resp.Refusal), oprf.ErrTokenSpent) {
		t.Errorf("control: the unchecked request's tokens are not spent: %+v", resp.Refusal)
	}
}
