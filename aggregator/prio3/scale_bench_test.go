package prio3

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	ikafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// scaleChild is what BenchmarkPrio3Scale hands an aggregator process.
type scaleChild struct {
	Role     string // "leader" or "helper"
	Brokers  []string
	NATS     string
	StateDir string
	KeysDir  string // leader.key, helper.key, collector.pub, sign.seed
	Clock    string // file: the aggregators' clock, unix nanoseconds
	Progress string // file the child writes its counters to, every 200 ms
	Length   int
	MinBatch uint64
	StepFill time.Duration // LeaderService.StepFill
}

// The keys directory's token seeds: each aggregator checks its own
// operator's report tokens (Config.LeaderTokenSeed, Config.TokenSeed), as
// `crowdlog aggregate-prio3` does by default.
const (
	scaleLeaderSeed = "leader-token.seed"
	scaleHelperSeed = "helper-token.seed"
)

// scaleProgress is a child's counters.
type scaleProgress struct {
	Uploads, Prepared, Collected uint64
	Rejected                     map[string]uint64
	Written                      int64 // bytes to the state directory (batch logs and snapshots)
	WriteBytes                   int64 // /proc/self/io write_bytes
	HWMKB                        int64 // /proc/self/status VmHWM: peak RSS of this process's own memory, KiB
	Shares                       int64
	// Applied (leader): LeaderService.Applied, the offsets below which
	// the benchmark may delete the uploads topic's records
	Applied map[int]int64 `json:",omitempty"`
}

func scaleConfig(c *scaleChild) (Config, error) {
	var vk [32]byte
	copy(vk[:], "a verify key of thirty-two bytes")
	role := c.Role
	kp, err := onion.LoadKeyPair(filepath.Join(c.KeysDir, role+".key"))
	if err != nil {
		return Config{}, err
	}
	col, err := onion.LoadPublicKey(filepath.Join(c.KeysDir, "collector.key.pub"))
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Campaign: campaign, Measurement: p3.Config{Kind: p3.KindSumVec, Length: c.Length, Bits: 4}, KeyEpoch: 1,
		VerifyKeys: map[uint32][32]byte{1: vk}, Grace: time.Hour, MinBatchSize: c.MinBatch, Keys: []*onion.KeyPair{kp}, Collector: col}
	if role == "leader" {
		cfg.LeaderTokenSeed, err = os.ReadFile(filepath.Join(c.KeysDir, scaleLeaderSeed))
	} else {
		cfg.TokenSeed, err = os.ReadFile(filepath.Join(c.KeysDir, scaleHelperSeed))
	}
	return cfg, err
}

// mint returns a token of kind for r, issued under seed's key for r's
// campaign-day (the client's blinding, the issuer's evaluation and proof,
// the client's finalization: protocol/token), bound to r's nonce.
func mint(kind token.Kind, seed []byte, r *p3.Report) ([]byte, error) {
	k, err := token.DeriveKey(kind, token.Prio3Epoch(r.Campaign, uint32(r.Day)), seed)
	if err != nil {
		return nil, err
	}
	p, blinded, err := token.NewRequest(k.Public(), kind, k.Epoch(), [][32]byte{r.HelperNonce()})
	if err != nil {
		return nil, err
	}
	ev, proof, err := k.Issue(blinded)
	if err != nil {
		return nil, err
	}
	toks, err := p.Finalize(ev, proof)
	if err != nil {
		return nil, err
	}
	return toks[0].MarshalBinary()
}

// procHWM returns the process's peak RSS (VmHWM) in KiB. Not the child's
// getrusage ru_maxrss: Linux carries the parent's peak RSS into a child
// forked with CLONE_VM (Go's os/exec) at exec, so a child started by a
// large benchmark process reports the parent's peak.
func procHWM() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}

func procWriteBytes() int64 {
	b, _ := os.ReadFile("/proc/self/io")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// TestPrio3ScaleChild is one aggregator process of BenchmarkPrio3Scale
// (CROWDLOG_PRIO3_SCALE_CHILD names its JSON configuration); skipped
// otherwise.
func TestPrio3ScaleChild(t *testing.T) {
	path := os.Getenv("CROWDLOG_PRIO3_SCALE_CHILD")
	if path == "" {
		t.Skip("the scale benchmark's aggregator process (BenchmarkPrio3Scale)")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c scaleChild
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	cfg, err := scaleConfig(&c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	nc, err := nats.Connect(c.NATS)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	now := func() time.Time {
		b, _ := os.ReadFile(c.Clock)
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Unix(0, n).UTC()
	}
	seed, err := os.ReadFile(filepath.Join(c.KeysDir, "sign.seed"))
	if err != nil {
		t.Fatal(err)
	}
	sign := ed25519.NewKeyFromSeed(seed)
	var stats func() Stats
	var written func() int64
	shares := func() int64 { return 0 }
	applied := func() map[int]int64 { return nil }
	var run func(context.Context) error
	if c.Role == "leader" {
		l := &LeaderService{Config: cfg, Brokers: c.Brokers, NATS: nc, StateDir: c.StateDir, Now: now, SignKey: sign,
			RequestTimeout: 30 * time.Second, CollectRetry: 200 * time.Millisecond, StepFill: c.StepFill}
		stats, written, run, shares, applied = l.Stats, l.Written, l.Run, l.Shares.Load, l.Applied
	} else {
		h := &HelperService{Config: cfg, NATS: nc, StateDir: c.StateDir, Now: now, LeaderKey: sign.Public().(ed25519.PublicKey)}
		stats, written, run = h.Stats, h.Written, h.Run
	}
	report := func() {
		s := stats()
		p := scaleProgress{Uploads: s.Uploads, Prepared: s.Prepared, Collected: s.Collected, Rejected: s.Rejected,
			Written: written(), WriteBytes: procWriteBytes(), HWMKB: procHWM(), Shares: shares(), Applied: applied()}
		b, _ := json.Marshal(p)
		tmp := c.Progress + ".tmp"
		if os.WriteFile(tmp, b, 0o600) == nil {
			os.Rename(tmp, c.Progress)
		}
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			report()
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-tick.C:
			report()
		}
	}
}

// BenchmarkPrio3Scale runs the leader and the helper services as two
// processes of their own (this test binary, TestPrio3ScaleChild) against
// an embedded NATS server and kfake broker in this process, for each size
// n in CROWDLOG_PRIO3_SCALE_SIZES (default 1000): n uploads of one day
// (SumVec, L = CROWDLOG_PRIO3_L, default 10,000, b = 4, ten keywords per
// client), sharded and sealed here (the client's CPU is this process's,
// not the aggregators'), then the day closed and collected, and the
// collector's unsharded totals compared with the clients' sums computed
// here. CROWDLOG_PRIO3_SCALE_RATE (uploads a second) paces the clients
// instead, each upload written as it is sealed; CROWDLOG_PRIO3_SCALE_FILL
// is the leader's StepFill (a duration; negative: none). The uploads the
// leader's snapshots passed (LeaderService.Applied) are deleted from the
// broker as the run goes (Kafka DeleteRecords), so its disk holds the
// leader's lag, not n uploads (kafka_peak_mb). Every upload carries a
// leader and a helper token, minted here, checked by each aggregator.
// It prints per size
//
//	PRIO3SCALE n=… L=… rate=… step_fill=… tokens=on leader_cpu_s=… helper_cpu_s=… leader_ups_core=… helper_ups_core=… leader_rss_mb=… helper_rss_mb=… leader_disk_b_upload=… helper_disk_b_upload=… leader_io_b_upload=… helper_io_b_upload=… kafka_peak_mb=… uploads_deleted=… collect_s=… seal_wall_s=… prep_wall_s=… correct=…
//
// uploads/s per core are n over the process's CPU time (getrusage of the
// child: user + system), RSS its peak (VmHWM, written by the child as it
// stops; procHWM says why not ru_maxrss), disk bytes the bytes
// it wrote to its state directory (batch logs and snapshots) per upload,
// collect_s the wall time from the day's close on the aggregators' clock
// to the collector's unsharded result.
func BenchmarkPrio3Scale(b *testing.B) {
	sizes := []int{1000}
	if s := os.Getenv("CROWDLOG_PRIO3_SCALE_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("CROWDLOG_PRIO3_SCALE_SIZES: %q", s)
			}
			sizes = append(sizes, n)
		}
	}
	rate := 0.0
	if s := os.Getenv("CROWDLOG_PRIO3_SCALE_RATE"); s != "" {
		var err error
		if rate, err = strconv.ParseFloat(s, 64); err != nil || rate < 0 {
			b.Fatalf("CROWDLOG_PRIO3_SCALE_RATE: %q (uploads a second)", s)
		}
	}
	fill := time.Duration(0)
	if s := os.Getenv("CROWDLOG_PRIO3_SCALE_FILL"); s != "" {
		var err error
		if fill, err = time.ParseDuration(s); err != nil {
			b.Fatalf("CROWDLOG_PRIO3_SCALE_FILL: %q (a duration; negative: no fill)", s)
		}
	}
	for i := 0; i < b.N; i++ {
		for _, n := range sizes {
			scaleRun(b, n, benchLength(), rate, fill)
		}
	}
}

// scaleRun: rate > 0 paces the clients' uploads at rate a second (each
// written as it is sealed) instead of as fast as they are sealed; fill is
// the leader's StepFill.
func scaleRun(b *testing.B, n, length int, rate float64, fill time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Hour)
	defer cancel()
	dir := b.TempDir()
	ns, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Shutdown()
	br, err := (ikafka.Config{Dir: filepath.Join(dir, "kafka"), Partitions: 4}).Start(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if err := ikafka.EnsureTopics(ctx, br.Addr, 4, protocol.Prio3UploadsTopic, protocol.Prio3SharesTopic); err != nil {
		b.Fatal(err)
	}
	if err := ikafka.EnsureMaxMessageBytes(ctx, br.Addr, ikafka.TopicMaxMessageBytes, protocol.Prio3UploadsTopic, protocol.Prio3SharesTopic); err != nil {
		b.Fatal(err)
	}
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4}
	w := newWorld(b, m, 100)
	keys := filepath.Join(dir, "keys")
	os.MkdirAll(keys, 0o700)
	for name, k := range map[string]*onion.KeyPair{"leader": w.lk, "helper": w.hk, "collector": w.ck} {
		if err := onion.SaveKeyPair(filepath.Join(keys, name+".key"), name, k); err != nil {
			b.Fatal(err)
		}
	}
	seed := make([]byte, ed25519.SeedSize)
	copy(seed, "the scale benchmark's sign seed.")
	os.WriteFile(filepath.Join(keys, "sign.seed"), seed, 0o600)
	leaderSeed, helperSeed := newSeed(b), newSeed(b)
	os.WriteFile(filepath.Join(keys, scaleLeaderSeed), leaderSeed, 0o600)
	os.WriteFile(filepath.Join(keys, scaleHelperSeed), helperSeed, 0o600)
	day := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	clock := filepath.Join(dir, "clock")
	setClock := func(t time.Time) { os.WriteFile(clock, []byte(strconv.FormatInt(t.UnixNano(), 10)), 0o600) }
	setClock(day.Start().Add(12 * time.Hour))
	type child struct {
		cmd      *exec.Cmd
		progress string
	}
	start := func(role string) *child {
		c := scaleChild{Role: role, Brokers: []string{br.Addr}, NATS: ns.URL, StateDir: filepath.Join(dir, role), KeysDir: keys,
			Clock: clock, Progress: filepath.Join(dir, role+".progress"), Length: length, MinBatch: 100, StepFill: fill}
		js, _ := json.Marshal(c)
		cfgPath := filepath.Join(dir, role+".json")
		os.WriteFile(cfgPath, js, 0o600)
		cmd := exec.Command(os.Args[0], "-test.run", "^TestPrio3ScaleChild$", "-test.timeout", "5h")
		cmd.Env = append(os.Environ(), "CROWDLOG_PRIO3_SCALE_CHILD="+cfgPath)
		logf, _ := os.Create(filepath.Join(dir, role+".log"))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		return &child{cmd: cmd, progress: c.Progress}
	}
	read := func(c *child) scaleProgress {
		var p scaleProgress
		if b, err := os.ReadFile(c.progress); err == nil {
			json.Unmarshal(b, &p)
		}
		return p
	}
	helper := start("helper")
	time.Sleep(time.Second)
	leader := start("leader")
	defer func() {
		for _, c := range []*child{leader, helper} {
			if c.cmd.ProcessState == nil {
				c.cmd.Process.Kill()
				c.cmd.Wait()
			}
		}
	}()

	// clients: ten keywords each, counts 1..3 (the truth is their sum);
	// kept as (keyword, count) pairs, 160 B a client, and expanded to an
	// L-entry vector only when sharded (n vectors would be 8·L·n bytes:
	// 8 GB at 100,000 uploads)
	type pick struct {
		j int
		x uint64
	}
	want := make([]int64, length)
	picks := make([][10]pick, n)
	rng := rand.New(rand.NewPCG(uint64(n), 49))
	for i := range picks {
		for k := range 10 {
			j := rng.IntN(length)
			x := 1 + rng.Uint64N(3)
			picks[i][k] = pick{j, x}
			want[j] += int64(x)
		}
	}
	// delete the uploads the leader no longer needs, as its snapshots pass
	// them (LeaderService.Applied; Kafka DeleteRecords), and keep the
	// broker's peak data-directory size: without it 100,000 uploads are
	// 66 GB of broker disk
	trimCtx, stopTrim := context.WithCancel(ctx)
	var trimmed, peakKafka atomic.Int64
	var trimWG sync.WaitGroup
	trimWG.Go(func() {
		kc, err := kgo.NewClient(kgo.SeedBrokers(br.Addr))
		if err != nil {
			b.Error(err)
			return
		}
		defer kc.Close()
		done := map[int]int64{}
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			if sz := dirSize(filepath.Join(dir, "kafka")); sz > peakKafka.Load() {
				peakKafka.Store(sz)
			}
			req := kmsg.NewPtrDeleteRecordsRequest()
			req.TimeoutMillis = 10_000
			rt := kmsg.NewDeleteRecordsRequestTopic()
			rt.Topic = protocol.Prio3UploadsTopic
			for part, off := range read(leader).Applied {
				if off > done[part] {
					rp := kmsg.NewDeleteRecordsRequestTopicPartition()
					rp.Partition, rp.Offset = int32(part), off
					rt.Partitions = append(rt.Partitions, rp)
				}
			}
			if len(rt.Partitions) > 0 {
				req.Topics = append(req.Topics, rt)
				rctx, cancel := context.WithTimeout(trimCtx, 15*time.Second)
				resp, err := req.RequestWith(rctx, kc)
				cancel()
				if err == nil {
					for _, t := range resp.Topics {
						for _, p := range t.Partitions {
							if p.ErrorCode == 0 {
								trimmed.Add(p.LowWatermark - done[int(p.Partition)])
								done[int(p.Partition)] = p.LowWatermark
							}
						}
					}
				}
			}
			select {
			case <-trimCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	defer trimWG.Wait()
	defer stopTrim()
	// shard and write as they come (2 goroutines per core; the
	// aggregators read meanwhile)
	t0 := time.Now()
	wr := ikafka.NewWriter(br.Addr, protocol.Prio3UploadsTopic)
	wr.BatchBytes = 2_000_000 // the topic's max.message.bytes is 2 MiB (infra/kafka)
	next := make(chan int)
	var wg sync.WaitGroup
	var werr error
	var mu sync.Mutex
	for range 2 * runtime.GOMAXPROCS(0) { // 2 per core: one seals while the other waits on its write
		v, err := p3.New(campaign, m)
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			var msgs []kafka.Message
			flush := func() {
				if len(msgs) > 0 {
					if err := wr.WriteMessages(ctx, msgs...); err != nil {
						mu.Lock()
						werr = err
						mu.Unlock()
					}
					msgs = msgs[:0]
				}
			}
			for i := range next {
				vec := make([]uint64, length)
				for _, p := range picks[i] {
					vec[p.j] += p.x
				}
				// the client's whole path: shard, a token from each
				// operator's issuer bound to the report, seal
				r, _, err := v.ShardReport(campaign, day, vec, w.hk.PublicKey())
				if err == nil {
					r.HelperToken, err = mint(token.KindPrio3Helper, helperSeed, r)
				}
				if err == nil {
					r.LeaderToken, err = mint(token.KindPrio3Leader, leaderSeed, r)
				}
				var up []byte
				if err == nil {
					up, err = r.Seal(w.lk.PublicKey())
				}
				if err != nil {
					mu.Lock()
					werr = err
					mu.Unlock()
					continue
				}
				msgs = append(msgs, kafka.Message{Key: []byte(campaign), Value: up})
				if len(msgs) == 2 || rate > 0 {
					flush()
				}
			}
			flush()
		})
	}
	var pace *time.Ticker
	if rate > 0 {
		pace = time.NewTicker(time.Duration(float64(time.Second) / rate))
	}
	for i := range n {
		if pace != nil {
			<-pace.C
		}
		next <- i
	}
	close(next)
	if pace != nil {
		pace.Stop()
	}
	wg.Wait()
	wr.Close()
	if werr != nil {
		b.Fatal(werr)
	}
	sealed := time.Since(t0)
	deadline := time.Now().Add(4 * time.Hour)
	for {
		p := read(leader)
		rejected := uint64(0)
		for _, v := range p.Rejected {
			rejected += v
		}
		if p.Prepared+rejected >= uint64(n) {
			if rejected > 0 {
				b.Fatalf("leader rejected %v", p.Rejected)
			}
			break
		}
		if leader.cmd.ProcessState != nil || time.Now().After(deadline) {
			b.Fatalf("leader stopped or too slow: %+v", p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	prepWall := time.Since(t0)
	// close the day; the leader collects and writes both shares
	tc := time.Now()
	setClock(day.Start().Add(24*time.Hour + time.Hour + time.Minute))
	var got [][]byte
	for len(got) < 2 && time.Since(tc) < 10*time.Minute {
		got = nil
		for p := range 4 {
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{br.Addr}, Topic: protocol.Prio3SharesTopic, Partition: p, MaxWait: 50 * time.Millisecond})
			for {
				rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				msg, err := r.FetchMessage(rctx)
				cancel()
				if err != nil {
					break
				}
				got = append(got, msg.Value)
			}
			r.Close()
		}
	}
	if len(got) != 2 {
		b.Fatalf("%d shares after 10 minutes", len(got))
	}
	var lead, help []byte
	for _, msg := range got {
		if a, err := p3.ParseAggShare(msg); err == nil && a.Role == 0 {
			lead = msg
		} else {
			help = msg
		}
	}
	res, err := w.c.Unshard(lead, help)
	if err != nil {
		b.Fatal(err)
	}
	collect := time.Since(tc)
	correct := res.Count == uint64(n)
	for j := range want {
		if res.Totals[j] != want[j] {
			correct = false
		}
	}
	// stop both, read their rusage
	time.Sleep(500 * time.Millisecond)
	type usage struct {
		cpu   float64
		rssMB float64
		p     scaleProgress
	}
	stop := func(c *child) usage {
		c.cmd.Process.Signal(syscall.SIGTERM)
		c.cmd.Wait()
		ru := c.cmd.ProcessState.SysUsage().(*syscall.Rusage)
		p := read(c)
		return usage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(), rssMB: float64(p.HWMKB) / 1024, p: p}
	}
	lu, hu := stop(leader), stop(helper)
	stopTrim()
	trimWG.Wait()
	fmt.Printf("PRIO3SCALE n=%d L=%d rate=%g step_fill=%s tokens=on leader_cpu_s=%.1f helper_cpu_s=%.1f leader_ups_core=%.1f helper_ups_core=%.1f leader_rss_mb=%.0f helper_rss_mb=%.0f leader_disk_b_upload=%.0f helper_disk_b_upload=%.0f leader_io_b_upload=%.0f helper_io_b_upload=%.0f kafka_peak_mb=%.0f uploads_deleted=%d collect_s=%.2f seal_wall_s=%.1f prep_wall_s=%.1f correct=%v\n",
		n, length, rate, fillName(fill), lu.cpu, hu.cpu, float64(n)/lu.cpu, float64(n)/hu.cpu, lu.rssMB, hu.rssMB,
		float64(lu.p.Written)/float64(n), float64(hu.p.Written)/float64(n),
		float64(lu.p.WriteBytes)/float64(n), float64(hu.p.WriteBytes)/float64(n),
		float64(peakKafka.Load())/(1<<20), trimmed.Load(),
		collect.Seconds(), sealed.Seconds(), prepWall.Seconds(), correct)
	if !correct {
		b.Errorf("n=%d: the collector's totals differ from the clients' sums (count %d)", n, res.Count)
	}
}

// dirSize is the bytes of the regular files under dir (0 where it cannot
// be read: the broker may delete a segment while it is walked).
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func fillName(d time.Duration) string {
	if d == 0 {
		return DefaultStepFill.String()
	}
	if d < 0 {
		return "off"
	}
	return d.String()
}
