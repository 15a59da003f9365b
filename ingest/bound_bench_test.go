package ingest

import (
	"context"
	"crypto/rand"
	"fmt"
	"syscall"
	"testing"
	"time"

	circloprf "github.com/cloudflare/circl/oprf"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// cpuTime is the process's user+system CPU time so far (getrusage(2)).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBoundClient is the client-seal line of `make bench-bounds` and
// the client's part of the end-to-end bound. Every sub-benchmark reports
// cpu-ns/op, the process's CPU time (getrusage) per artifact:
//
//   - op=submit: Device.Submit of 100 made-up artifacts at a time (memory
//     state, publishing discards) with a local randomness stub (ω from
//     SHA-256, no OPRF): the client's sealing path, measured;
//   - op=derive: star.DeriveSealing (FT_u, k = 5: ω to the sealing, with
//     the Feldman commitment);
//   - op=seal-report: Sealing.Seal (the share and the payload's AEAD);
//   - op=voprf-client: the client's VOPRF work per artifact, oprf.Blind and
//     oprf.Finalize (proof verification) of a batch of 100, the service's
//     evaluation excluded;
//   - op=oprf-eval: the randomness service's oprf.Evaluate (with proof) per
//     artifact, batches of 100.
//
// The three HPKE seals of the onion are protocol/onion's
// BenchmarkBoundHPKE.
func BenchmarkBoundClient(b *testing.B) {
	b.Run("op=submit", func(b *testing.B) {
		const batch = 100
		_, route := newHops(b)
		c := &Client{App: apps.QueryApp{}, Epoch: "e", Policy: star.FTu, K: 5, Randomness: fixedRandomness{}, Route: route,
			Publish: func(context.Context, []byte) error { return nil }}
		d := newClientDevice(c, newMemStore())
		arts := make([]apps.Artifact, batch)
		sent := 0
		c0 := cpuTime()
		for i := 0; b.Loop(); i++ {
			for j := range arts {
				arts[j] = apps.Artifact{Primary: fmt.Sprintf("made up query %d", (i*batch+j)%1000), Time: t0.Add(time.Duration(i*batch+j) * time.Second)}
			}
			n, err := d.Submit(context.Background(), "query", arts...)
			if err != nil {
				b.Fatal(err)
			}
			sent += n
		}
		if sent == 0 {
			b.Fatal("nothing submitted")
		}
		b.ReportMetric(float64(cpuTime()-c0)/float64(sent), "cpu-ns/op")
		b.ReportMetric(float64(sent), "artifacts")
	})
	omega := make([]byte, 64)
	rand.Read(omega)
	b.Run("op=derive", func(b *testing.B) {
		c0 := cpuTime()
		for b.Loop() {
			if _, err := star.DeriveSealing(omega, "query", "e", star.FTu, 5); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
	})
	b.Run("op=seal-report", func(b *testing.B) {
		s, err := star.DeriveSealing(omega, "query", "e", star.FTu, 5)
		if err != nil {
			b.Fatal(err)
		}
		u, _ := star.NewUserSecret()
		c0 := cpuTime()
		for b.Loop() {
			if _, err := s.Seal(&u, "made up query", "made up secondary"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
	})
	key, _ := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	const batch = 100
	inputs := make([][]byte, batch)
	for i := range inputs {
		inputs[i] = oprf.OPRFInput("query", "e", fmt.Sprint("made up query ", i))
	}
	// voprf runs rounds of batch artifacts and returns the CPU time of the
	// client's part and of the service's part, and the artifacts done.
	voprf := func(b *testing.B) (client, service time.Duration, n int) {
		for b.Loop() {
			c0 := cpuTime()
			fin, q, err := oprf.Blind(key.Public(), "e", inputs)
			if err != nil {
				b.Fatal(err)
			}
			c1 := cpuTime()
			resp, err := oprf.Evaluate(key, q)
			if err != nil {
				b.Fatal(err)
			}
			c2 := cpuTime()
			if _, err := oprf.Finalize(fin, resp); err != nil {
				b.Fatal(err)
			}
			c3 := cpuTime()
			client += c1 - c0 + c3 - c2
			service += c2 - c1
			n += batch
		}
		return client, service, n
	}
	b.Run("op=voprf-client", func(b *testing.B) {
		client, _, n := voprf(b)
		b.ReportMetric(float64(client)/float64(n), "cpu-ns/op")
	})
	b.Run("op=oprf-eval", func(b *testing.B) {
		_, service, n := voprf(b)
		b.ReportMetric(float64(service)/float64(n), "cpu-ns/op")
	})
}

// BenchmarkBoundLogShape is not a speed measurement: it counts, in the
// bundled log, the query reports a client sends (QueryApp.Mine per user)
// and the sealing derivations and VOPRF evaluations they need (one per
// distinct artifact per user, as Client.seal dedups), the shape `make
// bench-bounds` needs to turn per-artifact costs into the end-to-end
// bound. Metrics reports and derivations. Run with -benchtime 1x.
func BenchmarkBoundLogShape(b *testing.B) {
	for b.Loop() {
		reports, derivations := 0, 0
		_, err := aol.ReadUsers("../testdata/aol-top1000.tsv.gz", func(u aol.User) error {
			seen := map[string]bool{}
			for _, a := range (apps.QueryApp{}).Mine(u.Records) {
				reports++
				if !seen[a.Primary] {
					seen[a.Primary] = true
					derivations++
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(reports), "reports")
		b.ReportMetric(float64(derivations), "derivations")
	}
}
