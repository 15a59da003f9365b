package aggregator

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/profile"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/protocol/token/tokentest"
)

// boundChildEnv carries "broker,keyfile,reports" to the child process of
// BenchmarkBoundAggregatorService (TestBoundServiceChild).
const boundChildEnv = "CROWDLOG_BOUND_AGGREGATOR_CHILD"

// envInt is the positive integer in environment variable name, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkBoundAggregatorService is the aggregator-service line of `make
// bench-bounds`: the reports/s per core of the aggregator service (New,
// Service.Run: consume, Peel, verify, recover, produce, commit) over Kafka.
// Before the timer it starts kfake (8 partitions, the `crowdlog run`
// default), opens epoch "bound" of app query and produces the query reports
// (FT_u, k = 5; ω in hash mode) of the bundled log's first
// CROWDLOG_BOUND_USERS users (default 200), each wrapped in the
// aggregator's onion layer (512 B) and keyed as relay b keys them. Timed:
// one child process (this test binary running TestBoundServiceChild, so
// kfake's CPU is not counted) runs the service in a fresh consumer group
// until it has committed every report, then exits. Metrics: cpu-ns/report
// is the child's user+system CPU time (wait4 rusage) per report,
// reports/s the wall-clock rate, kfake-cpu-ns/report this process's CPU
// time meanwhile (kfake serving the child, on the same cores); the
// child's GOMAXPROCS is the default.
// Run with -benchtime 1x: one pass is the measurement. With
// CROWDLOG_BOUND_CPUPROFILE=FILE the child writes its CPU profile there.
func BenchmarkBoundAggregatorService(b *testing.B) { boundService(b, "off") }

// BenchmarkBoundAggregatorServiceTokens is BenchmarkBoundAggregatorService
// with report tokens: every report carries a report token bound
// to it, minted under the epoch's report-token key of a keys directory
// (keydir.EnsureIssuerKeys), and the child's service has ReportKeys set
// (keydir.LoadTokenKey), as `crowdlog run` sets them. Compare its
// reports/s and cpu-ns/report with BenchmarkBoundAggregatorService's.
func BenchmarkBoundAggregatorServiceTokens(b *testing.B) { boundService(b, "tokens") }

// BenchmarkBoundAggregatorServiceARC is BenchmarkBoundAggregatorService
// with report tokens and FT_u through ARC: each user holds one
// ARC credential and makes one presentation per artifact, which all its
// reports of that artifact carry (as ingest does); each report is sealed
// at the x of its presentation's tag (star.SealARC) and pays a report
// token; the child's service has ReportKeys and ARCKeys set.
func BenchmarkBoundAggregatorServiceARC(b *testing.B) { boundService(b, "arc") }

// BenchmarkBoundAggregatorServiceARCArrival is
// BenchmarkBoundAggregatorServiceARC with Service.VerifyOnArrival: every
// report's token and presentation verified when it arrives (on the
// Prepare pool), not when its group reaches k candidate shares.
func BenchmarkBoundAggregatorServiceARCArrival(b *testing.B) { boundService(b, "arc-arrival") }

// boundService runs the aggregator-service bound with tokens "off",
// "tokens" (report tokens), "arc" (report tokens and ARC presentations)
// or "arc-arrival" (the same, verified on arrival).
func boundService(b *testing.B, mode string) {
	users := envInt("CROWDLOG_BOUND_USERS", 200)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir := b.TempDir()
	const partitions = 8
	kb, err := infrakafka.Start(ctx, filepath.Join(dir, "kafka"), partitions)
	if err != nil {
		b.Fatal(err)
	}
	defer kb.Close()
	if err := infrakafka.EnsureTopics(ctx, kb.Addr, partitions, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		b.Fatal(err)
	}
	gen, err := onion.GenerateKeyPair(1)
	if err != nil {
		b.Fatal(err)
	}
	keyPath := filepath.Join(dir, "aggregator.key")
	if err := onion.SaveKeyPair(keyPath, "aggregator", gen); err != nil {
		b.Fatal(err)
	}
	key, err := onion.LoadKeyPair(keyPath) // with its role, as the service loads it
	if err != nil {
		b.Fatal(err)
	}
	if err := OpenEpoch(ctx, []string{kb.Addr}, nil, "query", "bound"); err != nil {
		b.Fatal(err)
	}
	keysDir := filepath.Join(dir, "keys")
	if err := keydir.EnsureIssuerKeys(keysDir, "bound"); err != nil {
		b.Fatal(err)
	}
	msgs := boundReports(b, users, key.PublicKey(), keysDir, mode)
	opens := openingShare(b, users, 5)
	w := infrakafka.NewWriter(kb.Addr, protocol.ReportsTopic)
	w.BatchSize, w.BatchBytes = 10000, 1_000_000 // below Kafka's default max.message.bytes
	for i := 0; i < len(msgs); i += 10000 {
		if err := w.WriteMessages(ctx, msgs[i:min(i+10000, len(msgs))]...); err != nil {
			b.Fatal(err)
		}
	}
	w.Close()
	n := len(msgs)

	b.ResetTimer()
	for b.Loop() {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBoundServiceChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d,%s,%s", boundChildEnv, kb.Addr, keyPath, n, keysDir, mode))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		began, parent := time.Now(), processCPU(b)
		if err := cmd.Run(); err != nil {
			b.Fatalf("aggregator child: %v\n%s", err, out.String())
		}
		wall, kfake := time.Since(began), processCPU(b)-parent
		if !strings.Contains(out.String(), fmt.Sprintf("BOUNDCHILD reports=%d dropped=0", n)) {
			b.Fatalf("aggregator child did not apply all %d reports without drops:\n%s", n, out.String())
		}
		cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		b.ReportMetric(float64(n), "reports")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/report")
		b.ReportMetric(float64(n)/wall.Seconds(), "reports/s")
		b.ReportMetric(float64(kfake)/float64(n), "kfake-cpu-ns/report")
		b.ReportMetric(opens, "opening-fraction")
	}
}

// boundReports seals the query reports of the bundled log's first users
// users (FT_u, k = 5, epoch "bound", ω in hash mode) on GOMAXPROCS
// goroutines and wraps each in the aggregator layer for agg, keyed by
// onion.TagBucket as relay b produces them.
//
// With mode "tokens" or "arc" each report pays a report token of keysDir's
// key of epoch "bound" (minted per user, one batch); with "arc" each user
// gets one ARC credential under keysDir's ARC key and presents it once per
// artifact, and its reports are sealed at the presentation tag's x.
func boundReports(b *testing.B, users int, agg onion.PublicKey, keysDir, mode string) []kafkago.Message {
	var reportKey *token.PrivateKey
	var arcKey *arc.PrivateKey
	if mode != "off" {
		var err error
		if reportKey, err = keydir.LoadTokenKey(keysDir, token.KindReport, "bound"); err != nil {
			b.Fatal(err)
		}
		if arcKey, err = keydir.LoadARCKey(keysDir, "bound"); err != nil {
			b.Fatal(err)
		}
	}
	var us []aol.User
	_, err := aol.ReadUsers("../testdata/aol-top1000.tsv.gz", func(u aol.User) error {
		if len(us) < users {
			us = append(us, u)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	out := make([][]kafkago.Message, len(us))
	var wg sync.WaitGroup
	var next sync.Mutex
	i := 0
	var failed error
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sealings := map[string]star.Sealing{}
			for {
				next.Lock()
				j := i
				i++
				next.Unlock()
				if j >= len(us) {
					return
				}
				sec, err := star.NewUserSecret()
				if err != nil {
					failed = err
					return
				}
				var cred *arc.Credential
				if strings.HasPrefix(mode, "arc") {
					cred = credential(b, arcKey)
				}
				type presented struct{ pres, tag []byte }
				mine := map[string]presented{}
				var rs []*star.Report
				for _, a := range (apps.QueryApp{}).Mine(us[j].Records) {
					s, ok := sealings[a.Primary]
					if !ok {
						if s, err = star.DeriveSealing(star.LocalOmega("query", "bound", a.Primary), "query", "bound", star.FTu, 5); err != nil {
							failed = err
							return
						}
						sealings[a.Primary] = s
					}
					var r *star.Report
					if strings.HasPrefix(mode, "arc") {
						p, ok := mine[a.Primary]
						if !ok {
							p.pres, p.tag = present(b, cred, &s)
							mine[a.Primary] = p
						}
						if r, err = s.SealARC(p.tag, a.Primary, a.Secondary); err == nil {
							r.Presentation = p.pres
						}
					} else {
						r, err = s.Seal(&sec, a.Primary, a.Secondary)
					}
					if err != nil {
						failed = err
						return
					}
					rs = append(rs, r)
				}
				if reportKey != nil && len(rs) > 0 {
					nonces := make([][32]byte, len(rs))
					for i, r := range rs {
						u, _ := r.UnsignedBytes()
						nonces[i] = token.ReportNonce(u)
					}
					for i, t := range mint(b, reportKey, nonces...) {
						rs[i].Token, _ = t.MarshalBinary()
					}
				}
				for _, r := range rs {
					raw, err := r.MarshalBinary()
					if err != nil {
						failed = err
						return
					}
					layer, err := onion.SealLayer(agg, onion.Hop{Kind: onion.HopDeliver}, raw)
					if err != nil {
						failed = err
						return
					}
					out[j] = append(out[j], kafkago.Message{Key: onion.TagBucket(r.Tag), Value: layer})
				}
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
	var all []kafkago.Message
	for _, m := range out {
		all = append(all, m...)
	}
	return all
}

// openingShare is the fraction of the first users' reports of the bundled
// log (the query app's artifacts, as boundReports seals them) whose
// artifact has at least k distinct users among them: the reports whose
// group ever reaches k, so the ones verification at the threshold checks.
// Computed from the raw log, independently of the aggregator.
func openingShare(b *testing.B, users, k int) float64 {
	var us []aol.User
	if _, err := aol.ReadUsers("../testdata/aol-top1000.tsv.gz", func(u aol.User) error {
		if len(us) < users {
			us = append(us, u)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	who := map[string]map[int]bool{}
	reports := map[string]int{}
	total := 0
	for i, u := range us {
		for _, a := range (apps.QueryApp{}).Mine(u.Records) {
			if who[a.Primary] == nil {
				who[a.Primary] = map[int]bool{}
			}
			who[a.Primary][i] = true
			reports[a.Primary]++
			total++
		}
	}
	open := 0
	for a, n := range reports {
		if len(who[a]) >= k {
			open += n
		}
	}
	return float64(open) / float64(max(total, 1))
}

// TestBoundServiceChild is the child process of
// BenchmarkBoundAggregatorService, not a test: it skips unless the
// benchmark started it. It runs the aggregator service (New, group
// "bound") until it has committed the given number of reports (Reports
// + Dropped, counted after each commit), at most 10 minutes, then stops
// it and prints its counters.
func TestBoundServiceChild(t *testing.T) {
	spec := os.Getenv(boundChildEnv)
	if spec == "" {
		t.Skip("the child process of BenchmarkBoundAggregatorService")
	}
	f := strings.Split(spec, ",")
	if len(f) != 5 {
		t.Fatalf("%s=%q: want broker,keyfile,reports,keysdir,mode", boundChildEnv, spec)
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want broker,keyfile,reports,keysdir,mode", boundChildEnv, spec)
	}
	stopProfile, err := profile.StartCPU() // CROWDLOG_BOUND_CPUPROFILE
	if err != nil {
		t.Fatal(err)
	}
	defer stopProfile()
	s, err := New([]string{f[0]}, []string{f[1]}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.GroupID = "bound"
	keysDir, mode := f[3], f[4]
	if mode != "off" {
		s.ReportKeys = func(epoch string) (*token.PrivateKey, error) {
			return keydir.LoadTokenKey(keysDir, token.KindReport, epoch)
		}
	}
	if strings.HasPrefix(mode, "arc") {
		s.ARCKeys = func(epoch string) (*arc.PrivateKey, error) { return keydir.LoadARCKey(keysDir, epoch) }
	}
	s.VerifyOnArrival = mode == "arc-arrival"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Minute)
	for s.Reports.Load()+s.Dropped.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the service committed %d of %d reports in 10 min", s.Reports.Load()+s.Dropped.Load(), n)
		}
		select {
		case err := <-done:
			t.Fatalf("the service stopped after %d of %d reports: %v", s.Reports.Load()+s.Dropped.Load(), n, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the service did not stop within 1 min of its context's end")
	}
	fmt.Printf("BOUNDCHILD reports=%d dropped=%d decrypted=%d\n", s.Reports.Load(), s.Dropped.Load(), s.Decrypted.Load())
}

// BenchmarkBoundPendingBytes is the pending-bytes line of `make
// bench-bounds`: the memory an aggregator Partition keeps per pending
// report. It applies CROWDLOG_BOUND_PENDING (default 1,000,000) synthetic
// reports, each of a distinct artifact (FT_u, k = 5: none reaches k; a
// random tag, id and share, one valid commitment, a 100-byte ciphertext:
// the bundled log's query reports are 90–110 bytes), to one NewPartition
// with its pending bounds raised above the count and its spill records in
// a directory (Partition.SpillDir, as the service runs it), through
// ApplyReport: the state step Apply ends in, without the HPKE open that
// only costs time. Reports are made one at a time, so the benchmark holds
// none. Metrics: B/report is runtime.MemStats.HeapInuse after
// runtime.GC, after minus before, over the count; rss-B/report the same
// for the process's resident set (VmRSS); spill-B/report the disk. Run
// with -benchtime 1x. With CROWDLOG_BOUND_HEAPPROFILE=FILE it writes a heap
// profile there while the partition holds every report.
func BenchmarkBoundPendingBytes(b *testing.B) {
	n := envInt("CROWDLOG_BOUND_PENDING", 1_000_000)
	sec, err := star.NewUserSecret()
	if err != nil {
		b.Fatal(err)
	}
	s, err := star.DeriveSealing(star.LocalOmega("query", "bound", "any"), "query", "bound", star.FTu, 5)
	if err != nil {
		b.Fatal(err)
	}
	model, err := s.Seal(&sec, "any", "")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		dir := b.TempDir()
		p := NewPartition(0, 1, nil)
		p.SpillDir = dir
		p.MaxPendingReports, p.MaxPendingBytes = int64(n)+1, 1<<50
		before, rssBefore := heapInuse(), rss(b)
		applyPending(b, p, model, n)
		after, rssAfter := heapInuse(), rss(b)
		if err := profile.WriteHeap(); err != nil { // what the pending state is made of
			b.Fatal(err)
		}
		if p.Stats.Reports != int64(n) || p.PendingTags() != n || p.Stats.Decrypted != 0 || p.Err() != nil {
			b.Fatalf("%d reports accepted, %d pending tags, %d decrypted, spill error %v; want %d, %d, 0, none (dropped %v)",
				p.Stats.Reports, p.PendingTags(), p.Stats.Decrypted, p.Err(), n, n, p.Stats.Dropped)
		}
		var disk int64
		for _, e := range p.eps {
			if fs, ok := e.spill.(*fileSpill); ok {
				disk += fs.size + int64(len(fs.buf))
			}
		}
		runtime.KeepAlive(p)
		b.ReportMetric(float64(n), "reports")
		b.ReportMetric((float64(after)-float64(before))/float64(n), "B/report")
		b.ReportMetric((float64(rssAfter)-float64(rssBefore))/float64(n), "rss-B/report")
		b.ReportMetric(float64(disk)/float64(n), "spill-B/report")
		p.Close()
	}
}

// applyPending applies n reports shaped like model (its app, epoch,
// policy, k and commitment) to p, each with a random tag, id, share and
// 100-byte ciphertext: n singleton groups below threshold.
func applyPending(b *testing.B, p *Partition, model *star.Report, n int) {
	r := *model
	r.Ciphertext = make([]byte, 100)
	for i := 0; i < n; i++ {
		rand.Read(r.Tag[:])
		rand.Read(r.ID[:])
		rand.Read(r.Ciphertext)
		r.Share.X, r.Share.Y = protocol.G.RandomNonZeroScalar(rand.Reader), protocol.G.RandomScalar(rand.Reader)
		p.ApplyReport(&r)
		if i%1_000_000 == 999_999 {
			b.Logf("%d pending reports", i+1)
		}
	}
}

// rss is the process's resident set size in bytes (VmRSS of
// /proc/self/status), after returning the heap's free pages to the
// system (debug.FreeOSMemory): what the process needs resident, not what
// the collector has not handed back yet.
func rss(b *testing.B) uint64 {
	debug.FreeOSMemory()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// heapInuse is runtime.MemStats.HeapInuse after two garbage collections.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkBoundTokenVerify is the crypto bound of a report token's check
// in the aggregator-service-tokens line of `make bench-bounds`: one
// token.PrivateKey.Verify (RFC 9578 §5.4 redemption: hash to ristretto255,
// one scalar multiplication by the report-token key, one hash), on one
// goroutine; cpu-ns/op is this process's user+system CPU time per token.
// The line's bound per report is this plus the aggregator layer's HPKE
// open (BenchmarkBoundHPKE, 512 B). Run with -benchtime Nx.
func BenchmarkBoundTokenVerify(b *testing.B) {
	key, err := token.GenerateKey(token.KindReport, "bound")
	if err != nil {
		b.Fatal(err)
	}
	toks := tokentest.MintN(b, key, 100)
	c0 := processCPU(b)
	i := 0
	for b.Loop() {
		if err := key.Verify(toks[i%len(toks)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(processCPU(b)-c0)/float64(b.N), "cpu-ns/op")
}
