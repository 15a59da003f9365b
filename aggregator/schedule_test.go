package aggregator

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// TestScheduleClosesOnItsOwnClock: an aggregator with a Schedule (epochs
// of 1 h, close delay 5 min) on a clock the test moves opens the current
// scheduled epoch by itself (its reports are kept, not dropped as
// unknown-epoch), and once the clock passes the epoch's end + the close
// delay it closes it without any control record from outside: every
// partition's closed marker follows the items of the artifacts with ≥ k
// users; a named epoch stays open (the operator's). The service verifies
// control records (ControlKey) and the schedule signs its own (Schedule.Key).
func TestScheduleClosesOnItsOwnClock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions, k = 2, 3
	kb, brokers := startBroker(ctx, t, t.TempDir(), partitions)
	onionKey, _ := onion.GenerateKeyPair(1)
	start := time.Date(2006, 3, 1, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := start.Add(20 * time.Minute)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	epoch := protocol.ScheduleEpoch(start, time.Hour)
	controlPub, controlKey, _ := ed25519.GenerateKey(nil)
	if err := OpenEpoch(ctx, brokers, &ControlSigner{Key: controlKey}, "query", "named"); err != nil {
		t.Fatal(err)
	}
	s := &Service{Brokers: brokers, Keys: []*onion.KeyPair{onionKey}, Logger: slog.New(slog.DiscardHandler), GroupID: "sched",
		MaxBatch: 10, MaxWait: 20 * time.Millisecond, SessionTimeout: 6 * time.Second, ControlKey: controlPub,
		Schedule: &Schedule{Apps: []string{"query"}, Length: time.Hour, CloseDelay: 5 * time.Minute, Every: 50 * time.Millisecond, Now: now, Key: controlKey}}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = s.Run(sctx) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 90 s: %s", what)
			}
		}
	}
	// the clock's open reaches every partition before any report
	waitFor("the scheduled open in every partition", func() bool { return openIn(s, epoch) == partitions })
	good := map[string]bool{}
	var msgs []kafkago.Message
	for a := range 20 {
		art := fmt.Sprintf("scheduled artifact %d", a)
		omega := make([]byte, 64)
		copy(omega, art)
		sl, err := star.DeriveSealing(omega, "query", epoch, star.FTu, k)
		if err != nil {
			t.Fatal(err)
		}
		users := 1 + a%5
		for range users {
			u, _ := star.NewUserSecret()
			r, err := sl.Seal(&u, art, "")
			if err != nil {
				t.Fatal(err)
			}
			if users >= k {
				good[hex.EncodeToString(r.ID[:])] = true
			}
			msgs = append(msgs, kafkago.Message{Key: onion.TagBucket(r.Tag), Value: wrap(t, onionKey, r)})
		}
	}
	w := infrakafka.NewWriter(kb.Addr, protocol.ReportsTopic)
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()
	waitFor("every report accepted", func() bool { return s.Reports.Load() == int64(len(msgs)) })
	if d := s.DroppedByReason()["unknown-epoch"]; d != 0 {
		t.Fatalf("%d reports dropped unknown-epoch: the schedule did not open %s", d, epoch)
	}
	// at the end, before the delay: nothing closes
	mu.Lock()
	clock = start.Add(time.Hour + 4*time.Minute)
	mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	if n := openIn(s, epoch); n != partitions {
		t.Fatalf("the epoch is open in %d of %d partitions before its close delay passed", n, partitions)
	}
	mu.Lock()
	clock = start.Add(time.Hour + 5*time.Minute)
	mu.Unlock()
	tail := infrakafka.ReadTopic(ctx, brokers, protocol.DecryptedTopic, "test", slog.New(slog.DiscardHandler))
	defer tail.Stop()
	items, summaries := readUntilClosed(t, tail, partitions)
	for _, d := range summaries {
		if d.Epoch != epoch {
			t.Fatalf("a summary of epoch %s", d.Epoch)
		}
	}
	if len(items) != len(good) {
		t.Fatalf("%d items decrypted before the scheduled close, want %d", len(items), len(good))
	}
	for id := range good {
		if !items[id] {
			t.Fatalf("report %s of an artifact with ≥ %d users not decrypted", id, k)
		}
	}
	for _, r := range []string{DropUnsignedControl, DropBadControlSignature, DropReplayedControl} {
		if n := s.DroppedByReason()[r]; n != 0 {
			t.Errorf("%d control records dropped as %s", n, r)
		}
	}
	// the named epoch is still open: only the operator closes it
	if named := openIn(s, "named"); named != partitions {
		t.Fatalf("the named epoch is open in %d of %d partitions after the schedule's close", named, partitions)
	}
}

// TestScheduleDue: the opens and closes due at a time, from the open
// epochs the partitions report.
func TestScheduleDue(t *testing.T) {
	s := &Service{Schedule: &Schedule{Apps: []string{"query"}, Length: 24 * time.Hour, CloseDelay: time.Hour}}
	day := func(d int) string {
		return protocol.ScheduleEpoch(time.Date(2006, 3, d, 12, 0, 0, 0, time.UTC), 24*time.Hour)
	}
	s.openEpochs = map[int][]epochKey{0: {{"query", day(1)}, {"query", day(2)}, {"query", "named"}, {"click", day(1)}}}
	at := time.Date(2006, 3, 3, 0, 30, 0, 0, time.UTC) // 30 min into March 3: March 2 ended 30 min ago
	due := s.scheduleDue(at, time.Minute, map[epochKey]bool{}, map[epochKey]bool{})
	want := []dueControl{{epochKey{"query", day(1)}, true}, {epochKey{"query", day(3)}, false}}
	if fmt.Sprint(due) != fmt.Sprint(want) {
		t.Fatalf("due %v, want %v", due, want)
	}
	at = at.Add(time.Hour) // March 2's close delay has passed; within a minute of March 4? no
	due = s.scheduleDue(at, 23*time.Hour, map[epochKey]bool{{"query", day(3)}: true}, map[epochKey]bool{{"query", day(1)}: true})
	want = []dueControl{{epochKey{"query", day(2)}, true}, {epochKey{"query", day(4)}, false}}
	if fmt.Sprint(due) != fmt.Sprint(want) {
		t.Fatalf("due %v, want %v", due, want)
	}
}

// openIn is the number of s's partitions in which epoch is open.
func openIn(s *Service, epoch string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, eks := range s.openEpochs {
		for _, ek := range eks {
			if ek.epoch == epoch {
				n++
			}
		}
	}
	return n
}
