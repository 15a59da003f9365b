package issuer

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// TestReplyCheckedBeforeIssuance: a valid, signed issuance request whose
// reply subject is not a requester inbox (what a push consumer's delivery
// or a publish naming another subject looks like) is refused before the
// identity's budget is touched: nothing issued, the refusal counted
// (reply-subject); the same identity then gets its whole budget through an
// inbox. Control (the check off, as before): the request spends budget.
func TestReplyCheckedBeforeIssuance(t *testing.T) {
	e := newEnv(t)
	s, stop := e.start(Limits{RandomnessTokens: 3, ReportTokens: 3})
	defer stop()
	nc := e.conn()
	alice := e.identity(true)
	inject := func() {
		_, b := e.request(alice, token.KindRandomness, 3, now())
		if err := nc.PublishMsg(&nats.Msg{Subject: protocol.IssuerSubject, Reply: "crowdlog.attacker.deliver", Data: b}); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	inject()
	deadline := time.Now().Add(60 * time.Second)
	for s.RefusedBy(ReasonReplySubject) < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := s.RefusedBy(ReasonReplySubject); got != 1 || s.Issued.Load() != 0 {
		t.Fatalf("non-inbox reply: refused %d, issued %d; want 1 refused, 0 issued", got, s.Issued.Load())
	}
	if err := e.tokens(nc, alice, token.KindRandomness, 3); err != nil {
		t.Fatalf("the identity's budget after the refused request: %v", err)
	}

	// control: the check off, an identity's request with a non-inbox
	// reply spends its budget although no answer is sent
	restore := natsconn.AnswerAnyReplyForTesting()
	defer restore()
	bob := e.identity(true)
	_, b := e.request(bob, token.KindReport, 3, now())
	if err := nc.PublishMsg(&nats.Msg{Subject: protocol.IssuerSubject, Reply: "crowdlog.attacker.deliver", Data: b}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for s.Issued.Load() < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s.Issued.Load() != 6 {
		t.Errorf("control: issued %d, want 6 (the unchecked request spends the budget)", s.Issued.Load())
	}
}
