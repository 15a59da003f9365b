package kafka

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/protocol"
)

// TestAttackReadDecrypted mounts docs/threat-model.md's read-decrypted
// attack: relay b's Kafka credential and a client's (a SASL user with no
// role), on a broker with TLS, SASL/SCRAM and the ACL table on, try to
// read topic decrypted (every partition from offset 0: unit ids, artifacts
// and counts before any noise) and to forge an item into it. Both must
// read 0 records and write 0; decrypted then holds exactly the
// aggregator's records. The control is the same broker, users and TLS
// with ACLs off (authentication alone, the state before the table): the
// same credentials read every record and forge theirs. Prints ATTACK
// read-decrypted.
func TestAttackReadDecrypted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const items = 40
	type outcome struct {
		read, forged int
		readErr      error
	}
	mount := func(acls bool) (map[string]outcome, int) {
		sc := startSecure(t, ctx, acls)
		msgs := make([]kafkago.Message, items)
		for i := range msgs {
			msgs[i] = kafkago.Message{Key: []byte(strconv.Itoa(i)), Value: []byte(fmt.Sprintf(`{"unit":%d,"item":"secret query %d"}`, i, i))}
		}
		if err := produce(sc.ctx(t, ctx, sc.users["aggregator"]), sc.b.Addr, protocol.DecryptedTopic, msgs...); err != nil {
			t.Fatalf("the aggregator writes decrypted (acls %v): %v", acls, err)
		}
		out := map[string]outcome{}
		for _, who := range []string{"relay", "client"} {
			as := sc.ctx(t, ctx, sc.users[who])
			rctx, rcancel := context.WithTimeout(as, 10*time.Second)
			n, err := fetchAll(rctx, sc.b.Addr, protocol.DecryptedTopic, 2)
			rcancel()
			o := outcome{read: n, readErr: err}
			if produce(as, sc.b.Addr, protocol.DecryptedTopic, kafkago.Message{Value: []byte(`{"item":"forged by ` + who + `"}`)}) == nil {
				o.forged++
			}
			out[who] = o
		}
		total, err := fetchAll(sc.ctx(t, ctx, sc.admin), sc.b.Addr, protocol.DecryptedTopic, 2)
		if err != nil {
			t.Fatal(err)
		}
		return out, total
	}
	got, total := mount(true)
	for who, o := range got {
		if o.read != 0 || o.forged != 0 {
			t.Errorf("with ACLs, %s's credential read %d of %d decrypted records and forged %d", who, o.read, items, o.forged)
		}
		if o.readErr == nil {
			t.Errorf("with ACLs, %s's read of decrypted returned no error", who)
		}
		t.Logf("%s's read with ACLs: %v", who, o.readErr)
	}
	if total != items {
		t.Errorf("with ACLs decrypted holds %d records, want the aggregator's %d", total, items)
	}
	ctl, ctlTotal := mount(false)
	for who, o := range ctl {
		if o.read < items || o.forged != 1 { // the client reads relay b's forgery too
			t.Errorf("control (ACLs off): %s read %d of %d and forged %d; the control must show the attack working", who, o.read, items, o.forged)
		}
	}
	fmt.Printf("ATTACK read-decrypted: with TLS, SCRAM-SHA-512 and the role ACL table, relay b's credential read %d of %d decrypted records and forged %d, a client's read %d and forged %d (the broker hides the topic from them: \"topic not found\"; decrypted kept exactly the aggregator's %d records); control with ACLs off: relay b read %d and forged %d, the client read %d and forged %d (%d records after)\n",
		got["relay"].read, items, got["relay"].forged, got["client"].read, got["client"].forged, total,
		ctl["relay"].read, ctl["relay"].forged, ctl["client"].read, ctl["client"].forged, ctlTotal)
}
