package tests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// scaleParams are the scaling measurement's parameters, from the
// environment: CROWDLOG_SCALE_PROCS, the aggregator process counts to run
// (comma-separated, default "1,2"; 4 and 8 on a 16-core machine);
// CROWDLOG_SCALE_PARTITIONS, the reports topic's partition count (default
// 8, the `crowdlog run` default; at least the largest process count, or
// some processes idle); CROWDLOG_SCALE_MODES, which GOMAXPROCS settings
// ("1core", "allcores"; default both).
func scaleParams(t *testing.T) (procs []int, partitions int, modes []string) {
	t.Helper()
	procs = []int{1, 2}
	if v := os.Getenv("CROWDLOG_SCALE_PROCS"); v != "" {
		procs = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("CROWDLOG_SCALE_PROCS=%q: want process counts like 1,2,4,8", v)
			}
			procs = append(procs, n)
		}
	}
	partitions = 8
	if v := os.Getenv("CROWDLOG_SCALE_PARTITIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CROWDLOG_SCALE_PARTITIONS=%q: want a positive partition count", v)
		}
		partitions = n
	}
	modes = []string{"1core", "allcores"}
	if v := os.Getenv("CROWDLOG_SCALE_MODES"); v != "" {
		modes = nil
		for _, m := range strings.Split(v, ",") {
			if m != "1core" && m != "allcores" {
				t.Fatalf("CROWDLOG_SCALE_MODES=%q: want 1core and/or allcores", v)
			}
			modes = append(modes, m)
		}
	}
	return procs, partitions, modes
}

// TestScaleAggregators is the aggregator scaling measurement, not a test of
// correctness: it pre-loads topic "reports" (kfake with a data dir, 8
// partitions) with the sealed reports of the bundled log's first
// CROWDLOG_SCALE_USERS users (default 1000: all; FT_u k = 5, sealed in
// hash mode and wrapped in the aggregator's onion layer exactly as relay b
// writes it: value = that layer, key = onion.TagBucket(tag)), then
// measures the report throughput of 1, 2, … `crowdlog aggregate`
// processes (scaleParams: CROWDLOG_SCALE_PROCS, CROWDLOG_SCALE_PARTITIONS,
// CROWDLOG_SCALE_MODES; fresh consumer groups, until every offset is
// committed), once with GOMAXPROCS=1 per process and once with the
// default, prints the curve (one "scale-out curve" line per setting), and
// the time for partition state to move: with 2 processes and their state
// built, SIGKILL one (crash), start it again (join) and SIGTERM it
// (graceful leave), each time until the receiving process logged "partition
// state rebuilt" for every partition it took over. Skipped unless
// CROWDLOG_SCALE=1; results go to docs/benchmarks.md by hand.
//
//	CROWDLOG_SCALE=1 go test -count=1 -run TestScaleAggregators -v -timeout 30m ./tests
func TestScaleAggregators(t *testing.T) {
	if os.Getenv("CROWDLOG_SCALE") != "1" {
		t.Skip("scaling measurement: set CROWDLOG_SCALE=1")
	}
	users := 1000
	if v, err := strconv.Atoi(os.Getenv("CROWDLOG_SCALE_USERS")); err == nil && v > 0 {
		users = v
	}
	procCounts, scalePartitions, modes := scaleParams(t)
	const session = 6 * time.Second
	// CROWDLOG_SCALE_SNAPSHOT=N: the processes of a group share a snapshot
	// directory and snapshot every N messages (--snapshot-every), so moves
	// restore instead of replaying
	snapDir := t.TempDir()
	snapArgs := func(group string) []string {
		if v := os.Getenv("CROWDLOG_SCALE_SNAPSHOT"); v != "" {
			return []string{"--snapshot-dir", filepath.Join(snapDir, group), "--snapshot-every", v}
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	bin, dir := buildBinary(t), t.TempDir()
	kb, err := kafka.Start(ctx, filepath.Join(dir, "kafka"), scalePartitions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kb.Close)
	if err := kafka.EnsureTopics(ctx, kb.Addr, scalePartitions, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(dir, "keys")
	if out, err := exec.Command(bin, "keys", "generate", "--dir", keys).CombinedOutput(); err != nil {
		t.Fatalf("keys generate: %v %s", err, out)
	}
	_, _, ag, err := keydir.LoadRoute(keys)
	if err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(dir, "logs")
	os.MkdirAll(logs, 0o755)

	t0 := time.Now()
	// the aggregator keeps reports of opened epochs only: one open marker
	// per partition precedes the reports
	if err := aggregator.OpenEpoch(ctx, []string{kb.Addr}, nil, "query", "scale"); err != nil {
		t.Fatal(err)
	}
	n, err := preload(ctx, kb.Addr, subset(t, users), ag)
	if err != nil {
		t.Fatal(err)
	}
	n += int64(scalePartitions) // the topic's messages: reports and open markers
	if end, _, err := groupOffsets(ctx, kb.Addr, "none", protocol.ReportsTopic); err != nil || end != n {
		t.Fatalf("reports topic holds %d messages, wrote %d (%v)", end, n, err)
	}
	t.Logf("pre-loaded %d reports of %d users into %d partitions in %s", n, users, scalePartitions, time.Since(t0).Round(time.Second))

	// Two settings: "1 core each" (GOMAXPROCS=1 per process, so one process
	// uses one core and two use two: scale-out as on a cluster) and
	// "all cores" (the default: one process already runs its 8 partitions
	// on both cores).
	var running []*proc
	var runningGroup string
	for _, name := range modes {
		mode := struct{ name, gomaxprocs string }{name, ""}
		if name == "1core" {
			mode.gomaxprocs = "1"
		}
		t.Setenv("GOMAXPROCS", mode.gomaxprocs) // read by the children at start; "" = the default
		rates := map[int]float64{}
		for _, procs := range procCounts {
			group := fmt.Sprintf("scale-%s-%d", mode.name, procs)
			var ps []*proc
			var logPaths []string
			var self0 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
			busy0 := machineBusy()
			began := time.Now()
			for i := 0; i < procs; i++ {
				lp := filepath.Join(logs, fmt.Sprintf("%s-%d.log", group, i))
				logPaths = append(logPaths, lp)
				ps = append(ps, start(t, bin, lp, append([]string{"aggregate", "--kafka", kb.Addr, "--key", filepath.Join(keys, keydir.AggregatorKey),
					"--group", group, "--session-timeout", session.String()}, snapArgs(group)...)...))
			}
			m := watchCommits(ctx, t, kb.Addr, group, n)
			var cpu float64
			for _, p := range ps {
				cpu += procCPU(p.cmd.Process.Pid)
			}
			var self1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
			selfCPU := tv(self1.Utime) + tv(self1.Stime) - tv(self0.Utime) - tv(self0.Stime)
			wall := m.at100.Sub(began)
			others := machineBusy() - busy0 - cpu - selfCPU
			assigned := 0
			for _, lp := range logPaths {
				assigned += len(logEvents(lp, "aggregator: assigned", time.Time{}))
			}
			steady := m.at90.Sub(m.at10).Seconds()
			rates[procs] = 0.8 * float64(n) / steady
			t.Logf("%s, %d process(es): %d reports in %s from start (first commit after %s): %.0f reports/s overall, %.0f reports/s steady (10%%→90%% in %.1f s); "+
				"CPU: aggregators %.1f s = %.2f cores (%.0f µs/report), test process (kfake, poller) %.2f cores, other processes on the machine %.2f cores; %d group assignments",
				mode.name, procs, n, wall.Round(100*time.Millisecond), m.first.Sub(began).Round(100*time.Millisecond),
				float64(n)/wall.Seconds(), rates[procs], steady, cpu, cpu/wall.Seconds(), cpu/float64(n)*1e6,
				selfCPU/wall.Seconds(), max(others, 0)/wall.Seconds(), assigned)
			if mode.name == modes[len(modes)-1] && procs == 2 && procs == procCounts[len(procCounts)-1] {
				// the last run: kept for the partition moves below
				running, runningGroup = ps, group
				continue
			}
			for _, p := range ps {
				p.stop(syscall.SIGTERM)
			}
		}
		curve := ""
		for _, procs := range procCounts {
			curve += fmt.Sprintf(" %d:%.0f", procs, rates[procs])
			if r1, ok := rates[1]; ok && procs > 1 {
				curve += fmt.Sprintf("(%.2fx)", rates[procs]/r1)
			}
		}
		t.Logf("%s: scale-out curve, processes:reports/s steady (speed-up over 1 process), %d partitions, %d cores:%s",
			mode.name, scalePartitions, runtime.NumCPU(), curve)
	}
	if running == nil {
		// 2 processes with their state built, in a group of their own (a
		// curve that went on past 2 stopped its 2-process run, so that no
		// other processes compete with a later measurement)
		runningGroup = "scale-moves"
		for i := 0; i < 2; i++ {
			running = append(running, start(t, bin, filepath.Join(logs, fmt.Sprintf("%s-%d.log", runningGroup, i)), append([]string{"aggregate",
				"--kafka", kb.Addr, "--key", filepath.Join(keys, keydir.AggregatorKey), "--group", runningGroup, "--session-timeout", session.String()},
				snapArgs(runningGroup)...)...))
		}
		watchCommits(ctx, t, kb.Addr, runningGroup, n)
	}

	// partition moves, with both processes' state built
	a, b := running[0], running[1]
	aLog, bLog := filepath.Join(logs, runningGroup+"-0.log"), filepath.Join(logs, runningGroup+"-1.log")
	owned := func(lp string) []int {
		ev := logEvents(lp, "aggregator: assigned", time.Time{})
		if len(ev) == 0 {
			return nil
		}
		return ev[len(ev)-1].partitions
	}
	// move runs event and waits until the process logging to receiverLog
	// has been assigned partitions beyond prev (what it owned before) and
	// has rebuilt each of them by replay.
	move := func(what, receiverLog string, prev []int, event func()) {
		t.Helper()
		at := time.Now()
		event()
		had := map[int]bool{}
		for _, p := range prev {
			had[p] = true
		}
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			asg := logEvents(receiverLog, "aggregator: assigned", at)
			if len(asg) == 0 {
				continue
			}
			// the partitions new to the receiver in its last assignment,
			// and their rebuilds since then (not an earlier generation's)
			last := asg[len(asg)-1]
			isNew := map[int]bool{}
			for _, p := range last.partitions {
				if !had[p] {
					isNew[p] = true
				}
			}
			newOnly := func(evs []logEvent) []logEvent {
				var out []logEvent
				for _, e := range evs {
					if isNew[e.partition] {
						out = append(out, e)
					}
				}
				return out
			}
			want := len(isNew)
			rebuilt := newOnly(logEvents(receiverLog, "aggregator: partition state rebuilt", last.at))
			if want == 0 || len(rebuilt) < want {
				continue
			}
			starts := newOnly(logEvents(receiverLog, "aggregator: rebuilding partition state by replay", last.at))
			var replay time.Duration
			for _, r := range rebuilt {
				for _, s := range starts {
					if s.partition == r.partition {
						replay = max(replay, r.at.Sub(s.at))
					}
				}
			}
			t.Logf("partition move on %s: %d partitions (~%d reports each) resumed %s after the event: assigned after %s, longest replay %s",
				what, want, n/int64(scalePartitions), rebuilt[len(rebuilt)-1].at.Sub(at).Round(100*time.Millisecond),
				asg[0].at.Sub(at).Round(100*time.Millisecond), replay.Round(100*time.Millisecond))
			return
		}
		tail, _ := os.ReadFile(receiverLog)
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		t.Fatalf("%s: partitions not rebuilt within 3 min; the end of %s:\n%s", what, receiverLog, tail)
	}
	move("crash (SIGKILL, session timeout "+session.String()+")", aLog, owned(aLog), func() { b.stop(syscall.SIGKILL) })
	move("join (the killed process starts again)", bLog, nil, b.restart)
	move("graceful leave (SIGTERM)", aLog, owned(aLog), func() { b.stop(syscall.SIGTERM) })
	a.stop(syscall.SIGTERM)
}

// preload seals the log's reports (FT_u, k = 5, epoch "scale", ω in hash
// mode: the aggregator's work does not depend on where ω came from), wraps
// each in the aggregator's onion layer and writes them to topic reports the
// way relay b does. It returns the number written.
func preload(ctx context.Context, addr, input string, ag onion.PublicKey) (int64, error) {
	app, err := apps.Lookup("query")
	if err != nil {
		return 0, err
	}
	w := &kafkago.Writer{Addr: kafkago.TCP(addr), Topic: protocol.ReportsTopic, Transport: &kafkago.Transport{},
		Balancer: &kafkago.Hash{}, RequiredAcks: kafkago.RequireAll, BatchTimeout: 5 * time.Millisecond,
		BatchSize: 10000, BatchBytes: 64 << 20}
	defer kafka.CloseWriter(w)
	jobs := make(chan aol.User, 4)
	var mu sync.Mutex
	var n int64
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < 2; i++ {
		g.Go(func() error {
			sealings := map[string]*star.Sealing{}
			for u := range jobs {
				secret, err := star.NewUserSecret()
				if err != nil {
					return err
				}
				var msgs []kafkago.Message
				for _, a := range app.Mine(u.Records) {
					s := sealings[a.Primary]
					if s == nil {
						d, err := star.DeriveSealing(star.LocalOmega(app.Name(), "scale", a.Primary), app.Name(), "scale", star.FTu, 5)
						if err != nil {
							return err
						}
						s = &d
						sealings[a.Primary] = s
					}
					r, err := s.Seal(&secret, a.Primary, a.Secondary)
					if err != nil {
						return err
					}
					b, err := r.MarshalBinary()
					if err != nil {
						return err
					}
					layer, err := onion.SealLayer(ag, onion.Hop{Kind: onion.HopDeliver}, b)
					if err != nil {
						return err
					}
					msgs = append(msgs, kafkago.Message{Key: onion.TagBucket(r.Tag), Value: layer})
				}
				if err := w.WriteMessages(gctx, msgs...); err != nil {
					return err
				}
				mu.Lock()
				n += int64(len(msgs))
				mu.Unlock()
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(jobs)
		_, err := aol.ReadUsers(input, func(u aol.User) error {
			select {
			case jobs <- u:
				return nil
			case <-gctx.Done():
				return gctx.Err()
			}
		})
		return err
	})
	err = g.Wait()
	return n, err
}

// commitMarks are the times a group's committed offsets first passed 10%,
// 90% and 100% of the reports, and its first commit.
type commitMarks struct{ first, at10, at90, at100 time.Time }

// watchCommits polls the group's committed offsets every 100 ms until they
// reach n.
func watchCommits(ctx context.Context, t *testing.T, addr, group string, n int64) commitMarks {
	t.Helper()
	var m commitMarks
	deadline := time.Now().Add(20 * time.Minute)
	for time.Now().Before(deadline) {
		_, c, err := groupOffsets(ctx, addr, group, protocol.ReportsTopic)
		now := time.Now()
		if err == nil {
			if c > 0 && m.first.IsZero() {
				m.first = now
			}
			if c*10 >= n && m.at10.IsZero() {
				m.at10 = now
			}
			if c*10 >= 9*n && m.at90.IsZero() {
				m.at90 = now
			}
			if c >= n {
				m.at100 = now
				return m
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("group %s did not commit all %d reports in 20 min", group, n)
	return m
}

// procCPU returns the user+system CPU seconds of a running process from
// /proc/PID/stat (clock ticks of 1/100 s, the Linux USER_HZ).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// fields after the command: state(0) ... utime(11) stime(12)
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// machineBusy returns the CPU seconds all cores spent busy since boot
// (/proc/stat: everything but idle and iowait, in 1/100 s).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy float64
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		if i != 3 && i != 4 && i < 7 { // not idle, iowait, steal; guest time is already in user
			busy += v
		}
	}
	return busy / 100
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// logEvent is one slog text line of a role's log.
type logEvent struct {
	at         time.Time
	partition  int
	partitions []int
}

// logEvents returns the lines of the slog text log at path whose msg is msg
// and whose time is not before since.
func logEvents(path, msg string, since time.Time) []logEvent {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []logEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.Contains(l, `msg="`+msg+`"`) || !strings.HasPrefix(l, "time=") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.Before(since) {
			continue
		}
		e := logEvent{at: at, partition: -1}
		if _, v, ok := strings.Cut(l, " partition="); ok {
			v, _, _ = strings.Cut(v, " ")
			e.partition, _ = strconv.Atoi(v)
		}
		// slog quotes a list of two or more: partitions="[0 1]", partitions=[1]
		if _, v, ok := strings.Cut(strings.Replace(l, ` partitions="[`, ` partitions=[`, 1), ` partitions=[`); ok {
			v, _, _ = strings.Cut(v, "]")
			for _, s := range strings.Fields(v) {
				p, _ := strconv.Atoi(s)
				e.partitions = append(e.partitions, p)
			}
		}
		out = append(out, e)
	}
	return out
}
