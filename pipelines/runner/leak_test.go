package runner

import (
	"bytes"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// goroutineStacks returns the stack of every goroutine now, by id
// (runtime.Stack with all = true).
func goroutineStacks() map[int]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[int]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s := string(g)
		rest, ok := strings.CutPrefix(s, "goroutine ")
		if !ok {
			continue
		}
		id, err := strconv.Atoi(rest[:strings.IndexByte(rest, ' ')])
		if err != nil {
			continue
		}
		out[id] = s
	}
	return out
}

// leakedBy are the stack frames of the goroutines a run must not leave
// behind: its Kafka clients, its NATS connections, its brokers and servers,
// and its roles.
var leakedBy = []string{
	"github.com/segmentio/kafka-go.",
	"github.com/nats-io/nats.go",
	"github.com/nats-io/nats-server",
	"github.com/twmb/franz-go",
	"github.com/crowdlog/crowdlog/",
}

// processWide tells the goroutines a process keeps for its life by
// design, started by whichever run came first: the aggregator's pool of
// Prepare workers (aggregator.Partition.PrepareBatch).
func processWide(stack string) bool {
	return strings.Contains(stack, "aggregator.(*Partition).PrepareBatch.func1")
}

// newGoroutines returns the stacks of the goroutines not in before whose
// stacks have a frame of leakedBy (the test's own goroutine aside).
func newGoroutines(before map[int]string) []string {
	var leaks []string
	for id, s := range goroutineStacks() {
		if _, ok := before[id]; ok {
			continue
		}
		if strings.Contains(s, "testing.tRunner") || strings.Contains(s, "runtime.Stack(") || processWide(s) {
			continue
		}
		for _, f := range leakedBy {
			if strings.Contains(s, f) {
				leaks = append(leaks, s)
				break
			}
		}
	}
	sort.Strings(leaks)
	return leaks
}

// leakBound bounds the wait for a run's goroutines to end after it
// returned: a Kafka connection's read deadline and a NATS connection's
// close are far shorter.
const leakBound = 60 * time.Second

// checkNoLeaks fails t when goroutines started since before (a
// goroutineStacks taken before the run) in Kafka, NATS or crowdlog code
// are still running leakBound after the run returned: such a goroutine
// keeps dialing a broker that is gone, or holds a connection the next
// test's cleanup waits on.
func checkNoLeaks(t *testing.T, before map[int]string) {
	t.Helper()
	deadline := time.Now().Add(leakBound)
	var leaks []string
	for {
		if leaks = newGoroutines(before); len(leaks) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if p := os.Getenv("CROWDLOG_LEAK_DUMP"); p != "" {
		os.WriteFile(p, []byte(strings.Join(leaks, "\n\n")), 0o644)
	}
	shown := leaks
	if len(shown) > 10 {
		shown = shown[:10]
	}
	t.Errorf("%d goroutines of the run still running %s after it returned (first %d):\n%s", len(leaks), leakBound, len(shown), strings.Join(shown, "\n\n"))
}
