package kafka

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// transportGoroutines returns the ids of the goroutines of kafka-go's
// Transport connection pools (connPool.discover refreshes a pool's
// metadata until the pool is closed).
func transportGoroutines() map[string]bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	ids := map[string]bool{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "kafka-go.(*connPool).discover(") {
			ids[strings.Fields(g)[1]] = true
		}
	}
	return ids
}

// newSince counts the ids of now not in before.
func newSince(before, now map[string]bool) int {
	n := 0
	for id := range now {
		if !before[id] {
			n++
		}
	}
	return n
}

// A Writer with its own Transport, closed with CloseWriter, leaves no
// goroutine of that Transport behind; closed with kafka-go's Close alone,
// its pool keeps refreshing metadata (and, the broker gone, dialing it).
func TestCloseWriterStopsTransport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := Start(ctx, t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := EnsureTopics(ctx, b.Addr, 2, "t"); err != nil {
		t.Fatal(err)
	}
	write := func() *kafkago.Writer {
		w := NewWriter(b.Addr, "t")
		if err := w.WriteMessages(ctx, kafkago.Message{Key: []byte("k"), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		return w
	}
	// the control: kafka-go's Close alone leaves the pool running (nothing
	// ever cancels it)
	before := transportGoroutines()
	w := write()
	w.Close()
	if n := newSince(before, transportGoroutines()); n == 0 {
		t.Fatal("control: no Transport goroutine after kafka-go's Close (has kafka-go's Close changed? then CloseWriter may go)")
	}
	w.Transport.(*kafkago.Transport).CloseIdleConnections()

	before = transportGoroutines()
	w = write()
	if err := CloseWriter(w); err != nil {
		t.Fatal(err)
	}
	// the pool's goroutine ends once it sees its context cancelled
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := newSince(before, transportGoroutines())
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CloseWriter left %d Transport goroutines running after 30 s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
