package aggregator

import (
	"crypto/rand"
	"fmt"
	"syscall"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// BenchmarkPrepareBatch is the stateless part of Apply (Prepare: HPKE
// peel, parse, report-token verification, ARC presentation verification)
// over PrepareBatch's pool, per report: 1,024 reports of distinct users
// (FT_u, k = 5, 64 artifacts) wrapped in the aggregator layer, with no
// token ("off"), a report token each ("tokens"), or a report token and a
// presentation of its own credential each ("arc": 256 reports, every
// presentation distinct, so none is a cache hit; no verifyCache). Run with
// -cpu 1,2 to see how Prepare scales with GOMAXPROCS (the pool is sized at
// its first use, so run each -cpu value in its own process:
// `-cpu 1` and `-cpu 2` separately). Metrics: ns/report is wall time,
// cpu-ns/report the process's user+system CPU time (getrusage) per report;
// their ratio is the cores the batch kept busy.
func BenchmarkPrepareBatch(b *testing.B) {
	for _, mode := range []string{"off", "tokens", "arc"} {
		b.Run(mode, func(b *testing.B) {
			n := 1024
			if mode == "arc" {
				n = 256
			}
			key, _ := onion.GenerateKeyPair(1)
			reportKey, _ := token.GenerateKey(token.KindReport, "e1")
			arcKey, _ := arc.GenerateKey(rand.Reader)
			sealings := make([]star.Sealing, 64)
			for i := range sealings {
				sealings[i] = sealing(b, fmt.Sprintf("artifact %d", i), star.FTu, 5)
			}
			msgs := make([]Message, n)
			for i := range msgs {
				s := &sealings[i%len(sealings)]
				var r *star.Report
				if mode == "arc" {
					pres, tag := present(b, credential(b, arcKey), s)
					r, _ = s.SealARC(tag, "item", "")
					payWith(b, reportKey, r)
					r.Presentation = pres
				} else {
					u, _ := star.NewUserSecret()
					r, _ = s.Seal(&u, "item", "")
					if mode == "tokens" {
						payWith(b, reportKey, r)
					}
				}
				msgs[i] = Message{Value: wrap(b, key, r)}
			}
			p := NewPartition(0, 1, []*onion.KeyPair{key})
			if mode != "off" {
				p.ReportKeys = keysOf(reportKey)
			}
			if mode == "arc" {
				p.ARCKeys = func(string) (*arc.PrivateKey, error) { return arcKey, nil }
			}
			p.openEpoch("query", "e1") // loads the epoch's keys, as an EpochOpen does
			for _, pm := range p.PrepareBatch(msgs) {
				if pm.report == nil || pm.checks.later || pm.checks.tokenPre != "" || pm.checks.tokenPost != "" || pm.checks.presVerdict != "" {
					b.Fatalf("%s: a report failed its checks: %+v", mode, pm.checks)
				}
			}
			cpu0 := processCPU(b)
			b.ResetTimer()
			for b.Loop() {
				p.PrepareBatch(msgs)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/report")
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N*n), "cpu-ns/report")
		})
	}
}

// processCPU is the process's user+system CPU time so far, ns.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
