package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/pipelines/runner"
)

// TestChaos ingests a log while SIGKILLing a random relay, aggregator or
// release process every few seconds (and restarting it), and while the
// aggregator group grows 1 → 3 and shrinks to 2. The export must equal the
// release computed from the raw log: nothing lost, nothing counted twice.
// `make chaos` runs it on the whole bundled log (CROWDLOG_CHAOS_USERS=1000);
// `make test` on a small subset.
func TestChaos(t *testing.T) {
	users := 120
	if v, err := strconv.Atoi(os.Getenv("CROWDLOG_CHAOS_USERS")); err == nil && v > 0 {
		users = v
	}
	every := 3 * time.Second
	const k, policy = 2, "ft-u"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	c := newCluster(t, ctx, 6)
	input := subset(t, users)
	bin, dir, keys := c.bin, c.dir, c.keys
	c.start("randomness", "randomness", "--nats", c.nats, "--keys", keys)
	var victims []*proc
	for _, name := range []string{"a", "b"} {
		victims = append(victims, c.start("relay-"+name, "relay", "--name", name,
			"--nats", c.nats, "--kafka", c.kafka, "--key", filepath.Join(keys, "relay-"+name+".key"), "--ack-wait", "4s"))
	}
	aggArgs := []string{"aggregate", "--kafka", c.kafka, "--key", filepath.Join(keys, runner.AggregatorKey), "--session-timeout", "6s"}
	aggs := []*proc{c.start("aggregate-0", aggArgs...)}
	victims = append(victims, c.start("release", "release", "--kafka", c.kafka, "--clickhouse", c.chd))

	out := filepath.Join(dir, "out.tsv")
	run := exec.CommandContext(ctx, bin, "run", "--external", "--no-progress", "--input", input, "--app", "query",
		"--policy", policy, "--k", strconv.Itoa(k), "--epoch", "chaos", "--nats", c.nats, "--kafka", c.kafka,
		"--clickhouse", c.chd, "--keys", keys, "--export", out, "--timeout", "30m")
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()

	kills, joins, leaves := 0, 0, 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	tick := time.NewTicker(every)
	defer tick.Stop()
	var runErr error
	for step := 1; ; step++ {
		select {
		case runErr = <-done:
		case <-tick.C:
			switch {
			case step == 2 || step == 3: // 1 → 3 aggregators
				aggs = append(aggs, c.start(fmt.Sprintf("aggregate-%d", len(aggs)), aggArgs...))
				joins++
			case step == 6: // 3 → 2
				aggs[len(aggs)-1].stop(syscall.SIGTERM)
				aggs = aggs[:len(aggs)-1]
				leaves++
			default:
				pool := append(append([]*proc{}, victims...), aggs...)
				v := pool[rng.IntN(len(pool))]
				v.stop(syscall.SIGKILL)
				kills++
				time.Sleep(300 * time.Millisecond)
				v.restart()
			}
			continue
		}
		break
	}
	report := fmt.Sprintf("chaos: %d users, %d kills, %d aggregator joins, %d leaves (final group: %d)", users, kills, joins, leaves, len(aggs))
	if runErr != nil {
		t.Fatalf("%s\nrun: %v\n%s", report, runErr, runOut.String())
	}
	n := c.checkExport(ctx, input, out, policy, k, "chaos", 6, report)
	t.Logf("%s; export of %d items byte-identical to the fault-free run and equal to the raw-log release", report, n)
}
