package natsconn

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestAccept: requester inboxes (and service-import replies) pass; any
// other reply subject, a wildcard or none is refused and counted; the
// testing switch turns the check off.
func TestAccept(t *testing.T) {
	for _, reply := range []string{"_INBOX.abc.1", "_R_.xyz.2"} {
		if err := Accept(&nats.Msg{Subject: "s", Reply: reply}); err != nil {
			t.Errorf("%q refused: %v", reply, err)
		}
	}
	before := RefusedReplies()
	bad := []string{"", "$KV.bucket.key", "$JS.API.STREAM.PURGE.x", "crowdlog.prio3.helper", "_INBOX.>", "_INBOX."}
	for _, reply := range bad {
		if err := Accept(&nats.Msg{Subject: "s", Reply: reply}); !errors.Is(err, ErrReplySubject) {
			t.Errorf("%q: %v, want ErrReplySubject", reply, err)
		}
	}
	if got := RefusedReplies() - before; got != uint64(len(bad)) {
		t.Errorf("counted %d refusals, want %d", got, len(bad))
	}
	restore := AnswerAnyReplyForTesting()
	defer restore()
	if err := Accept(&nats.Msg{Subject: "s", Reply: "$KV.bucket.key"}); err != nil {
		t.Errorf("with the check off: %v", err)
	}
}
