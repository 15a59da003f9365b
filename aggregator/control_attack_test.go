package aggregator

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// forgedControlRun is what one run of the forged-control scenario gave.
type forgedControlRun struct {
	released map[string]int   // decrypted items per artifact
	ids      map[string]bool  // their report ids
	dropped  map[string]int64 // the service's drops by reason
}

// runForgedControl mounts the attack of TestAttackForgedEpochControl on a
// fresh kfake cluster of 2 partitions and an aggregator Service that
// verifies control records under opPub (nil: verification off). The
// operator signs its open and close of query/e1 with opKey; the reports
// are those of reports (sealed, keyed by tag bucket).
func runForgedControl(t *testing.T, opPub ed25519.PublicKey, opKey, attackerKey ed25519.PrivateKey, onionKey *onion.KeyPair, reports []kafkago.Message) forgedControlRun {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions = 2
	kb, brokers := startBroker(ctx, t, t.TempDir(), partitions)
	cw := &kafkago.Writer{Addr: kafkago.TCP(kb.Addr), Topic: protocol.ReportsTopic, Transport: &kafkago.Transport{},
		Balancer: kafkago.BalancerFunc(samePartition), RequiredAcks: kafkago.RequireAll, BatchTimeout: 2 * time.Millisecond}
	defer cw.Close()
	rec := func(p int, at time.Time, b []byte) kafkago.Message {
		return kafkago.Message{Value: b, Time: at, Headers: []kafkago.Header{
			{Key: protocol.ControlHeader, Value: []byte("x")}, {Key: protocol.PartitionHeader, Value: []byte(strconv.Itoa(p))}}}
	}
	unsigned := func(p int, op, epoch string) kafkago.Message {
		b, _ := json.Marshal(protocol.EpochOpen{Op: op, App: "query", Epoch: epoch, Partitions: partitions})
		return rec(p, time.Now(), b)
	}
	signed := func(key ed25519.PrivateKey, p, forP int, op, epoch string, issued, at time.Time) kafkago.Message {
		b, err := protocol.SignControl(key, op, "query", epoch, protocol.ControlTarget{Topic: protocol.ReportsTopic, Partition: forP, Partitions: partitions}, issued, protocol.ControlValidity)
		if err != nil {
			t.Fatal(err)
		}
		return rec(p, at, b)
	}
	write := func(w *kafkago.Writer, msgs []kafkago.Message) {
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()

	// wave 1, before the operator opens e1: per partition 10 fake opens
	// (5 unsigned, 5 signed by the attacker's key), an unsigned and a
	// forged close of e1, and a captured operator open of an old epoch
	// (issued 3 h ago: expired at its record timestamp)
	var wave1 []kafkago.Message
	for p := range partitions {
		for i := range 10 {
			if i < 5 {
				wave1 = append(wave1, unsigned(p, protocol.ControlOpenEpoch, fmt.Sprintf("fake-%d", i)))
			} else {
				wave1 = append(wave1, signed(attackerKey, p, p, protocol.ControlOpenEpoch, fmt.Sprintf("fake-%d", i), now, now))
			}
		}
		wave1 = append(wave1, unsigned(p, protocol.ControlCloseEpoch, "e1"),
			signed(attackerKey, p, p, protocol.ControlCloseEpoch, "e1", now, now),
			signed(opKey, p, p, protocol.ControlOpenEpoch, "old", now.Add(-3*time.Hour), now))
	}
	write(cw, wave1)
	if err := OpenEpoch(ctx, brokers, &ControlSigner{Key: opKey}, "query", "e1"); err != nil {
		t.Fatal(err)
	}
	rw := infrakafka.NewWriter(kb.Addr, protocol.ReportsTopic)
	defer rw.Close()
	half := len(reports) / 2
	write(rw, reports[:half])
	// wave 2, mid-epoch: an unsigned and a forged close of e1 per
	// partition, the old open again with a back-dated record timestamp
	// inside its validity, and an operator-signed close of e1 for
	// partition 0 written into partition 1
	var wave2 []kafkago.Message
	for p := range partitions {
		wave2 = append(wave2, unsigned(p, protocol.ControlCloseEpoch, "e1"),
			signed(attackerKey, p, p, protocol.ControlCloseEpoch, "e1", now, now),
			signed(opKey, p, p, protocol.ControlOpenEpoch, "old", now.Add(-3*time.Hour), now.Add(-3*time.Hour)))
	}
	wave2 = append(wave2, signed(opKey, 1, 0, protocol.ControlCloseEpoch, "e1", now, now))
	write(cw, wave2)
	write(rw, reports[half:])
	if err := CloseEpoch(ctx, brokers, &ControlSigner{Key: opKey}, "query", "e1"); err != nil {
		t.Fatal(err)
	}

	tail := infrakafka.ReadTopic(ctx, brokers, protocol.DecryptedTopic, "test", slog.New(slog.DiscardHandler))
	defer tail.Stop()
	s := &Service{Brokers: brokers, Keys: []*onion.KeyPair{onionKey}, Logger: slog.New(slog.DiscardHandler),
		GroupID: "forged-control", MaxWait: 20 * time.Millisecond, SessionTimeout: 6 * time.Second, ControlKey: opPub}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	defer func() {
		stop()
		<-done
	}()
	out := forgedControlRun{released: map[string]int{}, ids: map[string]bool{}}
	// every report applied (accepted, or dropped as late) and every
	// partition's closed marker of e1 read (the operator's close is each
	// partition's last record), then no item for 300 ms
	deadline := time.After(90 * time.Second)
	quiet := time.NewTimer(time.Hour)
	closed := map[int]bool{}
	for settled := false; ; {
		if !settled && len(closed) == partitions && s.Reports.Load()+s.DroppedByReason()["late"]+s.DroppedByReason()["unknown-epoch"] >= int64(len(reports)) {
			settled = true
			quiet.Reset(300 * time.Millisecond)
		}
		select {
		case b := <-tail.Msgs:
			var d protocol.Decrypted
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			if d.Kind == protocol.KindClosed && d.Epoch == "e1" {
				closed[d.Partition] = true
			}
			if d.Kind == protocol.KindItem && d.Epoch == "e1" && !out.ids[d.Report] {
				out.ids[d.Report] = true
				out.released[d.Item]++
			}
			if settled {
				quiet.Reset(300 * time.Millisecond)
			}
		case <-quiet.C:
			out.dropped = s.DroppedByReason()
			return out
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			t.Fatalf("in 90 s: reports applied: %d accepted, drops %v, of %d; closed markers of %d of %d partitions", s.Reports.Load(), s.DroppedByReason(), len(reports), len(closed), partitions)
		case err := <-done:
			t.Fatalf("the service stopped: %v", err)
		}
	}
}

// TestAttackForgedEpochControl (docs/threat-model.md, forged epoch
// control): an attacker who may write to topic reports writes, into every
// partition, 10 fake epoch opens (5 unsigned, 5 signed by its own key) —
// more than the 8 open epochs an app may have — and unsigned and forged
// closes of the real epoch e1, before the operator opens it and again
// while its reports arrive; it also replays an operator-signed open of an
// old epoch (expired at its record timestamp, then with the timestamp
// back-dated) and copies an operator-signed close of partition 0 into
// partition 1. With the operator's public key (--control-pub) every one
// is refused and counted, and e1 opens and releases exactly the reference
// (the artifacts with at least k users, every report). The control, the
// same records with verification off: the fake close closes e1 before its
// open, the open is refused and nothing of e1 is released.
func TestAttackForgedEpochControl(t *testing.T) {
	opPub, opKey, _ := ed25519.GenerateKey(nil)
	_, attackerKey, _ := ed25519.GenerateKey(nil)
	onionKey, _ := onion.GenerateKeyPair(1)
	if err := onion.PrepareKeys([]*onion.KeyPair{onionKey}); err != nil {
		t.Fatal(err)
	}
	// artifact a has a+1 users, one report each (FT_u, k = 4): the
	// reference release is every report of artifacts 3 to 7
	const k, artifacts = 4, 8
	var reports []kafkago.Message
	reference, refIDs := map[string]int{}, map[string]bool{}
	for a := range artifacts {
		name := fmt.Sprintf("artifact %d", a)
		s := sealing(t, name, star.FTu, k)
		for range a + 1 {
			u, _ := star.NewUserSecret()
			r, err := s.Seal(&u, name, "")
			if err != nil {
				t.Fatal(err)
			}
			reports = append(reports, kafkago.Message{Key: onion.TagBucket(r.Tag), Value: wrap(t, onionKey, r)})
			if a+1 >= k {
				reference[name]++
				refIDs[hex.EncodeToString(r.ID[:])] = true
			}
		}
	}

	on := runForgedControl(t, opPub, opKey, attackerKey, onionKey, reports)
	off := runForgedControl(t, nil, opKey, attackerKey, onionKey, reports)
	refReports := 0
	for _, n := range reference {
		refReports += n
	}
	onReports := 0
	for _, n := range on.released {
		onReports += n
	}
	offReports := 0
	for _, n := range off.released {
		offReports += n
	}
	fmt.Printf("ATTACK forged-epoch-control: with the operator's key, %d unsigned, %d forged and %d replayed control records refused (per partition of 2: 10 fake opens, 4 fake closes of e1, 2 replays of an old signed open; 1 signed close copied into another partition); e1 released %d of %d reference artifacts, %d of %d reports, equal to the reference; control without verification: the fake opens filled the 8 open epochs of the app (%d further opens refused), a fake close closed e1 first, its open was refused in %d of 2 partitions (open-after-close) and %d artifacts, %d reports were released\n",
		on.dropped[DropUnsignedControl], on.dropped[DropBadControlSignature], on.dropped[DropReplayedControl],
		len(on.released), len(reference), onReports, refReports, off.dropped["open-refused"], off.dropped["open-after-close"], len(off.released), offReports)
	// per partition: 5 fake opens + 2 closes unsigned, 5 fake opens + 2 closes forged;
	// replayed: the expired old open and the back-dated one in each, the copied close in partition 1
	if on.dropped[DropUnsignedControl] != 14 || on.dropped[DropBadControlSignature] != 14 || on.dropped[DropReplayedControl] != 5 {
		t.Errorf("with verification, dropped %v; want 14 unsigned-control, 14 bad-control-signature, 5 replayed-control", on.dropped)
	}
	if n := on.dropped["open-refused"] + on.dropped["open-after-close"] + on.dropped["late"] + on.dropped["unknown-epoch"]; n != 0 {
		t.Errorf("with verification, the real epoch was disturbed: %v", on.dropped)
	}
	if !maps.Equal(on.released, reference) || !maps.Equal(on.ids, refIDs) {
		t.Errorf("with verification, released %v (%d reports), want the reference %v (%d)", on.released, len(on.ids), reference, len(refIDs))
	}
	// the control: the same records take effect without verification
	// (per partition 12 opens: 8 open, 4 refused: fake-8, fake-9 and the old open twice)
	if off.dropped["open-refused"] != 8 || off.dropped["open-after-close"] != 2 || len(off.released) != 0 || off.dropped["late"] != int64(len(reports)) {
		t.Errorf("without verification, dropped %v and released %v: the forged records should have closed e1 before its open", off.dropped, off.released)
	}
}
