package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol"
)

// groupOffsets returns, summed over the partitions of topic at addr, the
// end offsets (high watermarks) and the offsets group has committed (a
// partition without a commit counts 0); lag is end − committed.
func groupOffsets(ctx context.Context, addr, group, topic string) (end, committed int64, err error) {
	cl := &kafkago.Client{Addr: kafkago.TCP(addr), Timeout: 5 * time.Second, Transport: &kafkago.Transport{}}
	defer cl.Transport.(*kafkago.Transport).CloseIdleConnections()
	meta, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, 0, err
	}
	var ids []int
	var reqs []kafkago.OffsetRequest
	for _, t := range meta.Topics {
		for _, p := range t.Partitions {
			ids = append(ids, p.ID)
			reqs = append(reqs, kafkago.LastOffsetOf(p.ID))
		}
	}
	lo, err := cl.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: reqs}})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range lo.Topics[topic] {
		if p.Error != nil {
			return 0, 0, p.Error
		}
		end += p.LastOffset
	}
	of, err := cl.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ids}})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range of.Topics[topic] {
		if p.Error == nil && p.CommittedOffset > 0 {
			committed += p.CommittedOffset
		}
	}
	return end, committed, nil
}

// keepOnFailure registers a cleanup that, when the test failed and
// CROWDLOG_KEEP names a directory, copies c's exports (out.tsv, the
// fault-free clean.tsv) and role logs there for a post-mortem. Nothing is
// printed: the exports hold real users' queries.
func (c *cluster) keepOnFailure() {
	t := c.t
	t.Cleanup(func() {
		dst := os.Getenv("CROWDLOG_KEEP")
		if !t.Failed() || dst == "" {
			return
		}
		dst = filepath.Join(dst, t.Name())
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Logf("keep: %v", err)
			return
		}
		paths, _ := filepath.Glob(filepath.Join(c.logs, "*.log"))
		for _, p := range append(paths, filepath.Join(c.dir, "out.tsv"), filepath.Join(c.dir, "clean.tsv")) {
			if b, err := os.ReadFile(p); err == nil {
				os.WriteFile(filepath.Join(dst, filepath.Base(p)), b, 0o644)
			}
		}
		t.Logf("exports and logs kept in %s", dst)
	})
}

// countInFile counts the lines of the file at path containing s.
func countInFile(path, s string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte(s))
}

// startRun opens epoch at the randomness service (as the operator does)
// and starts `crowdlog run --external` on input against c's services
// (ClickHouse at ch) and returns a channel receiving its exit and its
// combined output (read it only after the exit).
func (c *cluster) startRun(ctx context.Context, input, ch, policy string, k int, epoch, out string) (<-chan error, *bytes.Buffer) {
	c.t.Helper()
	c.openEpoch(epoch)
	run := exec.CommandContext(ctx, c.bin, "run", "--external", "--no-progress", "--input", input, "--app", "query",
		"--policy", policy, "--k", strconv.Itoa(k), "--epoch", epoch, "--nats", c.nats, "--kafka", c.kafka,
		"--clickhouse", ch, "--keys", c.keys, "--export", out,
		// the outages may fall on start-up steps: be as patient as before
		// the bounds existed, within the test's own deadline
		"--start-timeout", "10m", "--timeout", "10m")
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	// once ctx ends and the run is killed, Wait stops waiting for the
	// output pipe within 30 s
	run.WaitDelay = 30 * time.Second
	if err := run.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	return done, &runOut
}

// startRoles starts randomness, relays a and b, one aggregator (returned)
// and the release role writing, as the writer (writerArgs), to the
// ClickHouse at ch started in chDir.
func (c *cluster) startRoles(ch, chDir, policy string, k int, aggArgs ...string) *proc {
	c.start("randomness", "randomness", "--nats", c.nats, "--keys", c.keys)
	for _, name := range []string{"a", "b"} {
		c.start("relay-"+name, "relay", "--name", name, "--nats", c.nats,
			"--kafka", c.kafka, "--key", filepath.Join(c.keys, "relay-"+name+".key"))
	}
	agg := c.start("aggregate", append([]string{"aggregate", "--kafka", c.kafka,
		"--key", filepath.Join(c.keys, keydir.AggregatorKey)}, aggArgs...)...)
	c.start("release", append([]string{"release", "--kafka", c.kafka, "--clickhouse", ch, "--policy", policy, "--k", strconv.Itoa(k)}, c.writerArgs(ch, chDir)...)...)
	return agg
}

// waitReportsFlowing waits until the aggregator has emitted something (or
// the run ended, or a minute passed).
func waitReportsFlowing(t *testing.T, addr string, done <-chan error) {
	deadline := time.Now().Add(time.Minute)
	for decryptedCount(t, addr) == 0 && time.Now().Before(deadline) && len(done) == 0 {
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClickHouseOutage stops the ClickHouse server the release role writes
// to while reports are ingested, and keeps it down for at least 10 s and
// until the release role has tried (and failed) to write the epoch's
// release; then starts it again on the same data directory and port. The
// release stage retries (release/stage retry) and the export must equal the
// raw-log release and, byte for byte, a fault-free run's.
func TestClickHouseOutage(t *testing.T) {
	const users, k, policy = 80, 2, "ft-u"
	const minOutage, maxOutage = 10 * time.Second, 5 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := newCluster(t, ctx, 4)
	c.keepOnFailure()
	input := subset(t, users)
	// a server of its own for the release role: the cluster's stays up for
	// checkExport's fault-free run
	ch, err := clickhouse.Start(ctx, filepath.Join(c.dir, "clickhouse-outage"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Stop() }) // ch is replaced on restart
	c.startRoles(ch.TCPAddr, ch.Dir, policy, k)
	releaseLog := filepath.Join(c.logs, "release.log")

	out := filepath.Join(c.dir, "out.tsv")
	done, runOut := c.startRun(ctx, input, ch.TCPAddr, policy, k, "outage", out)
	waitReportsFlowing(t, c.kafka, done)

	down := time.Now()
	if err := ch.Stop(); err != nil {
		t.Fatalf("stop ClickHouse: %v", err)
	}
	t.Logf("ClickHouse stopped %s", time.Now().Format(time.TimeOnly))
	const failed = "write to ClickHouse failed"
	for time.Since(down) < minOutage || countInFile(releaseLog, failed) == 0 {
		if time.Since(down) > maxOutage {
			t.Fatalf("the release role did not try to write within %s of the outage\nrun:\n%s", maxOutage, runOut)
		}
		select {
		case err := <-done:
			t.Fatalf("run ended during the ClickHouse outage: %v\n%s", err, runOut)
		case <-time.After(200 * time.Millisecond):
		}
	}
	failedDuringOutage := countInFile(releaseLog, failed)
	restarted, err := ch.Restart(ctx)
	if err != nil {
		t.Fatalf("restart ClickHouse: %v", err)
	}
	ch = restarted
	up := time.Now()
	outage := up.Sub(down)
	if err := <-done; err != nil {
		b, _ := os.ReadFile(releaseLog)
		t.Fatalf("run: %v\n%s\nrelease log:\n%s", err, runOut, b)
	}
	report := fmt.Sprintf("ClickHouse down %s (release writes failed %d times during it, %d in all); "+
		"release done %s after ClickHouse returned",
		outage.Round(100*time.Millisecond), failedDuringOutage, countInFile(releaseLog, failed),
		time.Since(up).Round(100*time.Millisecond))
	// the release role logs "epoch released" after its write returns, which
	// can be just after the run saw the release in ClickHouse: wait (bounded)
	for deadline := time.Now().Add(60 * time.Second); countInFile(releaseLog, "epoch released") < 1 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if countInFile(releaseLog, "epoch released") != 1 {
		t.Fatalf("%s: the release role released %d times, want 1", report, countInFile(releaseLog, "epoch released"))
	}
	n := c.checkExport(ctx, input, out, policy, k, "outage", 4, report)
	t.Logf("%s; %d users, export of %d items byte-identical to the fault-free run and equal to the raw-log release", report, users, n)
}

// TestStalledAggregator SIGSTOPs the only aggregator for 30 s while reports
// are ingested (longer than its 20 s session timeout: the group evicts it and
// it rejoins on SIGCONT), logs the consumer lag that builds up in Kafka
// meanwhile, and requires the export to equal the raw-log release and,
// byte for byte, a fault-free run's: the stall delays, it loses and
// double-counts nothing. CROWDLOG_STALL (a Go duration) changes the stall.
func TestStalledAggregator(t *testing.T) {
	const users, k, policy = 100, 2, "ft-u"
	stall := 30 * time.Second
	if v, err := time.ParseDuration(os.Getenv("CROWDLOG_STALL")); err == nil && v > 0 {
		stall = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := newCluster(t, ctx, 4)
	c.keepOnFailure()
	input := subset(t, users)
	agg := c.startRoles(c.chd, c.chDir, policy, k)
	out := filepath.Join(c.dir, "out.tsv")
	t0 := time.Now()
	done, runOut := c.startRun(ctx, input, c.chd, policy, k, "stall", out)
	waitReportsFlowing(t, c.kafka, done)

	const group = "crowdlog-aggregator"
	lag := func() (int64, int64) {
		end, committed, err := groupOffsets(ctx, c.kafka, group, protocol.ReportsTopic)
		if err != nil {
			t.Logf("offsets: %v", err)
		}
		return end - committed, end
	}
	lag0, end0 := lag()
	if err := agg.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	cont := func() { agg.cmd.Process.Signal(syscall.SIGCONT) }
	t.Cleanup(cont)
	var maxLag int64
	for time.Since(stopped) < stall {
		l, _ := lag()
		maxLag = max(maxLag, l)
		time.Sleep(time.Second)
	}
	lagEnd, endStall := lag()
	maxLag = max(maxLag, lagEnd)
	cont()
	resumed := time.Now()
	// time until the aggregator has caught up with what arrived during the stall
	var caughtUp time.Duration
	for caughtUp == 0 && time.Since(resumed) < 5*time.Minute {
		end, committed, err := groupOffsets(ctx, c.kafka, group, protocol.ReportsTopic)
		if err == nil && committed >= endStall && end > 0 {
			caughtUp = time.Since(resumed)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := <-done; err != nil {
		b, _ := os.ReadFile(filepath.Join(c.logs, "aggregate.log"))
		t.Fatalf("run: %v\n%s\naggregator log:\n%s", err, runOut, b)
	}
	aggLog := filepath.Join(c.logs, "aggregate.log")
	report := fmt.Sprintf("aggregator stopped %s: Kafka lag %d reports before (of %d), %d at most during the stall (of %d produced), "+
		"caught up %s after SIGCONT; group assignments %d, partitions replayed %d; run took %s",
		stall, lag0, end0, maxLag, endStall, caughtUp.Round(100*time.Millisecond),
		countInFile(aggLog, "aggregator: assigned"), countInFile(aggLog, "partition state rebuilt"),
		time.Since(t0).Round(time.Second))
	if maxLag <= lag0 {
		t.Logf("note: the lag did not grow during the stall (ingest may have ended before it)")
	}
	n := c.checkExport(ctx, input, out, policy, k, "stall", 4, report)
	t.Logf("%s; %d users, export of %d items byte-identical to the fault-free run and equal to the raw-log release", report, users, n)
}
