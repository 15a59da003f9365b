package coordinator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"
)

// TestReplyCheckedBeforeHandling: a client's signed ping whose reply
// subject is not a requester inbox (a push consumer's delivery, a publish
// naming another subject) is refused before it is handled (nothing
// answered or counted), counted reply_subject. Control (the check off, as
// before): the ping is handled.
func TestReplyCheckedBeforeHandling(t *testing.T) {
	e := newEnv(t)
	list, _ := keywords.Parse(stringsReader("flu\nfever\n"))
	c := e.coordinator(t, Campaign{Name: "flu", List: list, GroupSize: 3})
	cl := register(t, e.nc)
	deliver := func() {
		b, _ := json.Marshal(cl.pingMsg())
		if err := e.nc.PublishMsg(&nats.Msg{Subject: protocol.PDDPingSubject, Reply: "crowdlog.attacker.deliver", Data: b}); err != nil {
			t.Fatal(err)
		}
		if err := e.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	deliver()
	for end := time.Now().Add(60 * time.Second); c.Refused()[RefusedReplySubject] < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the non-inbox ping was not refused within 60 s")
		}
	}
	time.Sleep(200 * time.Millisecond)
	handled := func() int64 { return c.Pings.Load() + c.Errors.Load() }
	if handled() != 0 {
		t.Fatalf("a ping with a non-inbox reply was handled (%d pings, %d answered with an error)", c.Pings.Load(), c.Errors.Load())
	}
	restore := natsconn.AnswerAnyReplyForTesting()
	defer restore()
	deliver()
	for end := time.Now().Add(60 * time.Second); handled() < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("control: the unchecked ping was not handled within 60 s (errors %d, refused %v)", c.Errors.Load(), c.Refused())
		}
	}
}
